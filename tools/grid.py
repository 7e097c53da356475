"""The results grid over the zoo: every cell (arch x dataset x noise rate) of grid.yaml, each
with `seeds` independent replicates, as DVC experiments; one committed result file per
finished replicate, a table and a figure.

    python tools/grid.py                      # every replicate of grid.yaml not yet in results/grid/
    python tools/grid.py --only lenet         # units whose name contains "lenet"
    python tools/grid.py --report-only        # rebuild results/grid.md and plots/grid.png
    python tools/grid.py --check lenet-mnist-noise0.05-seed0   # rerun one unit, compare

A unit (cell, seed) runs `dvc exp run --temp --name grid-<unit> -S seed=<s> ...` (the
workspace is never touched; `dvc exp show` lists them), then its headline is read from the
experiment's commit (metrics/train.json, metrics/deltas.json, results/summary.json,
results/membership.json) into results/grid/<cell>/seed_<s>.json, stamped with the unit's
settings; the code it ran is recorded beside (commit). A rerun skips units whose settings
are unchanged, so an interrupted grid resumes and a code change that alters no number
invalidates nothing; `--check UNIT` reruns one unit at the current code and lists every
number that moved (none: the finished units stand). A cell's replicates are combined by
bnmem.attack.intervals.across_replicates (random effects, Hartung–Knapp interval: it
includes replicate-to-replicate variation); a cell where an arm misses the fit rule (grid.yaml
`fit_rule`) in any replicate is flagged and its comparisons are not evidence.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from itertools import product
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's bnmem, not another's editable install
PAIRS = ("batchnorm_minus_none", "groupnorm_minus_none")
# figure key in a replicate's deltas -> label; the primary criterion first
FIGURES = {"auc_all_matched_heldout": "matched held-out accuracy (primary)",
           "auc_all_matched_fit": "matched fit",
           "auc_identity_equal_epochs": "equal epochs"}


def cells(spec: dict) -> list[tuple[str, dict]]:
    """(name, {param: value}) of every cell, in grid order: `common`, then `per_arch`, then
    `per_arch_dataset` (keyed `<arch>-<dataset>`) over params.yaml."""
    pairs = {f"{a}-{d}" for a, d in product(spec["archs"], spec["datasets"])}
    for key in spec.get("per_arch_dataset", {}):
        if key not in pairs:
            raise SystemExit(f"grid.yaml per_arch_dataset: {key!r} is not <arch>-<dataset> of "
                             f"the grid; valid: {', '.join(sorted(pairs))}")
    out = []
    for arch, dataset, noise in product(spec["archs"], spec["datasets"], spec["noise_rates"]):
        params = {"arch": arch, "dataset": dataset, "noise_rate": noise, "arms": spec["arms"],
                  **spec.get("common", {}), **spec.get("per_arch", {}).get(arch, {}),
                  **spec.get("per_arch_dataset", {}).get(f"{arch}-{dataset}", {})}
        out.append((f"{arch}-{dataset}-noise{noise}", params))
    return out


def units(spec: dict) -> list[tuple[str, str, int, dict]]:
    """(unit name, cell, seed, params with seed) of every replicate, seed-major: the first
    replicate of every cell before any second one, so a partial grid covers every cell."""
    return [(f"{name}-seed{seed}", name, seed, {**params, "seed": seed})
            for seed in spec.get("seeds", [0]) for name, params in cells(spec)]


def stamp(params: dict) -> str:
    """The unit's settings (params, seed included): a result is stale only when they
    change. The code is recorded, not stamped (`--check` shows whether a change moved a
    number)."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]


def code_commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()


def _set_args(params: dict) -> list[str]:
    args = []
    for k, v in params.items():
        args += ["-S", f"{k}={json.dumps(v) if isinstance(v, list) else v}"]
    return args


