"""The results grid over the zoo: every cell (arch x dataset x noise rate) of grid.yaml as a
DVC experiment, one committed result file per finished cell, a table and a figure.

    python tools/grid.py                      # every cell of grid.yaml not yet in results/grid/
    python tools/grid.py --only lenet         # cells whose name contains "lenet"
    python tools/grid.py --report-only        # rebuild results/grid.md and plots/grid.png

Each cell runs `dvc exp run --temp --name grid-<cell> -S ...` (the workspace is never
touched; `dvc exp show` lists the cells next to other experiments), then its headline is
read from the experiment's commit (metrics/train.json, metrics/deltas.json,
results/summary.json) into results/grid/<cell>.json, stamped with the cell's settings and
the code it ran. A killed grid resumes at the first missing or stale cell; a partial grid
still gives a table. A cell where an arm misses the fit rule (grid.yaml `fit_rule`) is
flagged and its comparisons are not read as evidence.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from itertools import product
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def cells(spec: dict) -> list[tuple[str, dict]]:
    """(name, {param: value}) of every cell, in grid order."""
    out = []
    for arch, dataset, noise in product(spec["archs"], spec["datasets"], spec["noise_rates"]):
        params = {"arch": arch, "dataset": dataset, "noise_rate": noise, "arms": spec["arms"],
                  **spec.get("common", {}), **spec.get("per_arch", {}).get(arch, {})}
        out.append((f"{arch}-{dataset}-noise{noise}", params))
    return out


def stamp(params: dict) -> str:
    """Settings + the committed pipeline code (src/, stages/, dvc.yaml): a result is stale
    when either changed; edits elsewhere (README, tools) keep it."""
    code = subprocess.run(["git", "rev-parse", "HEAD:src", "HEAD:stages", "HEAD:dvc.yaml"],
                          cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    return hashlib.sha256(json.dumps([params, code], sort_keys=True).encode()).hexdigest()[:16]


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


def summarize(train: dict, deltas: dict, summary: dict, fit_rule: dict) -> dict:
    """The cell's grid row: per-arm fit, every arm - none delta (equal epochs and matched
    fit, value and interval), the claims' verdicts, and which arms miss the fit rule."""
    floor = fit_rule["min_clean_train_acc"]
    flagged = sorted(a for a, m in train.items() if (m.get("clean_train_acc") or 0) < floor)
    rows = {pair: d for pair, d in deltas.items() if pair.endswith("_minus_none")}
    verdicts = {c.get("claim", str(i)): c.get("verdict") for i, c in enumerate(summary.get("claims", []))}
    return {"fit": {a: {k: m.get(k) for k in ("clean_train_acc", "test_acc", "flipped_mem_acc")}
                    for a, m in train.items()},
            "deltas": rows, "verdicts": verdicts, "flagged_arms": flagged}


def run_cell(name: str, params: dict, fit_rule: dict, out: Path) -> dict:
    exp = f"grid-{name}"
    t0 = time.perf_counter()
    res = subprocess.run(["dvc", "exp", "run", "--temp", "--name", exp, *_set_args(params)],
                         cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"cell {name} failed: {' | '.join(tail)}")
    commit = _exp_commit(exp)
    row = summarize(_show(commit, "metrics/train.json"), _show(commit, "metrics/deltas.json"),
                    _show(commit, "results/summary.json"), fit_rule)
    record = {"cell": name, "params": params, "stamp": stamp(params), "experiment": exp,
              "commit": commit, "wall_s": round(wall, 1), **row}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def _cell_text(d: dict | None, key: str) -> str:
    p = (d or {}).get(key) or {}
    if p.get("value") is None:
        return "—"
    ci = f" [{p['lo']:+.3f}, {p['hi']:+.3f}]" if p.get("lo") is not None else ""
    return f"{p['value']:+.3f}{ci}"


def _side(p: dict | None) -> str:
    """Where a 95 % interval lies relative to 0, in words (no threshold: the verdict column
    applies the report's rules)."""
    if not p or p.get("lo") is None:
        return "—"
    return "above 0" if p["lo"] > 0 else "below 0" if p["hi"] < 0 else "covers 0"


def threshold(params: dict) -> float:
    """The AUC claim's threshold for a cell: 4 points at >= 5 % outliers, else 3 (as the
    report's claims table, bnmem.report.summary.claims)."""
    rate = float(params.get("noise_rate", 0.05)) + float(params.get("ood_rate", 0.01))
    return 0.04 if rate >= 0.05 else 0.03


MATCHED_LABEL = {"auc_all_matched_heldout": "held-out accuracy, annealed endpoints",
                 "auc_identity_matched_fit": "within-run fit"}


def matched_key(d: dict) -> str:
    """The matched AUC difference of a cell: matched held-out accuracy between annealed
    endpoints (the primary criterion) where the cell ran with shadow.budgets, else the
    within-run matched fit of cells recorded before it."""
    return "auc_all_matched_heldout" if "auc_all_matched_heldout" in d else "auc_identity_matched_fit"


