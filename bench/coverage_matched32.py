"""The coverage_matched32 plan's readout (bench/results/coverage_matched32_plan.md): the
full-scale run's matched reads at 32 pairs and 20 draws, on the matched simulator's fresh
seed 43; a word per figure from `mixed`'s coverage against 0.93-0.97, `twoway` beside.
The same study on seed 44 is the coverage_mem32 plan's confirmation
(bench/results/coverage_mem32_plan.md) of `twoway` for the memorization cells, and on seed
45 the coverage_mem32_split plan's (bench/results/coverage_mem32_split_plan.md) of a rule
split by sample kind: `twoway` for the OOD cells, `jacktwo` (the mean of jacksum's and
`twoway`'s variances) for the flipped ones, read from the two stored intervals.

    python bench/coverage_matched32.py results/coverage_matched32_seed43.jsonl \
        [--md bench/results/coverage_matched32_seed43.md]
    python bench/coverage_matched32.py results/coverage_matched32_seed44.jsonl \
        [--md bench/results/coverage_matched32_seed44.md]
    python bench/coverage_matched32.py results/coverage_matched32_seed45.jsonl \
        [--md bench/results/coverage_matched32_seed45.md]

The store is bench/bench_coverage_matched.py's (bnmem.attack.coverage.simulate_all): a
first line naming the study's fingerprint, then one line per truth row and per run. A
store of another study, or an unfinished one, is refused in one line: no word is read.
"""
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from bnmem.attack.coverage import read_store, tabulate, wilson  # noqa: E402
from bnmem.attack.coverage_matched import FIGURES  # noqa: E402

FINGERPRINT = "b32f3e949a451feb"  # the plan's: coverage._fingerprint of its command
# the planned studies, by fingerprint: seed 43 (coverage_matched32_plan.md) and the same
# command on seed 44 (coverage_mem32_plan.md) and seed 45 (coverage_mem32_split_plan.md)
SEEDS = {FINGERPRINT: 43, "4cc3489d47854aeb": 44, "74d23efc7cf57380": 45}
PLANS = {43: "coverage_matched32_plan.md", 44: "coverage_mem32_plan.md",
         45: "coverage_mem32_split_plan.md"}
RUNS, TRUTH_RUNS, PAIRS = 500, 1000, 32
# the sha256 of each planned study's committed store: its fingerprint hashes the study's
# arguments, not its code, and the code that wrote these stores had `mixed` = jacksum for
# memorization at 32 pairs (RULES_RUN), which split_intervals assumes. A store of the same
# fingerprint written by code with other rules there would be read wrongly, so the command
# line reads these stores only.
STORE_SHA256 = {
    43: "0443513fe16b9f7a0c93b4a04eab1e4704f5754d193575c11e8b395ac7422f2b",
    44: "46ed3aae75ba0665d14525848602c0f6020aa1cb652cd9542bb4b504be89d1e6",
    45: "7a7cbcd2f370f0bcb199fb3479134b395c6416cd57906435f84cccd20cfaa0d9",
}
PROCEDURES = ("mixed", "twoway")
BAND = (0.93, 0.97)  # the target for a nominal 95 % interval
LOPSIDED = 0.04  # a tail (nominal 0.025) above this is reported whatever the word
NAMES = [f for f, _, _ in FIGURES]


