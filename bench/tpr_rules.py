"""Coverage of candidate interval rules for TPR at FPR 1e-3 on a stored components study
(bench/bench_tpr_components.py), and the selection rule of bench/results/tpr_rules_plan.md.

    python bench/tpr_rules.py results/tpr_components_seed22.jsonl [--select] [--md out.md]
    python bench/tpr_rules.py results/tpr32_components_seed28.jsonl --select-cells
    python bench/tpr_rules.py results/tpr32_components_seed29.jsonl --confirm C1
    python bench/tpr_rules.py results/tpr32_components_seed34.jsonl --confirm-again C1 \
        --with results/tpr32_components_seed29.jsonl \
        --common-truth results/tpr32_components_seed28.jsonl

Candidates (one arm; the paired difference a - b as stated; V_*: the design variances the
store keeps, bnmem.attack.intervals.IntervalPlan.variances):
  C0 both; C1 twoway (floored at V_p); C2 twoway floored at max(V_p, V_s); C3 V_p + V_s;
  C4 both on the square-root scale, difference by MOVER; C5 percentiles of the joint draws;
  C6 pairs-only with t(P - 1); C7 twoway on the square-root scale, difference by MOVER;
  C8 jacksum (V_j + V_s).
The floored case (bench/results/tpr32_floor_plan.md; tw = 2 (V_p + V_s) - V_b): C1 beside
  C2; C9 max(tw, V_p + V_s / 2); C10 max(tw, V_p + V_s); C11 tw where tw >= V_p, else V_b;
  beside, deciding nothing: C12 tw where tw >= V_p, else V_p + V_s.

    python bench/tpr_rules.py --select-floor
    python bench/tpr_rules.py results/tpr32_components_20draws_seed36.jsonl --confirm-floor RULE
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import jsonl  # noqa: E402  (bench/jsonl.py)
from bnmem.attack.coverage import wilson  # noqa: E402

Z = 1.959963984540054
FIELDS = ("point", "pairs", "samples", "both", "jackknife", "p_lo", "p_hi", "cov")
CANDIDATES = ("C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8")
SIMPLE = {"C0": 1, "C3": 2, "C5": 1, "C6": 1, "C8": 2, "C4": 3, "C1": 3, "C2": 3, "C7": 4}


def load(store: Path) -> tuple[dict, dict[str, np.ndarray], int]:
    """(truth {figure: value}, {figure: [runs, 8] records}, pairs)."""
    meta = json.loads(store.with_suffix(".meta.json").read_text())
    recs: dict[str, list] = {}
    for d in jsonl.lines(store)[1:]:
        if d is None or d["kind"] != "run":
            continue
        for k, v in d["value"].items():
            recs.setdefault(k, []).append(v)
    pairs = 8
    for part in meta["command"].split("--n-models")[1:]:
        pairs = int(part.split()[0]) // 2
    return meta["truth"], {k: np.array(v, float) for k, v in recs.items()}, pairs


FLOOR_CANDIDATES = ("C1", "C2", "C9", "C10", "C11")  # tpr32_floor_plan.md
FLOOR_SIMPLE = {"C1": 1, "C10": 2, "C11": 3, "C2": 4, "C9": 5}
FLOOR_BESIDE = ("C12",)  # tw where tw >= V_p, else V_p + V_s: looked at after the selection
# (tpr32_floor_plan.md), reported beside on later stores, deciding nothing
FLOOR_G100 = tuple(f"results/tpr32_components_seed{s}.jsonl" for s in (28, 29, 34))
FLOOR_G20 = ("results/tpr32_components_20draws_seed35.jsonl",)
FIGS2 = ("tpr_low_all", "tpr_vlow_all")
CELLS = (("one_arm", "a"), ("difference", "d"))


def floor_binds(r: np.ndarray) -> np.ndarray:
    """Runs where C1's (twoway's) floor at V_p binds: 2 (V_p + V_s) - V_b < V_p."""
    return 2 * (r[:, 1] + r[:, 2]) - r[:, 3] < r[:, 1]


def variance(r: np.ndarray, rule: str) -> np.ndarray:
    vp, vs, vb, vj = r[:, 1], r[:, 2], r[:, 3], r[:, 4]
    tw = 2 * (vp + vs) - vb
    if rule in ("C9", "C10", "C11", "C12"):
        return {"C9": np.maximum(tw, vp + vs / 2), "C10": np.maximum(tw, vp + vs),
                "C11": np.where(tw >= vp, tw, vb), "C12": np.where(tw >= vp, tw, vp + vs)}[rule]
    return {"C0": vb, "C4": vb, "C3": vp + vs, "C8": vj + vs,
            "C1": np.maximum(2 * (vp + vs) - vb, vp), "C7": np.maximum(2 * (vp + vs) - vb, vp),
            "C2": np.maximum(2 * (vp + vs) - vb, np.maximum(vp, vs))}[rule]


def sqrt_scale(p: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """point +- Z sd on the square-root scale (delta method), back-transformed; a zero
    point keeps the symmetric interval clipped at 0."""
    sd = np.sqrt(v)
    s = np.sqrt(np.maximum(p, 0))
    with np.errstate(divide="ignore", invalid="ignore"):
        half = np.where(s > 0, Z * sd / (2 * s), np.nan)
    lo = np.where(s > 0, np.maximum(s - half, 0) ** 2, 0.0)
    hi = np.where(s > 0, (s + half) ** 2, p + Z * sd)
    return lo, hi


def one_arm(r: np.ndarray, rule: str, pairs: int) -> tuple[np.ndarray, np.ndarray]:
    p = r[:, 0]
    if rule == "C5":
        return r[:, 5], r[:, 6]
    if rule == "C6":
        h = stats.t.ppf(0.975, pairs - 1) * np.sqrt(r[:, 1])
        return p - h, p + h
    if rule in ("C4", "C7"):
        return sqrt_scale(p, variance(r, rule))
    h = Z * np.sqrt(variance(r, rule))
    return p - h, p + h


def difference(ra: np.ndarray, rb: np.ndarray, rd: np.ndarray, rule: str, pairs: int
               ) -> tuple[np.ndarray, np.ndarray]:
    if rule not in ("C4", "C7"):
        return one_arm(rd, rule, pairs)
    (la, ua), (lb, ub) = one_arm(ra, rule, pairs), one_arm(rb, rule, pairs)
    a, b, d = ra[:, 0], rb[:, 0], rd[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.clip(rd[:, 7] / np.sqrt(ra[:, 3] * rb[:, 3]), -1, 1)
    rho = np.where(np.isfinite(rho), rho, 0.0)
    lo = d - np.sqrt(np.maximum((a - la) ** 2 + (ub - b) ** 2 - 2 * rho * (a - la) * (ub - b), 0))
    hi = d + np.sqrt(np.maximum((ua - a) ** 2 + (b - lb) ** 2 - 2 * rho * (ua - a) * (b - lb), 0))
    return lo, hi


def score(lo: np.ndarray, hi: np.ndarray, truth: float) -> dict:
    """Coverage, its Wilson range, the finite runs, mean width and misses on each side of
    the finite intervals; with none, runs 0 and the rest nan (no range)."""
    ok = np.isfinite(lo) & np.isfinite(hi)
    lo, hi = lo[ok], hi[ok]
    if not ok.any():
        nan = float("nan")
        return {"coverage": nan, "mc_range": None, "runs": 0, "mean_width": nan,
                "miss_below": nan, "miss_above": nan}
    c = float(((lo <= truth) & (truth <= hi)).mean())
    return {"coverage": c, "mc_range": wilson(c, int(ok.sum())), "runs": int(ok.sum()),
            "mean_width": float((hi - lo).mean()), "miss_below": float((hi < truth).mean()),
            "miss_above": float((lo > truth).mean())}


def table(store: Path, fig: str = "tpr_low_all", truth: dict | None = None) -> dict:
    """{rule: {one_arm, difference: score}}, each run against the store's own truth, or
    against `truth` ({figure_arm: value}) where given."""
    own, rec, pairs = load(store)
    truth = truth or own
    ra, rb, rd = rec[f"{fig}_a"], rec[f"{fig}_b"], rec[f"{fig}_d"]
    return {rule: {"one_arm": score(*one_arm(ra, rule, pairs), truth[f"{fig}_a"]),
                   "difference": score(*difference(ra, rb, rd, rule, pairs), truth[f"{fig}_d"])}
            for rule in CANDIDATES}


def floor_scores(store: Path, fig: str, rules=FLOOR_CANDIDATES) -> dict:
    """{rule: {cell: {"all": score, "floored": score, "free": score}}} on one store, each
    run against the store's own truth; "floored": the runs where C1's floor binds in that
    cell's record (the same runs for every rule), "free" the others. The difference reads
    its own record (a - b), as C1-C3 do."""
    truth, rec, pairs = load(store)
    out = {}
    for rule in rules:
        out[rule] = {}
        for cell, arm in CELLS:
            r = rec[f"{fig}_{arm}"]
            lo, hi = one_arm(r, rule, pairs)
            t = truth[f"{fig}_{arm}"]
            m = floor_binds(r)
            out[rule][cell] = {"all": score(lo, hi, t), "floored": score(lo[m], hi[m], t),
                               "free": score(lo[~m], hi[~m], t)}
    return out


def _pool_scores(cells: list[dict]) -> dict:
    n = sum(c["runs"] for c in cells)
    hit = sum(round(c["coverage"] * c["runs"]) for c in cells)
    out = {"coverage": hit / n if n else float("nan"), "mc_range": wilson(hit / n, n) if n else None,
           "runs": n}
    for k in ("mean_width", "miss_below", "miss_above"):
        out[k] = sum(c[k] * c["runs"] for c in cells if c["runs"]) / n if n else float("nan")
    return out


def floor_groups(groups: dict[str, list[Path]], rules=FLOOR_CANDIDATES) -> dict:
    """tpr32_floor_plan.md's selection figures: {"groups": {group: {fig: {rule: {cell:
    score}}}}, "floored": {fig: {rule: {cell: score}}}}; each group's stores pooled run by
    run (all runs), and the floored runs pooled over every store of every group."""
    per = {g: {st: {f: floor_scores(Path(st), f, rules) for f in FIGS2} for st in stores}
           for g, stores in groups.items()}
    out = {"groups": {}, "floored": {}}
    for g, by in per.items():
        out["groups"][g] = {f: {r: {c: _pool_scores([by[st][f][r][c]["all"] for st in by])
                                    for c, _ in CELLS} for r in rules} for f in FIGS2}
    every = [t for by in per.values() for t in by.values()]
    out["floored"] = {f: {r: {c: _pool_scores([t[f][r][c]["floored"] for t in every])
                              for c, _ in CELLS} for r in rules} for f in FIGS2}
    return out


def select_floor(fig: dict) -> tuple[str, bool]:
    """tpr32_floor_plan.md's selection over floor_groups' figures: a rule qualifies when
    every group cell covers within [0.935, 0.970] with neither tail above 0.04, and where
    C1's floor binds every (pooled) cell covers at least 0.93; the narrowest by the mean
    width summed over the group cells wins (ties: FLOOR_SIMPLE). ("", False) when none
    qualifies: no rule changes."""
    rules = list(next(iter(fig["floored"].values())))

    def group_cells(r):
        return [t[r][c] for g in fig["groups"].values() for t in g.values() for c, _ in CELLS]
    ok = [r for r in rules
          if all(0.935 <= x["coverage"] <= 0.970 and x["miss_below"] <= 0.04
                 and x["miss_above"] <= 0.04 for x in group_cells(r))
          and all(t[r][c]["coverage"] >= 0.93 for t in fig["floored"].values() for c, _ in CELLS)]
    if not ok:
        return "", False
    return min(ok, key=lambda r: (sum(x["mean_width"] for x in group_cells(r)), FLOOR_SIMPLE[r])), True


def confirms_floor(store_scores: dict, rule: str) -> bool:
    """tpr32_floor_plan.md's confirmation ({fig: floor_scores(store, fig)}): `rule` covers
    within [0.93, 0.97] in all four cells with neither tail above 0.04, and where C1's
    floor binds at least 0.90 in each cell."""
    return all(0.93 <= x["all"]["coverage"] <= 0.97 and x["all"]["miss_below"] <= 0.04
               and x["all"]["miss_above"] <= 0.04 and x["floored"]["coverage"] >= 0.90
               for t in store_scores.values() for x in t[rule].values())


def floor_markdown(fig: dict) -> str:
    """The selection figures: per group and figure, each rule's cells (coverage [MC range] /
    width; misses below, above), then the floored runs' cells."""
    def cellstr(x):
        if not x["runs"]:
            return "no runs"
        return (f"{x['coverage']:.3f} [{x['mc_range'][0]:.3f}, {x['mc_range'][1]:.3f}] / "
                f"{x['mean_width']:.5f}; {x['miss_below']:.3f}, {x['miss_above']:.3f}")
    L = []
    for g, by in fig["groups"].items():
        for f, t in by.items():
            n = next(iter(t.values()))["one_arm"]["runs"]
            L += [f"{g}, {f} ({n} runs): coverage [MC range] / mean width; misses below, above", "",
                  "| rule | one arm | difference |", "|---|---|---|"]
            L += [f"| {r} | {cellstr(x['one_arm'])} | {cellstr(x['difference'])} |" for r, x in t.items()]
            L.append("")
    for f, t in fig["floored"].items():
        runs = "/".join(str(x["runs"]) for x in next(iter(t.values())).values())
        L += [f"Where C1's floor binds, {f} (one arm / difference runs {runs}, every store pooled):",
              "", "| rule | one arm | difference |", "|---|---|---|"]
        L += [f"| {r} | {cellstr(x['one_arm'])} | {cellstr(x['difference'])} |" for r, x in t.items()]
        L.append("")
    return "\n".join(L)