def auc_verdicts(records: list[dict]) -> list[tuple[str, str]]:
    """(verdict, verdict with Holm over the grid) on 'BN raises LiRA AUC by >= threshold'
    per record, re-judged from its stored deltas by bnmem.report.verdict (so every cell follows
    today's rule); a flagged cell is not evidence and stays out of the family."""
    from bnmem.report.verdict import EQUAL_ONLY, EQUAL_UNMATCHED, Evidence, holm, judge, p_values
    out, fam = [], []
    for r in records:
        d = r["deltas"].get("batchnorm_minus_none") or {}
        eq = Evidence.of(d.get("auc_identity_equal_epochs"), training=True)
        mt = Evidence.of(d.get(matched_key(d)), training=True)
        th = threshold(r.get("params", {}))
        v = judge(eq, mt, 1, th) if (eq or mt) else "—"
        out.append(v)
        if not r["flagged_arms"] and v != "—":
            decisive = eq if v in (EQUAL_ONLY, EQUAL_UNMATCHED) or not (mt and mt.usable) else mt
            fam.append((len(out) - 1, v, *p_values(decisive, 1, th)))
    adjusted = dict(zip((i for i, *_ in fam), holm([v for _, v, _, _ in fam],
                                                   [b for *_, b, _ in fam],
                                                   [s for *_, s in fam])))
    return [("not evidence (flagged)", "not evidence (flagged)") if r["flagged_arms"]
            else (v, adjusted.get(i, v)) for i, (r, v) in enumerate(zip(records, out))]


def report(records: list[dict], spec: dict, md: Path, png: Path) -> None:
    """results/grid.md (one row per cell and comparison) and plots/grid.png."""
    lines = ["# Results grid", "", "*Generated by `python tools/grid.py` from results/grid/*.json; "
             "do not edit by hand.*", "",
             f"Fit rule: every arm's final clean-train accuracy >= "
             f"{spec['fit_rule']['min_clean_train_acc']}; a cell where an arm misses it is "
             "flagged and its comparisons are not evidence. AUC differences on the identity "
             "query, 95 % intervals over shadow models and samples.", "",
             "| cell | comparison | AUC diff, equal epochs | AUC diff, matched (criterion) | matched interval | clean-train acc (arm / none) | flagged | threshold (points) | verdict on \"BN raises AUC by >= threshold\" | same, Holm over the grid | wall (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = auc_verdicts(records)
    for r, (v, vh) in zip(records, verdicts):
        for pair, d in sorted(r["deltas"].items()):
            arm = pair.removesuffix("_minus_none")
            fit = r["fit"]
            lines.append(
                f"| {r['cell']} | {arm} − none | {_cell_text(d, 'auc_identity_equal_epochs')} | "
                f"{_cell_text(d, matched_key(d))} ({MATCHED_LABEL[matched_key(d)]}) | "
                f"{_side(d.get(matched_key(d)))} | "
                f"{fit[arm]['clean_train_acc']:.3f} / {fit['none']['clean_train_acc']:.3f} | "
                f"{', '.join(r['flagged_arms']) or 'no'} | "
                f"{100 * threshold(r.get('params', {})):.0f} | "
                f"{v if arm == 'batchnorm' else ''} | {vh if arm == 'batchnorm' else ''} | "
                f"{r['wall_s']:.0f} |")
    lines += ["", f"Cells finished: {len(records)} of {len(cells(spec))}; total wall time "
              f"{sum(r['wall_s'] for r in records) / 60:.1f} min.", ""]
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text("\n".join(lines) + "\n")
    figure(records, png)


def figure(records: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(r["cell"], pair.removesuffix("_minus_none"), d, bool(r["flagged_arms"]))
            for r in records for pair, d in sorted(r["deltas"].items())]
    fig, ax = plt.subplots(figsize=(10, 0.42 * max(len(rows), 2) + 1.2))
    for i, (cell, arm, d, flagged) in enumerate(rows):
        for off, key, colour in ((-0.15, "auc_identity_equal_epochs", "#d62728"),
                                 (0.15, matched_key(d), "#1f77b4")):
            p = d.get(key) or {}
            if p.get("value") is None:
                continue
            ax.errorbar(p["value"], i + off, xerr=[[p["value"] - p["lo"]], [p["hi"] - p["value"]]]
                        if p.get("lo") is not None else None, fmt="o", color=colour,
                        alpha=0.35 if flagged else 1.0, ms=4, capsize=2)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(rows)), [f"{c}: {a} − none{' (flagged)' if f else ''}"
                                     for c, a, _, f in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("AUC difference vs none, 95 % interval (red: equal epochs, blue: matched point)",
                  fontsize=9)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110, metadata={"Software": None}, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--spec", default="grid.yaml")
    p.add_argument("--only", default="", help="run only cells whose name contains this")
    p.add_argument("--out", default="results/grid")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    spec = yaml.safe_load((ROOT / args.spec).read_text())
    out = ROOT / args.out
    for name, params in cells(spec):
        if args.report_only or args.only not in name:
            continue
        path = out / f"{name}.json"
        if path.is_file() and json.loads(path.read_text()).get("stamp") == stamp(params):
            print(f"{name}: done", flush=True)
            continue
        try:
            rec = run_cell(name, params, spec["fit_rule"], out)
        except RuntimeError as exc:
            print(f"grid: {exc}", file=sys.stderr, flush=True)
            continue
        print(f"{name}: {rec['wall_s']:.0f} s, flagged {rec['flagged_arms'] or 'none'}", flush=True)
    records = [json.loads(f.read_text()) for f in sorted(out.glob("*.json"))] if out.is_dir() else []
    order = {n: i for i, (n, _) in enumerate(cells(spec))}
    records = sorted((r for r in records if r["cell"] in order), key=lambda r: order[r["cell"]])
    report(records, spec, ROOT / "results" / "grid.md", ROOT / "plots" / "grid.png")
    print(f"results/grid.md: {len(records)} cells")


if __name__ == "__main__":
    main()