def load(store: Path) -> tuple[np.ndarray, list[dict], int]:
    """(truth [F]: the mean of the truth rows, nan where a figure never exists; the runs'
    {procedure: [2, F] (lo, hi)} in run order; the study's seed), after the plan's checks
    (SystemExit with one line)."""
    study, units = read_store(store)
    if study not in SEEDS:
        raise SystemExit(f"{store}: its units are study {study}, not a "
                         f"planned one ({', '.join(SEEDS)}); no word is read")
    truth = {i: v for (kind, i), v in units.items() if kind == "truth"}
    runs = {i: v for (kind, i), v in units.items() if kind == "run"}
    if sorted(truth) != list(range(TRUTH_RUNS)) or sorted(runs) != list(range(RUNS)):
        raise SystemExit(f"{store}: {len(truth)} of {TRUTH_RUNS} truth rows and {len(runs)} of "
                         f"{RUNS} runs; the study is unfinished: resume it, no word is read")
    if any(not set(PROCEDURES) <= set(runs[i]) for i in range(RUNS)):
        raise SystemExit(f"{store}: a run lacks one of the procedures {', '.join(PROCEDURES)}; "
                         "no word is read")
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a figure nan in every truth row
        t = np.nanmean(np.array([truth[i] for i in range(TRUTH_RUNS)], float), axis=0)
    done = [{p: runs[i][p] for p in PROCEDURES} for i in range(RUNS)]
    shapes = {d[p].shape for d in done for p in PROCEDURES} | {(2, t.size)}
    if shapes != {(2, len(NAMES))}:  # the figures the store's code computed are not FIGURES'
        raise SystemExit(f"{store}: its runs' intervals have shapes {sorted(shapes)}, not "
                         f"(2, {len(NAMES)}) (coverage_matched.FIGURES); no word is read")
    return t, done, SEEDS[study]


MIN_RUNS = 450  # runs with a finite interval a figure needs for a word (the addendum)


def word(row: dict, truth: float = 0.0) -> str:
    """The plan's word for one figure's `mixed` row (coverage.tabulate's) and its truth."""
    if row["coverage"] is None or not np.isfinite(truth):
        return "no word"
    if row["runs"] < MIN_RUNS:
        return "no word: too few intervals"
    c = row["coverage"]
    w = "calibrated" if BAND[0] <= c <= BAND[1] else "over-covers" if c > BAND[1] else "under-covers"
    if max(row["miss_below"], row["miss_above"]) > LOPSIDED:
        w += ", lopsided"
    return w


# the coverage_mem32_split plan's rule per memorization cell: `twoway` for OOD samples,
# `jacktwo` (the mean of jacksum's and twoway's variances, 1.96) for flipped ones
SPLIT = {"fz_flipped_matched": "jacktwo", "fz_flipped_overlap": "jacktwo",
         "fz_ood_matched": "twoway", "fz_flipped_fit": "jacktwo", "fz_ood_fit": "twoway"}
CENTRE_TOL = 1e-9  # jacksum's and twoway's intervals of a memorization cell share the point


def split_intervals(run: dict) -> np.ndarray:
    """[2, F] (lo, hi) of the split rule in one run (nan outside the memorization cells and
    where either stored interval is missing): `twoway`'s own for an OOD cell; for a flipped
    one point +- sqrt((h_j^2 + h_t^2) / 2) from jacksum's (`mixed`'s) and `twoway`'s
    half-widths, which is point +- 1.96 sqrt((V_jacksum + V_twoway) / 2) exactly because
    both are point +- 1.96 sd (SystemExit in one line if their centres differ)."""
    jack, two = np.asarray(run["mixed"], float), np.asarray(run["twoway"], float)
    out = np.full_like(jack, np.nan)
    for f, rule in SPLIT.items():
        j = NAMES.index(f)
        if rule == "twoway":
            out[:, j] = two[:, j]
            continue
        cj, ct = jack[:, j].mean(), two[:, j].mean()
        if abs(cj - ct) > CENTRE_TOL:
            raise SystemExit(f"{f}: jacksum's and twoway's intervals are centred {cj!r} and "
                             f"{ct!r}, not on one point; jacktwo cannot be read from them")
        h = np.sqrt(((jack[1, j] - jack[0, j]) ** 2 + (two[1, j] - two[0, j]) ** 2) / 2) / 2
        out[:, j] = (cj - h, cj + h)
    return out