def select(tab: dict) -> tuple[str, bool]:
    """The plan's rule: among candidates with both coverages in [0.935, 0.965] and no tail
    missing more than 0.04, the smallest summed mean width (ties: fewer designs); else the
    one closest to 0.95, flagged as not qualifying."""
    def fine(t: dict) -> bool:
        return all(0.935 <= t[k]["coverage"] <= 0.965 and t[k]["miss_below"] <= 0.04
                   and t[k]["miss_above"] <= 0.04 for k in ("one_arm", "difference"))
    ok = [r for r in CANDIDATES if fine(tab[r])]
    if ok:
        return min(ok, key=lambda r: (tab[r]["one_arm"]["mean_width"]
                                      + tab[r]["difference"]["mean_width"], SIMPLE[r])), True
    return min(CANDIDATES, key=lambda r: max(abs(tab[r][k]["coverage"] - 0.95)
                                              for k in ("one_arm", "difference"))), False


def select_cells(tabs: dict[str, dict]) -> tuple[str, bool]:
    """bench/results/tpr32_rules_plan.md's rule over several figures ({figure: table(store,
    figure)}): among candidates whose every cell (each figure's one arm and difference)
    covers within [0.935, 0.965] with no tail missing more than 0.04, the smallest mean
    width summed over the cells (ties: SIMPLE's rank); else the one closest to 0.95 (max
    over the cells of |coverage - 0.95|; ties: the smaller summed width, then SIMPLE),
    flagged as not qualifying."""
    cells = {r: [t[r][k] for t in tabs.values() for k in ("one_arm", "difference")]
             for r in CANDIDATES}
    ok = [r for r in CANDIDATES if all(0.935 <= c["coverage"] <= 0.965 and c["miss_below"] <= 0.04
                                       and c["miss_above"] <= 0.04 for c in cells[r])]
    if ok:
        return min(ok, key=lambda r: (sum(c["mean_width"] for c in cells[r]), SIMPLE[r])), True
    return min(CANDIDATES, key=lambda r: (round(max(abs(c["coverage"] - 0.95) for c in cells[r]), 9),
                                          sum(c["mean_width"] for c in cells[r]), SIMPLE[r])), False


