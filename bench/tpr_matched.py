"""The readout of bench/results/tpr32_matched_plan.md: C1 (`twoway`) under normal noise at
the heavy-tailed study's true TPR (seed 37), M3 matched at FPR 1e-3 and M4 at 1e-4.

    python bench/tpr_matched.py results/tpr32_components_matched3_seed38.jsonl \
        results/tpr32_components_matched4_seed39.jsonl [--md out.md]

Each store is checked first (500 runs 0..499 once each, 1000 truth rows, and its study
command is the plan's apart from --workers and --store); then, per level, the match (the
truth within 10 % of seed 37's in arms a and b) and the decision cells' finite intervals;
then C1's two decision cells (one arm a and the difference; M3 at 1e-3, M4 at 1e-4) give
that level's word. The figures beside (baseline-relative drops, arm b, the other level, C4
and C11, the points' CV and skew, the floor split, C1's SD over the points') decide nothing.
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
RUNS = 500  # R.SECOND_RUNS: the runs of a planned store
# seed 37's (tpr32_heavy_plan.md) C1 cells at each level (one arm a, difference) and its
# truths (arms a, b); its store, where present, gives its figures beside (HEAVY)
SEED37 = {"tpr_low_all": (0.900, 0.908), "tpr_vlow_all": (0.878, 0.896)}
SEED37_TRUTH = {"tpr_low_all": (0.011875117187500003, 0.003786542968749996),
                "tpr_vlow_all": (0.0015160937499999996, 0.0003378320312500001)}
HEAVY = "results/tpr32_components_heavy_seed37.jsonl"
BASELINE = ("results/tpr32_components_20draws_seed35.jsonl",  # C1's normal-noise cells at
            "results/tpr32_components_20draws_seed36.jsonl")  # 20 draws, default effects
NOT, PART, SEP = ("the TPR level alone does not reproduce the shortfall",
                  "the TPR level explains part or all of the shortfall", "not separated")
UNMATCHED, NONFINITE = "not matched; no word", "no word: non-finite intervals"


def matched_word(decision: list[float]) -> str:
    """The plan's word at one level from C1's two decision-cell coverages (one arm, the
    difference): both >= 0.93: NOT; either below 0.92: PART; otherwise SEP. A nan raises."""
    if len(decision) != 2:
        raise ValueError(f"decision cells: {len(decision)}; a level has 2")
    if not all(np.isfinite(c) for c in decision):
        raise ValueError(f"decision cells: {decision}; a coverage is not finite")
    if all(c >= 0.93 for c in decision):
        return NOT
    if any(c < 0.92 for c in decision):
        return PART
    return SEP


def cells(store: Path, fig: str, rules=RULES) -> dict:
    """{rule: {"a", "b", "d": score}}: each arm alone and the difference (C4's by MOVER, as
    tpr_rules.difference reads it), each against the store's own truth."""
    truth, rec, pairs = R.load(store)
    ra, rb, rd = rec[f"{fig}_a"], rec[f"{fig}_b"], rec[f"{fig}_d"]
    return {r: {"a": R.score(*R.one_arm(ra, r, pairs), truth[f"{fig}_a"]),
                "b": R.score(*R.one_arm(rb, r, pairs), truth[f"{fig}_b"]),
                "d": R.score(*R.difference(ra, rb, rd, r, pairs), truth[f"{fig}_d"])}
            for r in rules}


def matched(store: Path, fig: str) -> bool:
    """Step 2: the store's truth at `fig` within 10 % of seed 37's in arms a and b."""
    truth, _, _ = R.load(store)
    return all(abs(truth[f"{fig}_{arm}"] / t - 1) <= 0.10
               for arm, t in zip("ab", SEED37_TRUTH[fig]))


def level_word(store: Path, fig: str) -> tuple[str, list[float], dict]:
    """(word, C1's two decision coverages, C1's cells) at one level: the match first, then
    the decision cells' finite intervals (every run of the store), then the thresholds."""
    c = cells(store, fig, ("C1",))["C1"]
    _, rec, _ = R.load(store)
    dec = [c["a"]["coverage"], c["d"]["coverage"]]
    if not matched(store, fig):
        return UNMATCHED, dec, c
    if any(c[k]["runs"] != len(rec[f"{fig}_{k}"]) for k in "ad"):
        return NONFINITE, dec, c
    return matched_word(dec), dec, c


def _pooled_c1(fig: str, key: str) -> tuple[float, int]:
    """C1's coverage of one cell over the seed-35 + 36 baseline's runs, and their number."""
    c = R._pool_scores([cells(R.ROOT / st, fig, ("C1",))["C1"][key] for st in BASELINE])
    return c["coverage"], c["runs"]


def _diff(p: float, n: int, q: float, m: int) -> str:
    se = np.sqrt(p * (1 - p) / n + q * (1 - q) / m)
    return f"{p - q:+.3f} ± {se:.3f}"


def shape(store: Path, fig: str) -> dict:
    """{arm: (CV, skewness)} of the points over the runs."""
    from scipy import stats
    _, rec, _ = R.load(store)
    out = {}
    for k in "abd":
        x = rec[f"{fig}_{k}"][:, 0]
        x = x[np.isfinite(x)]
        out[k] = (float(x.std(ddof=1) / x.mean()), float(stats.skew(x)))
    return out


