"""The readout of bench/results/tpr32_matched_plan.md: C1 (`twoway`) under normal noise at
the heavy-tailed study's true TPR (seed 37), M3 matched at FPR 1e-3 and M4 at 1e-4.

    python bench/tpr_matched.py results/tpr32_components_matched3_seed38.jsonl \
        results/tpr32_components_matched4_seed39.jsonl [--md out.md]

Each store is checked first (500 runs 0..499 once each, 1000 truth rows, and its study
command is the plan's apart from --workers and --store); then the four decision cells
(C1: M3 at 1e-3 and M4 at 1e-4, one arm a and the difference) give the plan's word, and
the figures beside it (arm b, the other FPR level, C4 and C11, the floor, C1's SD over the
points' SD) decide nothing.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import tpr_rules as R

PLANNED = {
    "M3": "python bench/bench_tpr_components.py --seed 38 --runs 500 --truth-runs 1000 --n 3200 "
          "--n-models 64 --flipped 0.1 --ood 0.0 --vlow --draws 20 --effects 0.46 0.26 "
          "--workers 1 --store x",
    "M4": "python bench/bench_tpr_components.py --seed 39 --runs 500 --truth-runs 1000 --n 3200 "
          "--n-models 64 --flipped 0.1 --ood 0.0 --vlow --draws 20 --effects 0.31 0.18 "
          "--workers 1 --store x",
}
LEVEL = {"M3": "tpr_low_all", "M4": "tpr_vlow_all"}  # the FPR each study matches
RULES = ("C1", "C4", "C11")
# seed 37's (tpr32_heavy_plan.md) C1 cells at the same figures: one arm a, difference
SEED37 = {"tpr_low_all": (0.900, 0.908), "tpr_vlow_all": (0.878, 0.896)}
WORDS = ("does not explain it", "explains part of it", "not separated")


def matched_word(decision: list[float]) -> str:
    """The plan's word from C1's four decision-cell coverages: every cell >= 0.93: the
    rarer TPR does not explain seed 37's under-coverage; any cell below 0.92: it explains
    part of it; otherwise not separated."""
    if len(decision) != 4:
        raise ValueError(f"decision cells: {len(decision)}; the plan has 4")
    if all(c >= 0.93 for c in decision):
        return WORDS[0]
    if any(c < 0.92 for c in decision):
        return WORDS[1]
    return WORDS[2]


def cells(store: Path, fig: str, rules=RULES) -> dict:
    """{rule: {"a", "b", "d": score}}: each arm alone and the difference (C4's by MOVER, as
    tpr_rules.difference reads it), each against the store's own truth."""
    truth, rec, pairs = R.load(store)
    ra, rb, rd = rec[f"{fig}_a"], rec[f"{fig}_b"], rec[f"{fig}_d"]
    return {r: {"a": R.score(*R.one_arm(ra, r, pairs), truth[f"{fig}_a"]),
                "b": R.score(*R.one_arm(rb, r, pairs), truth[f"{fig}_b"]),
                "d": R.score(*R.difference(ra, rb, rd, r, pairs), truth[f"{fig}_d"])}
            for r in rules}


def readout(stores: dict[str, Path], check: bool = True) -> tuple[str, str, list[float]]:
    """(markdown, word, the four decision coverages) for {"M3": store, "M4": store}; with
    `check`, each store must be its planned study (SystemExit otherwise)."""
    if check:
        for name, store in stores.items():
            R.check_store(store)
            R.check_study(store, PLANNED[name])
    figs = {n: {f: cells(s, f) for f in R.FIGS2} for n, s in stores.items()}
    decision, L = [], []
    for n in ("M3", "M4"):
        c = figs[n][LEVEL[n]]["C1"]
        short = [(f, r, k) for f, t in figs[n].items() for r, x in t.items()
                 for k, v in x.items() if v["runs"] != R.SECOND_RUNS]
        if check and short:
            raise SystemExit(f"{stores[n]}: cells without {R.SECOND_RUNS} finite intervals: {short[:4]}")
        decision += [c["a"]["coverage"], c["d"]["coverage"]]
    word = matched_word(decision)
    L += ["Decision cells (C1, each against its store's own truth; seed 37's beside):", "",
          "| study | figure | cell | coverage [MC range] | misses below, above | seed 37 |",
          "|---|---|---|---|---|---:|"]
    for n in ("M3", "M4"):
        f = LEVEL[n]
        for k, label, s37 in (("a", "one arm", SEED37[f][0]), ("d", "difference", SEED37[f][1])):
            x = figs[n][f]["C1"][k]
            L.append(f"| {n} | {f} | {label} | {_cov(x)} | {x['miss_below']:.3f}, "
                     f"{x['miss_above']:.3f} | {s37:.3f} |")
    L += ["", f"Word: **the rarer TPR {word}**.", "",
          "Beside, deciding nothing: every rule, figure and cell (coverage [MC range] / mean "
          "width; misses below, above):", "",
          "| study | figure | rule | arm a | arm b | difference |", "|---|---|---|---|---|---|"]
    for n, s in stores.items():
        truth, _, _ = R.load(s)
        for f in R.FIGS2:
            for r, x in figs[n][f].items():
                L.append(f"| {n} | {f} | {r} | " + " | ".join(_cell(x[k]) for k in "abd") + " |")
    L += ["", "| study | figure | true TPR a, b, difference | C1's floor binds (a / difference) "
          "| C1's SD / the points' SD (a / difference) |", "|---|---|---|---|---|"]
    for n, s in stores.items():
        truth, rec, _ = R.load(s)
        for f in R.FIGS2:
            sp = R.spread(s, f)
            L.append(f"| {n} | {f} | {truth[f + '_a']:.5f}, {truth[f + '_b']:.5f}, "
                     f"{truth[f + '_d']:.5f} | {sp['one_arm']['floor_binds']:.3f} / "
                     f"{sp['difference']['floor_binds']:.3f} | "
                     f"{sp['one_arm']['mean_sd_ratio']:.3f} / {sp['difference']['mean_sd_ratio']:.3f} |")
    return "\n".join(L) + "\n", word, decision


def _cov(x: dict) -> str:
    return f"{x['coverage']:.3f} [{x['mc_range'][0]:.3f}, {x['mc_range'][1]:.3f}]"


def _cell(x: dict) -> str:
    if not x["runs"] or not np.isfinite(x["mean_width"]):
        return "no runs"
    return f"{_cov(x)} / {x['mean_width']:.5f}; {x['miss_below']:.3f}, {x['miss_above']:.3f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("m3", type=Path, help="M3's store (seed 38, matched at 1e-3)")
    ap.add_argument("m4", type=Path, help="M4's store (seed 39, matched at 1e-4)")
    ap.add_argument("--md", type=Path, help="also write the readout here")
    a = ap.parse_args()
    for p in (a.m3, a.m4):
        if not p.is_file():
            raise SystemExit(f"{p}: no such store (bench/bench_tpr_components.py writes it)")
    text, _, _ = readout({"M3": a.m3, "M4": a.m4})
    header = f"`{a.m3}` (M3) and `{a.m4}` (M4), read as tpr32_matched_plan.md fixed.\n\n"
    print(header + text)
    if a.md:
        a.md.write_text(header + text)


if __name__ == "__main__":
    main()