def confirms(tabs: dict[str, dict], rule: str) -> bool:
    """The plan's confirmation: `rule` covers 0.93-0.97 in every cell, with neither tail
    missing more than 0.04."""
    return all(0.93 <= c["coverage"] <= 0.97 and c["miss_below"] <= 0.04 and c["miss_above"] <= 0.04
               for t in tabs.values() for c in (t[rule]["one_arm"], t[rule]["difference"]))


def pooled(tabs: list[dict]) -> dict:
    """One table over several stores' runs of the same study shape ({rule: {cell: score}}
    from `table` on each): coverage and misses are pooled run by run, each run scored
    against its own store's truth; the width is the runs' mean."""
    return {rule: {k: _pool_scores([t[rule][k] for t in tabs]) for k in ("one_arm", "difference")}
            for rule in tabs[0]}


def confirms_again(fresh: dict[str, dict], both: dict[str, dict], rule: str) -> bool:
    """bench/results/tpr32_rules_second_plan.md's decision, as changed before seed 34 was
    read ({figure: table}): over the two confirmation seeds pooled (`both`), `rule` covers
    0.93-0.97 in every cell with neither pooled tail missing more than 0.04; and on the
    fresh seed alone every cell covers at least 0.93."""
    return confirms(both, rule) and all(
        c["coverage"] >= 0.93
        for t in fresh.values() for c in (t[rule]["one_arm"], t[rule]["difference"]))