def read(store: Path) -> dict:
    """{"seed", "truth": {figure: t}, "table": tabulate's {procedure: {figure: row}} (with
    "split", the split rule's, for the memorization cells), "words": {figure: word},
    "rules": {figure: mixed's rule at 32 pairs in the study's code, RULES_RUN},
    "twoway_words" / "split_words": {figure: twoway's / the split rule's word}}."""
    truth, done, seed = load(store)
    done = [{**d, "split": split_intervals(d)} for d in done]
    table = tabulate(done, truth, NAMES, PROCEDURES + ("split",))
    width = {p: np.array([d[p][1] - d[p][0] for d in done]) for p in PROCEDURES}
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = width["twoway"] / width["mixed"]  # [runs, F]: each run's twoway / mixed width
    return {"seed": seed, "truth": dict(zip(NAMES, map(float, truth))), "table": table,
            "run_ratio": {f: ratio[:, i] for i, f in enumerate(NAMES)},
            "words": {f: word(table["mixed"][f], t) for f, t in zip(NAMES, truth)},
            "twoway_words": {f: word(table["twoway"][f], t) for f, t in zip(NAMES, truth)},
            "split_words": {f: word(table["split"][f], truth[NAMES.index(f)]) for f in MEM},
            "rules": dict(RULES_RUN)}


# `mixed`'s rule per figure at 32 pairs in the code both studies ran (1753285 and before:
# jacksum for memorization, both_sqrt for TPR), which is what their `mixed` column holds
RULES_RUN = {"auc_matched": "jacksum", "auc_overlap": "both", "fz_flipped_matched": "jacksum",
             "tpr_low_matched": "both_sqrt", "fz_flipped_overlap": "jacksum",
             "fz_ood_matched": "jacksum", "auc_fit": "jacksum", "auc_fit_overlap": "both",
             "fz_flipped_fit": "jacksum", "fz_ood_fit": "jacksum"}
MEM = [f for f in NAMES if f.startswith("fz")]
FLOOR = 0.925  # the coverage_mem32 plan's floor per memorization cell (its addendum)
MEAN_MIN = 0.94  # ... and the least mean coverage over the five (its addendum)


def confirm(res: dict, floor: float = FLOOR, mean_min: float | None = MEAN_MIN,
            column: str = "twoway") -> dict:
    """The coverage_mem32 plan's confirmation of `twoway` for the memorization cells (the
    five conditions of its addendum; floor 0.92 and no `mean_min`: the plan's first three,
    with the readout's every-cell-a-word), or with column "split" the coverage_mem32_split
    plan's of the split rule (the same five and its addendum's two per-kind conditions,
    "flipped_mean" / "flipped_ok", "ood_mean" / "ood_ok"): {"family": families_out of the column's
    memorization words, "below_floor": cells under `floor`, "lopsided": lopsided cells,
    "no_word": cells without a word, "mean": the mean coverage over the five, "five": whether
    the conditions asked hold, before the split's per-kind ones, "confirmed"}."""
    words = {f: res[f"{column}_words"][f] for f in MEM}
    cov = {f: res["table"][column][f]["coverage"] for f in MEM}
    out = {"family": families_out(words),
           "below_floor": [f for f in MEM if cov[f] is not None and cov[f] < floor],
           "lopsided": [f for f in MEM if words[f].endswith("lopsided")],
           "no_word": [f for f in MEM if words[f].startswith("no word")]}
    out["mean"] = (float(np.mean([cov[f] for f in MEM]))
                   if all(cov[f] is not None for f in MEM) else None)
    out["confirmed"] = not (out["family"] or out["below_floor"] or len(out["lopsided"]) >= 2
                            or out["no_word"] or (mean_min is not None and (
                                out["mean"] is None
                                or out["mean"] < mean_min - 1e-12)))  # 5 x 470/500 is 0.94
    out["five"] = out["confirmed"]  # the conditions above, without the per-kind ones
    if column == "split":  # the split plan's addendum: each sample kind on its own
        kinds = {"flipped": [f for f in MEM if SPLIT[f] == "jacktwo"],
                 "ood": [f for f in MEM if SPLIT[f] == "twoway"]}
        for kind, cells in kinds.items():
            out[f"{kind}_mean"] = (float(np.mean([cov[f] for f in cells]))
                                   if all(cov[f] is not None for f in cells) else None)
        fm, om = out["flipped_mean"], out["ood_mean"]
        out["flipped_ok"] = fm is not None and FLIPPED_MEAN[0] - 1e-12 <= fm <= FLIPPED_MEAN[1] + 1e-12
        out["ood_ok"] = om is not None and om >= OOD_MEAN_MIN - 1e-12
        out["confirmed"] = out["confirmed"] and out["flipped_ok"] and out["ood_ok"]
    return out