def _exp_commit(name: str) -> str:
    refs = subprocess.run(["git", "for-each-ref", "refs/exps", "--format=%(refname) %(objectname)"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
    hits = [r.split()[1] for r in refs if r and r.split()[0].endswith("/" + name)]
    if not hits:
        raise RuntimeError(f"experiment {name} not found under refs/exps")
    return hits[-1]


def _show(commit: str, path: str) -> dict:
    return json.loads(subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT,
                                     capture_output=True, text=True, check=True).stdout)


def summarize(train: dict, deltas: dict, summary: dict, fit_rule: dict,
              membership: dict | None = None) -> dict:
    """A replicate's grid row: per-arm fit, every arm - none delta (equal epochs, matched
    held-out accuracy between annealed endpoints and matched fit there; value and
    interval), the claims' verdicts, and which arms miss the fit rule."""
    floor = fit_rule["min_clean_train_acc"]
    flagged = sorted(a for a, m in train.items() if (m.get("clean_train_acc") or 0) < floor)
    rows = {pair: dict(d) for pair, d in deltas.items() if pair.endswith("_minus_none")}
    fr = ((membership or {}).get("frontier") or {}).get("compare") or {}
    compare = (membership or {}).get("compare") or {}
    for pair, row in rows.items():
        crit = (fr.get(pair) or {}).get("criteria") or {}
        fit = crit.get("fit")
        if fit:
            row["auc_all_matched_fit"] = {k: fit["figures"]["auc_all"]["at_common"].get(k)
                                          for k in ("value", "lo", "hi")}
        # each design's SD (bnmem.attack.intervals.IntervalPlan.variances), so a replicate
        # can be read under another interval procedure without rerunning it
        sources = {"auc_all_matched_fit": (crit.get("fit") or {}).get("figures", {}).get("auc_all", {}).get("at_common"),
                   "auc_all_matched_heldout": (crit.get("heldout") or {}).get("figures", {}).get("auc_all", {}).get("at_common"),
                   "auc_identity_equal_epochs": ((compare.get(pair) or {}).get("equal_epochs") or {}).get("auc_identity")}
        for fig, src in sources.items():
            if fig in row and (src or {}).get("sd"):
                row[fig] = {**row[fig], "sd": src["sd"]}
    verdicts = {c.get("claim", str(i)): c.get("verdict") for i, c in enumerate(summary.get("claims", []))}
    return {"fit": {a: {k: m.get(k) for k in ("clean_train_acc", "test_acc", "flipped_mem_acc")}
                    for a, m in train.items()},
            "deltas": rows, "verdicts": verdicts, "flagged_arms": flagged}


def _machine() -> str:
    """lscpu's model, family and model of the machine that ran the unit (wall times differ
    between machines; not part of the stamp)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from lscpu import describe
    return f"{describe()}, {os.cpu_count()} cores"


def run_unit(unit: str, cell: str, seed: int, params: dict, fit_rule: dict, out: Path,
             exp: str | None = None) -> dict:
    """Run one replicate as a DVC experiment; its record goes to out/<cell>/seed_<s>.json
    (with `exp`, a check run: the record is returned, not written)."""
    name = exp or f"grid-{unit}"
    t0 = time.perf_counter()
    res = subprocess.run(["dvc", "exp", "run", "--temp", "--name", name, *_set_args(params)],
                         cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"unit {unit} failed: {' | '.join(tail)}")
    commit = _exp_commit(name)
    row = summarize(_show(commit, "metrics/train.json"), _show(commit, "metrics/deltas.json"),
                    _show(commit, "results/summary.json"), fit_rule,
                    _show(commit, "results/membership.json"))
    record = {"cell": cell, "seed": seed, "unit": unit, "params": params, "stamp": stamp(params),
              "experiment": name, "commit": commit, "code": code_commit(),
              "wall_s": round(wall, 1), "machine": _machine(), **row}
    if exp is None:
        (out / cell).mkdir(parents=True, exist_ok=True)
        (out / cell / f"seed_{seed}.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def numbers(record: dict) -> dict[str, float]:
    """Every number of a record's results (fit, deltas), flat: what --check compares."""
    out = {}
    for arm, m in record["fit"].items():
        out.update({f"fit.{arm}.{k}": v for k, v in m.items()})
    for pair, d in record["deltas"].items():
        for fig, p in d.items():
            for k, v in (p or {}).items():
                if isinstance(v, dict):  # the designs' SDs
                    out.update({f"{pair}.{fig}.{k}.{j}": x for j, x in v.items()})
                else:
                    out[f"{pair}.{fig}.{k}"] = v
    return out


def combine(reps: list[dict], fit_rule: dict) -> dict:
    """A cell from its replicates: per comparison and figure the random-effects estimate
    (bnmem.attack.intervals.across_replicates), the mean fit per arm, the arms that miss
    the fit rule in any replicate, the total wall time."""
    from bnmem.attack.intervals import across_replicates
    deltas = {}
    for pair in sorted({p for r in reps for p in r["deltas"]}):
        deltas[pair] = {}
        for fig in FIGURES:
            pts = [(r["deltas"].get(pair) or {}).get(fig) or {} for r in reps]
            c = across_replicates([p.get("value") for p in pts], [p.get("lo") for p in pts],
                                  [p.get("hi") for p in pts])
            if len(reps) == 1 and pts[0].get("value") is not None:  # its own interval only
                c.update({k: pts[0].get(k) for k in ("value", "lo", "hi")}, single=True)
            c["per_replicate"] = [p.get("value") for p in pts]
            deltas[pair][fig] = c
    arms = sorted({a for r in reps for a in r["fit"]})
    fit = {a: sum(r["fit"][a]["clean_train_acc"] or 0 for r in reps) / len(reps) for a in arms}
    flagged = sorted({a for r in reps for a in r["flagged_arms"]})
    misses = {a: sum(a in r["flagged_arms"] for r in reps) for a in flagged}
    return {"cell": reps[0]["cell"], "params": {k: v for k, v in reps[0]["params"].items()
                                                  if k != "seed"},
            "seeds": [r["seed"] for r in reps], "deltas": deltas, "fit": fit,
            "flagged_arms": flagged, "misses": misses, "wall_s": sum(r["wall_s"] for r in reps)}


def _flag_text(c: dict) -> str:
    """'no', or which arms missed the fit rule in how many replicates (the no-norm arm is
    called "none", so a bare arm name would read as "nothing flagged")."""
    if not c["flagged_arms"]:
        return "no"
    k = len(c["seeds"])
    return "yes: " + ", ".join(f"`{a}` misses in {c['misses'][a]} of {k}" for a in c["flagged_arms"])


def _cell_text(p: dict | None, mde: bool = False) -> str:
    p = p or {}
    if p.get("value") is None:
        return "—"
    ci = f" [{100 * p['lo']:+.2f}, {100 * p['hi']:+.2f}]" if p.get("lo") is not None else ""
    det = f"; detects ±{100 * p['mde']:.1f}" if mde and p.get("mde") is not None else ""
    if mde and p.get("spread") is not None and not p.get("single"):
        det += f"; spread {p['spread']:.2f}"
    one = " (1 replicate: its own interval)" if p.get("single") else ""
    return f"{100 * p['value']:+.2f}{ci}{det}{one}"


def threshold(params: dict) -> float:
    """The AUC claim's threshold for a cell: 4 points at >= 5 % outliers, else 3 (as the
    report's claims table, bnmem.report.summary.claims)."""
    rate = float(params.get("noise_rate", 0.05)) + float(params.get("ood_rate", 0.01))
    return 0.04 if rate >= 0.05 else 0.03


def _floored(rec: dict | None) -> dict | None:
    """A combined figure read with its floored interval (across_replicates' lo_floor /
    hi_floor; a single replicate's own interval is its own floor)."""
    if not rec or rec.get("lo_floor") is None:
        return rec
    return {**rec, "lo": rec["lo_floor"], "hi": rec["hi_floor"]}


def auc_verdicts(cells_: list[dict], floored: bool = False) -> list[tuple[str, str]]:
    """(verdict, verdict with Holm over the grid) on 'BN raises LiRA AUC by >= threshold'
    per cell, from its replicates' combined intervals by bnmem.report.verdict (primary:
    matched held-out accuracy; matched fit checked against it); a flagged cell is not
    evidence and stays out of the family. floored: every interval read with its scale
    floored at the replicates' own (the sensitivity read, `_floored`)."""
    from bnmem.report.verdict import (EQUAL_ONLY, EQUAL_UNMATCHED, Evidence, holm,
                                      judge_criteria, p_values)
    out, fam = [], []
    for c in cells_:
        d = c["deltas"].get("batchnorm_minus_none") or {}
        if floored:
            d = {k: _floored(v) for k, v in d.items()}
        eq = Evidence.of(d.get("auc_identity_equal_epochs"), training=True)
        mt = Evidence.of(d.get("auc_all_matched_heldout"), training=True)
        fit = Evidence.of(d.get("auc_all_matched_fit"), training=True)
        th = threshold(c["params"])
        v = judge_criteria(eq, mt, {"fit": fit}, 1, th)[0] if (eq or mt) else "—"
        out.append(v)
        if not c["flagged_arms"] and v != "—":
            use_eq = v in (EQUAL_ONLY, EQUAL_UNMATCHED) or not (mt and mt.usable)
            decisive = eq if use_eq else mt
            rec = d.get("auc_identity_equal_epochs" if use_eq else "auc_all_matched_heldout") or {}
            # a combined cell's interval is Hartung-Knapp's t with k - 1 df: read it so
            df = None if rec.get("single") or rec.get("replicates", 1) < 2 else rec["replicates"] - 1
            fam.append((len(out) - 1, v, *p_values(decisive, 1, th, df=df)))
    adjusted = dict(zip((i for i, *_ in fam), holm([v for _, v, _, _ in fam],
                                                   [b for *_, b, _ in fam],
                                                   [s for *_, s in fam])))
    return [("not evidence (flagged)", "not evidence (flagged)") if c["flagged_arms"]
            else (v, adjusted.get(i, v)) for i, (c, v) in enumerate(zip(cells_, out))]


def floor_lines(cells_: list[dict], verdicts: list[tuple[str, str]]) -> list[str]:
    """grid.md's sensitivity read: the verdicts again with every combined interval's scale
    floored at the replicates' own standard error (Hartung–Knapp never narrower than the
    replicates' intervals), and the cells whose verdict moves."""
    moved = [(c, v, f) for c, v, f in zip(cells_, verdicts, auc_verdicts(cells_, floored=True))
             if v != f]
    out = ["**Verdicts that rest on Hartung–Knapp narrowing.** The same verdicts with every "
           "combined interval's scale floored at the inverse-variance pooled standard error "
           "of the replicates (the modified Hartung–Knapp, q* = max(1, q): never narrower "
           "than t(k - 1) times that SE; it over-covers where the replicates' intervals are "
           "right, so this is a sensitivity read, not the verdict): "]
    if not moved:
        return [out[0] + "no verdict moves."]
    out[0] += f"{len(moved)} cell(s) move."
    out += ["", "| cell | matched held-out accuracy, floored | verdict → floored | Holm → floored |",
            "|---|---|---|---|"]
    for c, (v, vh), (f, fh) in moved:
        rec = _floored((c["deltas"].get("batchnorm_minus_none") or {}).get("auc_all_matched_heldout"))
        out.append(f"| {c['cell']} | {_cell_text(rec)} | {v} → {f} | {vh} → {fh} |")
    return out


NO_EXCESS, ALIKE, GN_LARGER, SPECIFIC = (
    "no excess shown (interval covers 0)", "excess, not told apart from GroupNorm's",
    "excess, GroupNorm's larger", "excess specific to BN")


def bn_minus_gn(c: dict) -> dict | None:
    """BN − GroupNorm at the primary criterion, directly: per replicate the difference of
    the two comparisons (their shared none arm cancels), mean and t interval with k - 1 df
    over the replicates (the replicates are the independent units; their spread holds the
    within-run noise too). None with < 2 replicates."""
    from bnmem.report.replicates import across_seeds
    reps = [((c["deltas"].get(pair) or {}).get("auc_all_matched_heldout") or {}).get("per_replicate")
            or [] for pair in ("batchnorm_minus_none", "groupnorm_minus_none")]
    diff = [b - g for b, g in zip(*reps) if b is not None and g is not None]
    if len(diff) < 2:
        return None
    r = across_seeds({i: {"d": d} for i, d in enumerate(diff)})["d"]
    return {"value": r["mean"], "lo": r["lo"], "hi": r["hi"], "replicates": r["n"]}


def zoo_reading(c: dict) -> str:
    """What a cell says about BN at the primary criterion (matched held-out accuracy): BN's
    excess over none is *shown* when BN − none's interval lies above 0; it is *specific to
    BN* only when BN − GroupNorm directly (`bn_minus_gn`) lies above 0 too, *GroupNorm's
    larger* when that lies below 0, else *not told apart*; a flagged cell is not evidence.
    A description stated after the grid ran (README's per-architecture summary reads it),
    not a verdict: the verdicts are `auc_verdicts`' against the thresholds."""
    if c["flagged_arms"]:
        return "not evidence (flagged)"
    p = (c["deltas"].get("batchnorm_minus_none") or {}).get("auc_all_matched_heldout") or {}
    if p.get("lo") is None or p["lo"] <= 0:
        return NO_EXCESS
    d = bn_minus_gn(c)
    if d is None:
        return ALIKE
    return SPECIFIC if d["lo"] > 0 else GN_LARGER if d["hi"] < 0 else ALIKE


def zoo_lines(cells_: list[dict]) -> list[str]:
    """grid.md's summary per architecture and dataset (`zoo_reading` per cell)."""
    out = ["**What the zoo says** (generated; rule: `zoo_reading`, a description stated "
           "after the grid ran, not a verdict). At the primary criterion BN's excess over "
           "`none` is shown when BN − none's interval lies above 0, and it is specific to BN "
           "only when BN − GroupNorm, taken directly over the replicates (t interval, "
           "k - 1 df), lies above 0 too.", "",
           "| arch | dataset | noise | BN − none | GroupNorm − none | BN − GroupNorm | reading |",
           "|---|---|---|---|---|---|---|"]
    for c in cells_:
        d = c["deltas"]
        out.append(f"| {c['params'].get('arch')} | {c['params'].get('dataset')} | "
                   f"{c['params'].get('noise_rate')} | "
                   f"{_cell_text((d.get('batchnorm_minus_none') or {}).get('auc_all_matched_heldout'))} | "
                   f"{_cell_text((d.get('groupnorm_minus_none') or {}).get('auc_all_matched_heldout'))} | "
                   f"{_cell_text(bn_minus_gn(c))} | {zoo_reading(c)} |")
    return out


def calibration_lines(cells_: list[dict]) -> list[str]:
    """grid.md's check of the per-replicate intervals on real runs: Cochran's Q pooled per
    figure over every cell and comparison with >= 2 replicates (flagged cells included:
    the check is of the intervals, not of the claim) (bnmem.attack.intervals.pooled_spread)."""
    from bnmem.attack.intervals import pooled_spread
    out = ["**The replicates' own intervals, checked on real runs.** Cochran's Q of each cell "
           "and comparison, pooled per figure: with intervals of the right width Q / df lies "
           "in its 95 % chi-squared band; differences between seeds in truth only raise it, "
           "so Q / df below the band means the per-replicate intervals are too wide (by about "
           "*factor* in standard error), and above it that replicates differ by more than "
           "their own intervals allow (seeds that differ in truth: pool, corruption; or "
           "intervals too narrow).", "",
           "Replicates of one dataset draw their pools from the same images (the MNIST "
           "subset's 4 000 training images: two 2 000-sample pools share about half; "
           "Fashion-MNIST's 60 000: about 3 %), and a cell's two comparisons share its "
           "none arm, so the df overstate the independent evidence, more so for MNIST.", "",
           "| cells | figure | cells x comparisons | df | Q / df | 95 % band | factor |",
           "|---|---|---:|---:|---:|---|---:|"]
    groups = sorted({(c["params"].get("arch", "?"), c["params"].get("dataset", "?")) for c in cells_})
    keys = ([*groups, *sorted({(a, "all") for a, _ in groups}), ("all", "all")])
    for arch, ds in keys:
        name = "all" if arch == "all" else f"{arch}, {'all datasets' if ds == 'all' else ds}"
        for fig, label in FIGURES.items():
            rows = [(d[fig].get("spread"), d[fig].get("replicates", 0) - 1)
                    for c in cells_ if arch in ("all", c["params"].get("arch"))
                    and ds in ("all", c["params"].get("dataset"))
                    for d in c["deltas"].values()
                    if fig in d and not d[fig].get("single") and d[fig].get("replicates", 0) >= 2]
            r = pooled_spread([a for a, _ in rows], [b for _, b in rows])
            if r["q_over_df"] is None:
                continue
            factor = "—" if r["factor"] is None else f"{r['factor']:.2f}"
            out.append(f"| {name} | {label} | {r['cells']} | {r['df']} | {r['q_over_df']:.2f} | "
                       f"[{r['band'][0]:.2f}, {r['band'][1]:.2f}] | {factor} |")
    return out


def report(cells_: list[dict], spec: dict, md: Path, png: Path, n_units: int) -> None:
    """results/grid.md (one row per cell and comparison) and plots/grid.png."""
    lines = ["# Results grid", "", "*Generated by `python tools/grid.py` from results/grid/*/seed_*.json; "
             "do not edit by hand.*", "",
             f"Fit rule: every arm's final clean-train accuracy >= "
             f"{spec['fit_rule']['min_clean_train_acc']} in every replicate; a cell where an "
             "arm misses it is flagged and its comparisons are not evidence. AUC differences "
             "(points) over a cell's replicates (independent seeds: pool split, corruption, "
             "keep masks, init, batch order), random effects with the Hartung–Knapp 95 % "
             "interval (`bnmem.attack.intervals.across_replicates`: it includes "
             "replicate-to-replicate variation; with one replicate a cell has no interval). "
             "*detects*: the smallest true difference the cell finds with 80 % power, from "
             "the replicates' own intervals. *spread*: Cochran's Q / (k - 1), the replicates' "
             "spread against their own intervals (1 expected; well below 1 when their "
             "intervals are too wide, as the matched intervals are in simulation: "
             "bench/results/coverage_components.md); the Hartung-Knapp interval scales with "
             "the observed spread, so it narrows there, and with 2 df its width is itself "
             "uncertain. Holm reads each interval with the quantile it was built with "
             "(t with k - 1 df). "
             "Verdicts by `bnmem.report.verdict` at the cell's threshold, the primary "
             "criterion matched held-out accuracy (annealed endpoints), matched fit checked "
             "against it; Holm-Bonferroni over the grid's unflagged cells.", "",
             "| cell | comparison | replicates | equal epochs | matched held-out accuracy (primary) | matched fit | clean-train acc, mean (arm / none) | flagged | threshold (points) | verdict on \"BN raises AUC by >= threshold\" | same, Holm over the grid | wall (min) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = auc_verdicts(cells_)
    for c, (v, vh) in zip(cells_, verdicts):
        for pair, d in sorted(c["deltas"].items()):
            arm = pair.removesuffix("_minus_none")
            lines.append(
                f"| {c['cell']} | {arm} − none | {len(c['seeds'])} | "
                f"{_cell_text(d.get('auc_identity_equal_epochs'))} | "
                f"{_cell_text(d.get('auc_all_matched_heldout'), mde=True)} | "
                f"{_cell_text(d.get('auc_all_matched_fit'))} | "
                f"{c['fit'].get(arm, 0):.3f} / {c['fit'].get('none', 0):.3f} | "
                f"{_flag_text(c)} | "
                f"{100 * threshold(c['params']):.0f} | "
                f"{v if arm == 'batchnorm' else ''} | {vh if arm == 'batchnorm' else ''} | "
                f"{c['wall_s'] / 60:.1f} |")
    lines += ["", *zoo_lines(cells_)]
    lines += ["", *floor_lines(cells_, verdicts)]
    lines += ["", *calibration_lines(cells_)]
    done = sum(len(c["seeds"]) for c in cells_)
    lines += ["", f"Replicates finished: {done} of {n_units} ({len(cells_)} of "
              f"{len(cells(spec))} cells); total wall time "
              f"{sum(c['wall_s'] for c in cells_) / 60:.1f} min.", ""]
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text("\n".join(lines) + "\n")
    figure(cells_, png)


def figure(cells_: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(c["cell"], pair.removesuffix("_minus_none"), d, bool(c["flagged_arms"]))
            for c in cells_ for pair, d in sorted(c["deltas"].items())]
    fig, ax = plt.subplots(figsize=(10, 0.42 * max(len(rows), 2) + 1.2))
    style = (("auc_identity_equal_epochs", -0.2, "#d62728"), ("auc_all_matched_heldout", 0.0, "#1f77b4"),
             ("auc_all_matched_fit", 0.2, "#2ca02c"))
    for i, (cell, arm, d, flagged) in enumerate(rows):
        for key, off, colour in style:
            p = d.get(key) or {}
            reps = [v for v in p.get("per_replicate", []) if v is not None]
            ax.plot([100 * v for v in reps], [i + off] * len(reps), "|", color=colour, ms=6,
                    alpha=0.35 if flagged else 0.8)
            if p.get("value") is None:
                continue
            ax.errorbar(100 * p["value"], i + off, xerr=[[100 * (p["value"] - p["lo"])],
                                                          [100 * (p["hi"] - p["value"])]]
                        if p.get("lo") is not None else None, fmt="o", color=colour,
                        alpha=0.35 if flagged else 1.0, ms=4, capsize=2)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(rows)), [f"{c}: {a} − none{' (flagged)' if f else ''}"
                                     for c, a, _, f in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("AUC difference vs none, points, 95 % interval over replicates (red: equal "
                  "epochs, blue: matched held-out accuracy, green: matched fit; ticks: replicates)",
                  fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110, metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)


def load(out: Path, spec: dict) -> list[dict]:
    """The finished replicates of the spec's units, current settings only, grid order."""
    recs = []
    for unit, cell, seed, params in units(spec):
        path = out / cell / f"seed_{seed}.json"
        if path.is_file():
            rec = json.loads(path.read_text())
            if rec.get("stamp") == stamp(params):
                recs.append(rec)
    return recs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="grid.yaml")
    p.add_argument("--only", default="", help="run only units whose name contains this")
    p.add_argument("--out", default="results/grid")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--check", default=None, metavar="UNIT",
                   help="rerun one finished unit at the current code and list the numbers that moved")
    args = p.parse_args()
    spec = yaml.safe_load((ROOT / args.spec).read_text())
    out = ROOT / args.out
    todo = units(spec)
    if args.check:
        (unit, cell, seed, params), = [u for u in todo if u[0] == args.check] or [(None,) * 4]
        if unit is None:
            sys.exit(f"--check: no unit {args.check!r}; units look like {todo[0][0]}")
        old = json.loads((out / cell / f"seed_{seed}.json").read_text())
        new = run_unit(unit, cell, seed, params, spec["fit_rule"], out, exp=f"grid-check-{unit}")
        a, b = numbers(old), numbers(new)
        moved = {k: (a.get(k), b.get(k)) for k in sorted(a) if a.get(k) != b.get(k)}
        added = sorted(k for k in b if k not in a)  # figures the unit's code did not record yet
        print(f"{unit}: code {old['code'][:7]} on {old.get('machine', 'an unrecorded machine')} "
              f"-> {new['code'][:7]} on {new['machine']}: {len(a) - len(moved)} of {len(a)} "
              f"numbers identical; moved: {moved or 'none'}; new since (not compared): "
              f"{', '.join(added) or 'none'}")
        sys.exit(1 if moved else 0)
    for unit, cell, seed, params in todo:
        if args.report_only or args.only not in unit:
            continue
        path = out / cell / f"seed_{seed}.json"
        if path.is_file() and json.loads(path.read_text()).get("stamp") == stamp(params):
            print(f"{unit}: done", flush=True)
            continue
        try:
            rec = run_unit(unit, cell, seed, params, spec["fit_rule"], out)
        except RuntimeError as exc:
            print(f"grid: {exc}", file=sys.stderr, flush=True)
            continue
        missed = ", ".join(rec["flagged_arms"]) or "no arm"
        print(f"{unit}: {rec['wall_s']:.0f} s; missed the fit rule: {missed}", flush=True)
        write_report(out, spec, len(todo))
    write_report(out, spec, len(todo))


def write_report(out: Path, spec: dict, n_units: int) -> None:
    recs = load(out, spec)
    by_cell: dict[str, list[dict]] = {}
    for r in recs:
        by_cell.setdefault(r["cell"], []).append(r)
    combined = [combine(by_cell[name], spec["fit_rule"]) for name, _ in cells(spec) if name in by_cell]
    report(combined, spec, ROOT / "results" / "grid.md", ROOT / "plots" / "grid.png", n_units)
    print(f"results/grid.md: {len(recs)} replicates in {len(combined)} cells", flush=True)


if __name__ == "__main__":
    main()