SECOND_RUNS, SECOND_TRUTH_RUNS = 500, 1000
FREE_FLAGS = ("--seed", "--workers", "--store")  # may differ between the pooled stores


def _shape(command: str, free: tuple[str, ...] = FREE_FLAGS) -> list[str]:
    """A study command's words without the flags (and their values) in `free`: by default
    those that may differ between pooled stores."""
    words, out, skip = command.split(), [], False
    for w in words:
        if skip:
            skip = False
            continue
        if w in free:
            skip = True
            continue
        out.append(w)
    return out


def check_store(store: Path, reference: Path | None = None) -> None:
    """tpr32_rules_second_plan.md's store checks: exactly SECOND_RUNS runs with indices
    0..SECOND_RUNS - 1, each once, and SECOND_TRUTH_RUNS truth rows; the meta file says
    as many runs; with `reference`, a different file whose study command is this one's
    apart from --seed, --workers and --store. SystemExit with one line otherwise."""
    meta_path = store.with_suffix(".meta.json")
    if not meta_path.is_file():
        raise SystemExit(f"{store}: no {meta_path.name} beside it (copy it with the store)")
    meta = json.loads(meta_path.read_text())
    runs, truths = [], 0
    for d in jsonl.lines(store)[1:]:
        if d is None:
            raise SystemExit(f"{store}: a line is not JSON (a unit a kill cut short: resume "
                             "the study to finish it)")
        if d.get("kind") == "run":
            runs.append(d["i"])
        elif d.get("kind") == "truth":
            truths += 1
    if sorted(runs) != list(range(SECOND_RUNS)) or truths != SECOND_TRUTH_RUNS:
        raise SystemExit(f"{store}: {len(runs)} runs ({len(set(runs))} distinct indices) and "
                         f"{truths} truth rows; the plan needs {SECOND_RUNS} runs 0.."
                         f"{SECOND_RUNS - 1}, each once, and {SECOND_TRUTH_RUNS} truth rows")
    if meta.get("runs") != SECOND_RUNS:
        raise SystemExit(f"{meta_path}: runs {meta.get('runs')}, not {SECOND_RUNS}")
    if reference is not None:
        if store.resolve() == reference.resolve():
            raise SystemExit(f"--with {reference}: the same store; pool two different seeds")
        theirs = json.loads(reference.with_suffix(".meta.json").read_text())["command"]
        if _shape(meta["command"]) != _shape(theirs):
            raise SystemExit(f"{store}: its study ({meta['command']}) is not {reference}'s "
                             f"({theirs}) apart from {', '.join(FREE_FLAGS)}")