# the split plan's addendum: the three flipped cells' mean coverage in 1 410-1 450 of 1 500
# cell-runs (short of the band's middle or still over-covering fails: a split that buys
# nothing on flipped samples must not pass), the two OOD cells' at least 0.935
FLIPPED_MEAN = (0.94, 1450 / 1500)
OOD_MEAN_MIN = 0.935


def families_out(words: dict) -> list[str]:
    """The addendum's family rule: a family (AUC, memorization, TPR) with two or more cells
    out of band in the same direction, as "<family> <word>"."""
    fam = {"auc": "AUC", "fz": "memorization", "tpr": "TPR"}
    out = []
    for key, name in fam.items():
        for w in ("over-covers", "under-covers"):
            if sum(f.startswith(key) and v.split(",")[0] == w for f, v in words.items()) >= 2:
                out.append(f"{name} {w}")
    return out


def _cell(row: dict) -> str:
    if row["coverage"] is None:
        return "n/a"
    lo, hi = row["mc_range"]
    return (f"{row['coverage']:.3f} [{lo:.3f}, {hi:.3f}] / {row['mean_width']:.4f}; "
            f"{row['miss_below']:.3f}, {row['miss_above']:.3f} ({row['runs']})")


def _run_ratio_text(res: dict) -> str:
    """How the single runs' `twoway` / jacksum width ratio spreads over the memorization
    cells (the full-scale run's records are single runs)."""
    r = np.concatenate([res["run_ratio"][f] for f in MEM])
    r = r[np.isfinite(r)]
    p5, p50, p95 = np.percentile(r, [5, 50, 95])
    return (f"in single runs the ratio is {p50:.2f} at the median, {p5:.2f}-{p95:.2f} between "
            f"the 5th and 95th percentiles and above 1 in {np.mean(r > 1):.0%} of them")


def _span(xs: list, digits: int) -> str:
    xs = [x for x in xs if x is not None]
    return f"{min(xs):.{digits}f}-{max(xs):.{digits}f}" if xs else "n/a"