def floor_split(store: Path, fig: str) -> dict:
    """{cell a / d: (runs where C1's floor binds, their coverage, free runs' coverage)}
    (tpr_rules.floor_scores)."""
    sc = R.floor_scores(store, fig, ("C1",))["C1"]
    return {k: (sc[cell]["floored"]["runs"], sc[cell]["floored"]["coverage"],
                sc[cell]["free"]["coverage"]) for cell, k in R.CELLS}


def readout(stores: dict[str, Path], check: bool = True, baseline: bool = True
            ) -> tuple[str, dict[str, str], dict[str, list[float]]]:
    """(markdown, {study: word}, {study: C1's two decision coverages}) for {"M3": store,
    "M4": store}; with `check`, each store must be its planned study (SystemExit
    otherwise); `baseline`: the seed-35 + 36 drops beside (off where those stores are
    absent, in tests)."""
    if check:
        for name, store in stores.items():
            R.check_store(store)
            R.check_study(store, PLANNED[name])
    words, decs, L = {}, {}, []
    L += ["Decision cells (C1, each against its store's own truth), a word per level:", "",
          "| study | figure | cell | coverage [MC range] | misses below, above | seed 37 | "
          "minus seed 37 (± SE) | minus seeds 35 + 36 (± SE) |",
          "|---|---|---|---|---|---:|---:|---:|"]
    for n in ("M3", "M4"):
        f = LEVEL[n]
        words[n], decs[n], c = level_word(stores[n], f)
        for k, label, s37 in (("a", "one arm", SEED37[f][0]), ("d", "difference", SEED37[f][1])):
            x = c[k]
            base = "–"
            if baseline:
                b, nb = _pooled_c1(f, k)
                base = _diff(x["coverage"], x["runs"], b, nb)
            L.append(f"| {n} | {f} | {label} | {_cov(x)} | {x['miss_below']:.3f}, "
                     f"{x['miss_above']:.3f} | {s37:.3f} | "
                     f"{_diff(x['coverage'], x['runs'], s37, RUNS)} | {base} |")
    L.append("")
    for n in ("M3", "M4"):
        truth, _, _ = R.load(stores[n])
        ratio = ", ".join(f"{truth[f'{LEVEL[n]}_{arm}'] / t:.3f}"
                          for arm, t in zip("ab", SEED37_TRUTH[LEVEL[n]]))
        L.append(f"- {n} ({LEVEL[n]}; truth over seed 37's, arms a, b: {ratio}): **{words[n]}**.")
    L += ["", "Beside, deciding nothing: every rule, figure and cell (coverage [MC range] / mean "
          "width; misses below, above; finite intervals where not every run's):", "",
          "| study | figure | rule | arm a | arm b | difference |", "|---|---|---|---|---|---|"]
    for n, s in stores.items():
        _, rec, _ = R.load(s)
        for f in R.FIGS2:
            for r, x in cells(s, f).items():
                L.append(f"| {n} | {f} | {r} | " + " | ".join(
                    _cell(x[k], len(rec[f'{f}_{k}'])) for k in "abd") + " |")
    L += ["", "| study | figure | true TPR a, b, difference | points' CV, skew: a / b / difference "
          "| C1's floor binds (runs): a / difference | C1 covers where it binds / where free: a; "
          "difference | C1's SD / the points' SD: a / difference |",
          "|---|---|---|---|---|---|---|"]
    beside = dict(stores)
    if (R.ROOT / HEAVY).is_file():  # seed 37's own figures, for comparison (absent in tests)
        beside["seed 37"] = R.ROOT / HEAVY
    for n, s in beside.items():
        truth, _, _ = R.load(s)
        for f in R.FIGS2:
            sp, sh, fl = R.spread(s, f), shape(s, f), floor_split(s, f)
            L.append(f"| {n} | {f} | {truth[f + '_a']:.5f}, {truth[f + '_b']:.5f}, "
                     f"{truth[f + '_d']:.5f} | " + " / ".join(f"{sh[k][0]:.2f}, {sh[k][1]:+.2f}"
                                                               for k in "abd")
                     + f" | {fl['a'][0]} / {fl['d'][0]} | "
                     + "; ".join(f"{fl[k][1]:.3f} / {fl[k][2]:.3f}" for k in "ad")
                     + f" | {sp['one_arm']['mean_sd_ratio']:.3f} / "
                       f"{sp['difference']['mean_sd_ratio']:.3f} |")
    return "\n".join(L) + "\n", words, decs


def _cov(x: dict) -> str:
    return f"{x['coverage']:.3f} [{x['mc_range'][0]:.3f}, {x['mc_range'][1]:.3f}]"


def _cell(x: dict, runs: int) -> str:
    if not x["runs"] or not np.isfinite(x["mean_width"]):
        return f"no finite intervals of {runs}"
    fin = "" if x["runs"] == runs else f"; {x['runs']} of {runs} finite"
    return (f"{_cov(x)} / {x['mean_width']:.5f}; {x['miss_below']:.3f}, "
            f"{x['miss_above']:.3f}{fin}")


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