def check_study(store: Path, expected: str) -> None:
    """tpr32_heavy_plan.md's check that a store is the planned study: its meta file's
    command is `expected` word for word apart from --workers and --store (so --seed,
    --draws and --noise-df must match). SystemExit with one line otherwise: no decision is
    read from another study's store."""
    meta = json.loads(store.with_suffix(".meta.json").read_text())
    free = ("--workers", "--store")
    if _shape(meta["command"], free)[1:] != _shape(expected, free)[1:]:  # not the interpreter
        raise SystemExit(f"{store}: its study ({meta['command']}) is not the planned one "
                         f"({expected}) apart from --workers and --store; no decision is read")


def common_truth(stores: list[Path]) -> dict:
    """The mean of the stores' truth runs, run by run (reported beside, deciding nothing)."""
    rows, names = [], None
    for store in stores:
        for d in jsonl.lines(store)[1:]:
            if d is not None and d.get("kind") == "truth":
                rows.append(d["value"])
        names = list(json.loads(store.with_suffix(".meta.json").read_text())["truth"])
    return dict(zip(names, np.mean(np.asarray(rows, float), axis=0)))


def _rows(tab: dict) -> list[str]:
    """The table's header and one row per rule: each cell's coverage [MC range] / width;
    misses below, above."""
    L = ["| rule | one arm: coverage [MC range] / width; misses below, above | "
         "difference: coverage [MC range] / width; misses below, above |", "|---|---|---|"]
    for rule, t in tab.items():
        cells = [f"{x['coverage']:.3f} [{x['mc_range'][0]:.3f}, {x['mc_range'][1]:.3f}] / "
                 f"{x['mean_width']:.4f}; {x['miss_below']:.3f}, {x['miss_above']:.3f}"
                 for x in (t["one_arm"], t["difference"])]
        L.append(f"| {rule} | {cells[0]} | {cells[1]} |")
    return L