def markdown(store: Path, res: dict) -> str:
    seed = res["seed"]
    md = [f"# The full-scale run's matched reads at 32 pairs, 20 draws: seed {seed} "
          f"([plan]({PLANS[seed]}))", "",
          f"`python bench/coverage_matched32.py {store}`: {RUNS} simulated runs of the matched "
          "simulator (64 shadow models per arm and endpoint, 3 200 samples, 5 % flipped, 1 % OOD, "
          "arm ρ 0.3, endpoints' ρ 0.3), the truth the mean point over "
          f"{TRUTH_RUNS} independent runs. A word per figure from `mixed`'s coverage (the "
          "rules the study's code ran at 32 pairs, jacksum for memorization) against 0.93-0.97; a tail above 0.04 is "
          "lopsided. Each cell: coverage [95 % Monte Carlo range] / mean width; misses "
          "below, above the truth (nominal 0.025 each) (runs with an interval).", "",
          "| figure (BN-like a - b) | rule the study ran at 32 pairs | truth | `mixed` | word | `twoway` (beside) "
          "| width `mixed` / `twoway` |", "|---|---|---:|---|---|---|---:|"]
    for f in NAMES:
        m, t = res["table"]["mixed"][f], res["table"]["twoway"][f]
        ratio = (f"{m['mean_width'] / t['mean_width']:.2f}"
                 if m["mean_width"] and t["mean_width"] else "n/a")
        md.append(f"| {f} | `{res['rules'][f]}` | {res['truth'][f]:.4f} | {_cell(m)} | "
                  f"**{res['words'][f]}** | {_cell(t)} | {ratio} |")
    tally = {w: sum(v.split(",")[0] == w for v in res["words"].values())
             for w in ("calibrated", "over-covers", "under-covers")}
    md += ["", "Words: " + ", ".join(f"{n} {w}" for w, n in tally.items() if n) + f" of {len(NAMES)}. "
           f"The TPR cell (`tpr_low_matched`, `both_sqrt`): **{res['words']['tpr_low_matched']}**. "
           "Families with two or more cells out of band in one direction (the addendum's "
           "rule): " + (", ".join(families_out(res["words"])) or "none") + "."]
    if seed == 44:  # the coverage_mem32 plan's reading
        c = confirm(res)
        two = [res["table"]["twoway"][f] for f in MEM]
        jack = [res["table"]["mixed"][f] for f in MEM]
        ratio = [t["mean_width"] / j["mean_width"] for t, j in zip(two, jack)
                 if t["mean_width"] and j["mean_width"]]
        md += ["", "## The coverage_mem32 plan's confirmation: `twoway` for the memorization "
               "cells", "",
               "| cell | `twoway` | word |", "|---|---|---|"]
        md += [f"| {f} | {_cell(res['table']['twoway'][f])} | **{res['twoway_words'][f]}** |"
               for f in MEM]
        md += ["", _conditions_text(c) + ".", "",
               f"`twoway` over the five cells: coverage {_span([t['coverage'] for t in two], 3)}, "
               f"width {_span(ratio, 2)} times jacksum's (mean widths); " + _run_ratio_text(res)
               + ".", "",
               "**" + ("Confirmed" if c["confirmed"] else "Not confirmed") + "**: "
               + ("`twoway` is adopted for these five reads from 32 pairs and 20 draws "
                  "(the plan's rule as its addendum narrowed it)."
                  if c["confirmed"] else "jacksum stays; the over-coverage stays an open defect.")]
    md += _split_md(res)
    return "\n".join(md) + "\n"


POOLED = (43, 44, 45)  # the split plan's addendum: the three seeds pooled, deciding nothing


def pooled(res: dict) -> dict:
    """{column: {cell: (covered, runs)}} of the memorization cells over POOLED's committed
    stores (each run against its own study's truth), `res` being seed 45's reading."""
    reads = {s: (res if s == res["seed"] else
                 read(ROOT / "results" / f"coverage_matched32_seed{s}.jsonl")) for s in POOLED}
    out: dict = {}
    for col in ("mixed", "twoway", "split"):
        out[col] = {}
        for f in MEM:
            rows = [reads[s]["table"][col][f] for s in POOLED]
            out[col][f] = (int(round(sum(r["coverage"] * r["runs"] for r in rows))),
                           sum(r["runs"] for r in rows))
    return out


def _pooled_md(res: dict) -> list[str]:
    pool = pooled(res)
    md = ["", f"Seeds {', '.join(map(str, POOLED))} pooled (the split plan's addendum; seeds "
          "43 and 44 chose the split rule, so this decides nothing): coverage [95 % Wilson "
          "range] over the runs of all three.", "",
          "| cell | jacksum (`mixed`) | `twoway` | split rule |", "|---|---|---|---|"]
    for f in MEM:
        cells = []
        for col in ("mixed", "twoway", "split"):
            k, n = pool[col][f]
            lo, hi = wilson(k / n, n)
            cells.append(f"{k / n:.3f} [{lo:.3f}, {hi:.3f}] ({n})")
        md.append(f"| {f} | " + " | ".join(cells) + " |")
    return md