def markdown(tab: dict, store: Path, fig: str, truth: dict | None = None) -> str:
    own, rec, _ = load(store)
    truth = truth or own
    return "\n".join([f"`{store}` ({len(rec[f'{fig}_a'])} runs): {fig}, truth one arm "
                      f"{truth[f'{fig}_a']:.4f}, difference {truth[f'{fig}_d']:.4f}.", "",
                      *_rows(tab)]) + "\n"


def pooled_markdown(tab: dict, fig: str) -> str:
    n = next(iter(tab.values()))["one_arm"]["runs"]
    return "\n".join([f"{fig}, {n} runs pooled.", "", *_rows(tab)]) + "\n"


def spread(store: Path, fig: str, rule: str = "C1") -> dict:
    """How well `rule`'s SD is known on a store, per cell (one arm, the difference): the
    spread of the points over the runs (the SD the interval should carry), the mean of the
    rule's SD over that, the relative SD of the rule's SD (its run-to-run spread), how
    often twoway's floor at V_p binds, and the upper bound's one-sided coverage."""
    truth, rec, _ = load(store)
    out = {}
    for cell, key in (("one_arm", f"{fig}_a"), ("difference", f"{fig}_d")):
        r = rec[key]
        sd = np.sqrt(variance(r, rule))
        true_sd = float(np.std(r[:, 0], ddof=1))
        vp, vs, vb = r[:, 1], r[:, 2], r[:, 3]
        hi = r[:, 0] + Z * sd
        out[cell] = {"sd_points": true_sd, "mean_sd_ratio": float(sd.mean() / true_sd),
                     "sd_rel_spread": float(sd.std(ddof=1) / sd.mean()),
                     "floor_binds": float((2 * (vp + vs) - vb < vp).mean()),
                     "upper_covers": float((hi >= truth[key]).mean())}
    return out


def beside_markdown(store: Path, others: list[Path], rule: str = "C1") -> str:
    """tpr32_twoway_20draws_plan.md's figures reported beside its decision (deciding
    nothing): `rule`'s cells on `store` and on each of `others`, its width against theirs,
    the spread of its SD, the floor and the upper bound; C3 and C6 on `store`."""
    figs = ("tpr_low_all", "tpr_vlow_all")
    L = [f"`{rule}` on `{store}` beside " + ", ".join(f"`{o}`" for o in others)
         + " (each against its own truth; deciding nothing).", "",
         "| figure | cell | store | coverage [MC range] | misses below, above | mean width | "
         "SD of points | rule SD / SD of points | rule SD's relative spread | floor binds | "
         "upper bound covers |", "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for f in figs:
        for st in [store, *others]:
            tab, sp = table(st, f), spread(st, f, rule)
            for cell in ("one_arm", "difference"):
                c, q = tab[rule][cell], sp[cell]
                L.append(f"| {f} | {cell} | `{st.name}` | {c['coverage']:.3f} [{c['mc_range'][0]:.3f}, "
                         f"{c['mc_range'][1]:.3f}] | {c['miss_below']:.3f}, {c['miss_above']:.3f} | "
                         f"{c['mean_width']:.5f} | {q['sd_points']:.5f} | {q['mean_sd_ratio']:.3f} | "
                         f"{q['sd_rel_spread']:.3f} | {q['floor_binds']:.3f} | {q['upper_covers']:.3f} |")
    L += ["", f"C3 (`sum`) and C6 (`pairs_t`) on `{store}`:", "",
          "| figure | rule | one arm: coverage / width | difference: coverage / width |",
          "|---|---|---|---|"]
    for f in figs:
        tab = table(store, f)
        for r in ("C3", "C6"):
            a, d = tab[r]["one_arm"], tab[r]["difference"]
            L.append(f"| {f} | {r} | {a['coverage']:.3f} / {a['mean_width']:.5f} | "
                     f"{d['coverage']:.3f} / {d['mean_width']:.5f} |")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", type=Path, nargs="?")
    ap.add_argument("--figure", default="tpr_low_all")
    ap.add_argument("--select", action="store_true")
    ap.add_argument("--select-cells", action="store_true", help="tpr32_rules_plan.md: select "
                    "over TPR at 1e-3 and 1e-4, one arm and difference (a --vlow store)")
    ap.add_argument("--confirm", metavar="RULE", help="tpr32_rules_plan.md: does RULE cover "
                    "0.93-0.97 in all four cells of this store")
    ap.add_argument("--confirm-again", metavar="RULE", help="tpr32_rules_second_plan.md: "
                    "RULE over this store pooled with --with (the first confirmation's store)")
    ap.add_argument("--with", dest="with_store", type=Path, metavar="STORE")
    ap.add_argument("--beside", nargs="+", type=Path, metavar="STORE", help="with --confirm: "
                    "tpr32_twoway_20draws_plan.md's figures beside the decision, against these "
                    "stores (the 100-draw seeds), deciding nothing")
    ap.add_argument("--common-truth", nargs=1, type=Path, metavar="STORE",
                    help="with --confirm-again: also every cell against the mean truth of "
                    "this store (seed 28's), --with's and this one's (deciding nothing)")
    ap.add_argument("--select-floor", action="store_true", help="tpr32_floor_plan.md: the "
                    "selection over seeds 28, 29, 34 (100 draws) and 35 (20 draws); no store")
    ap.add_argument("--confirm-floor", metavar="RULE", help="tpr32_floor_plan.md: does RULE "
                    "confirm on this store (store checks first)")
    ap.add_argument("--md", type=Path, help="with --select-floor / --confirm-floor: also "
                    "write the table here")
    ap.add_argument("--expect", metavar="COMMAND", help="with --confirm: the planned study's "
                    "command; the store's must match it apart from --workers and --store "
                    "(tpr32_heavy_plan.md)")
    a = ap.parse_args()
    if a.select_floor:
        fig = floor_groups({"G100 (seeds 28, 29, 34; 100 draws)": [ROOT / s for s in FLOOR_G100],
                            "G20 (seed 35; 20 draws)": [ROOT / s for s in FLOOR_G20]})
        rule, ok = select_floor(fig)
        text = floor_markdown(fig) + "\n" + (f"selected: {rule}" if ok else
                                             "selected: none qualifies (no rule changes)") + "\n"
        print(text)
        if a.md:
            a.md.write_text(text)
        return
    if a.store is None:
        ap.error("a store is needed (except with --select-floor)")
    if a.confirm_floor:
        check_store(a.store)
        fig = floor_groups({f"`{a.store.name}`": [a.store]}, FLOOR_CANDIDATES + FLOOR_BESIDE)
        short = [(f, r, c) for f, t in fig["groups"][f"`{a.store.name}`"].items()
                 for r, x in t.items() for c, v in x.items() if v["runs"] != SECOND_RUNS]
        if short:
            raise SystemExit(f"{a.store}: cells without {SECOND_RUNS} finite intervals: {short[:4]}")
        scores = {f: floor_scores(a.store, f) for f in FIGS2}
        _, rec, _ = load(a.store)
        ratios = ", ".join(f"{k} {np.median(rec[k][:, 3] / (rec[k][:, 1] + rec[k][:, 2])):.2f}"
                           f" (binds {floor_binds(rec[k]).mean():.3f})"
                           for f in FIGS2 for k in (f"{f}_a", f"{f}_d"))
        text = (floor_markdown(fig) + "\n" + f"Median V_b / (V_p + V_s) (and how often C1's "
                f"floor binds): {ratios}.\n\n" + f"{a.confirm_floor} meets the floor plan's "
                f"confirmation clauses: {confirms_floor(scores, a.confirm_floor)} (decides "
                "nothing where no rule was selected, as for tpr32_floor_plan.md; C12 never "
                "decides)\n")
        print(text)
        if a.md:
            a.md.write_text(text)
        return
    if a.confirm_again:
        if a.with_store is None:
            ap.error("--confirm-again needs --with STORE (the first confirmation's store)")
        for store in (a.store, a.with_store):
            check_store(store, a.with_store if store == a.store else None)
        figs = ("tpr_low_all", "tpr_vlow_all")
        fresh = {f: table(a.store, f) for f in figs}
        both = {f: pooled([fresh[f], table(a.with_store, f)]) for f in figs}
        bad = [(f, r) for f in figs for r, t in both[f].items()
               for c in t.values() if c["runs"] != 2 * SECOND_RUNS]
        if bad:
            raise SystemExit(f"pooled cells without {2 * SECOND_RUNS} runs (a non-finite "
                             f"interval): {bad[:4]}")
        for f in figs:
            print(markdown(fresh[f], a.store, f))
            print(f"Pooled with `{a.with_store}`:\n")
            print(pooled_markdown(both[f], f))
        print(f"{a.confirm_again} confirms again: "
              f"{confirms_again(fresh, both, a.confirm_again)}")
        if a.common_truth:
            stores = [a.common_truth[0], a.with_store, a.store]
            truth = common_truth(stores)
            print("\nReported beside, deciding nothing: against the common truth (the mean "
                  "of the truth runs of " + ", ".join(f"`{p}`" for p in stores) + ").\n")
            for f in figs:
                print(f"Seed alone: `{a.store}`\n")
                print(markdown(table(a.store, f, truth), a.store, f, truth))
                print(pooled_markdown(pooled([table(a.store, f, truth),
                                              table(a.with_store, f, truth)]), f))
        return
    if a.select_cells or a.confirm:
        if a.confirm:  # tpr32_twoway_20draws_plan.md: the store checks decide too
            check_store(a.store)
            if a.expect:
                check_study(a.store, a.expect)
        tabs = {f: table(a.store, f) for f in ("tpr_low_all", "tpr_vlow_all")}
        if a.confirm:
            short = [(f, k) for f, t in tabs.items() for k, x in t[a.confirm].items()
                     if x["runs"] != SECOND_RUNS]
            if short:
                raise SystemExit(f"{a.store}: {a.confirm}'s cells without {SECOND_RUNS} finite "
                                 f"intervals (figure, cell): {short}")
        for f, t in tabs.items():
            print(markdown(t, a.store, f))
        if a.select_cells:
            rule, ok = select_cells(tabs)
            print(f"selected: {rule}" + ("" if ok else " (none qualifies: closest to 0.95)"))
        if a.confirm:
            print(f"{a.confirm} confirms: {confirms(tabs, a.confirm)}")
            if a.beside:
                print("\n" + beside_markdown(a.store, a.beside, a.confirm))
        return
    tab = table(a.store, a.figure)
    print(markdown(tab, a.store, a.figure))
    if a.select:
        rule, ok = select(tab)
        print(f"selected: {rule}" + ("" if ok else " (none qualifies: closest to 0.95)"))


if __name__ == "__main__":
    main()