def _conditions_text(c: dict) -> str:
    """The five conditions of the coverage_mem32 addendum as `confirm` read them."""
    return (f"1. families out of band in one direction: {', '.join(c['family']) or 'none'}; "
            f"2. cells below {FLOOR}: {', '.join(c['below_floor']) or 'none'}; "
            f"3. lopsided cells: {', '.join(c['lopsided']) or 'none'} (two or more fail); "
            f"4. cells without a word: {', '.join(c['no_word']) or 'none'}; "
            "5. mean coverage over the five: "
            + ("n/a" if c["mean"] is None else f"{c['mean']:.3f}") + f" (at least {MEAN_MIN})")


def _split_md(res: dict) -> list[str]:
    """The split rule's section: seed 45's confirmation (the coverage_mem32_split plan), or
    on seeds 43 and 44, where the rule was chosen, the same reading post hoc."""
    seed, c = res["seed"], confirm(res, column="split")
    planned = seed == 45
    jack = [res["table"]["mixed"][f] for f in MEM]
    split = [res["table"]["split"][f] for f in MEM]
    ratio = [x["mean_width"] / j["mean_width"] for x, j in zip(split, jack)
             if x["mean_width"] and j["mean_width"]]
    md = ["", ("## The coverage_mem32_split plan's confirmation: the split rule for the "
               "memorization cells" if planned else
               "## Post hoc: the split rule (chosen on seeds 43 and 44; "
               "[its plan](coverage_mem32_split_plan.md) reads seed 45)"), "",
          "`twoway` for the OOD cells, `jacktwo` (the mean of jacksum's and `twoway`'s "
          "variances, 1.96) for the flipped ones.", "",
          "| cell | rule | split rule | word |", "|---|---|---|---|"]
    md += [f"| {f} | `{SPLIT[f]}` | {_cell(res['table']['split'][f])} | "
           f"**{res['split_words'][f]}** |" for f in MEM]
    md += ["", _conditions_text(c) + "; 6. mean over the three flipped cells: "
           + ("n/a" if c["flipped_mean"] is None else f"{c['flipped_mean']:.4f}")
           + f" ({FLIPPED_MEAN[0]}-{FLIPPED_MEAN[1]:.4f}); 7. mean over the two OOD cells: "
           + ("n/a" if c["ood_mean"] is None else f"{c['ood_mean']:.4f}")
           + f" (at least {OOD_MEAN_MIN}).", "",
           f"The split rule over the five cells: coverage {_span([x['coverage'] for x in split], 3)}, "
           f"width {_span(ratio, 2)} times jacksum's (mean widths).", ""]
    if planned:
        md.append("**" + ("Confirmed" if c["confirmed"] else "Not confirmed") + "**: "
                  + ("the split rule is adopted for these five reads from 32 pairs and 20 draws."
                     if c["confirmed"] else
                     "jacksum stays; the over-coverage stays an open defect."))
        md += _pooled_md(res)
    else:
        md.append("The seven conditions " + ("hold" if c["confirmed"] else "do not hold")
                  + " here; this seed chose the rule, so it decides nothing.")
    return md


def verify(store: Path, seed: int) -> None:
    """SystemExit in one line unless `store` is the committed store of seed `seed`'s study
    (STORE_SHA256): another file of the same fingerprint may hold another code's intervals."""
    import hashlib
    want = STORE_SHA256.get(seed)
    got = hashlib.sha256(Path(store).read_bytes()).hexdigest()
    if want is None or got != want:
        raise SystemExit(f"{store}: sha256 {got[:16]}..., not the committed store of seed {seed}'s "
                         f"study ({(want or 'none recorded')[:16]}...); a store written by "
                         "other code under the same fingerprint is not read")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", type=Path)
    ap.add_argument("--md", type=Path, default=None)
    a = ap.parse_args()
    res = read(a.store)
    verify(a.store, res["seed"])
    text = markdown(a.store, res)
    if a.md:
        a.md.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
