"""B-hat's rules in simulation, reported, deciding nothing (bench/results/real_shadows_anova_plan.md):
the matched simulator (bnmem.attack.coverage_matched.simulate) at the default composition
(2 000 samples, 5 % flipped, 1 % OOD; arm_rho 0.3, end_rho 0.3), 8 pairs, fresh samples and
models every run; the truth is the mean point over `--truth-runs` runs of their own seeds.

Per run and memorization read (the real-shadow classes C and F: at the common point and over
the overlap of held-out accuracy and fit, and at each equal budget): the point, the pairs'
delete-one jackknife (IntervalPlan's), and B-hat, V_S from the pairs x samples table
(bnmem.attack.anova). Memorization and the utilities are means of cells, so every figure is
computed from the cells here (the test checks them against the production path's
arm_draw + draw_compare).

    python bench/sim_anova.py --runs 500 --seed 33 --out bench/results/sim_anova_seed33.md
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
import bnmem  # noqa: E402,F401
import lscpu  # noqa: E402
import real_shadow_anova as A  # noqa: E402

from bnmem.attack import anova  # noqa: E402
from bnmem.attack.coverage import sample_kinds  # noqa: E402
from bnmem.attack.coverage_matched import simulate  # noqa: E402
from bnmem.attack.intervals import IntervalPlan  # noqa: E402
from bnmem.core.kinds import KINDS  # noqa: E402

PAIRS, N, FLIPPED, OOD, RHO = 8, 2000, 0.05, 0.01, 0.3
READS = tuple(r for r in A.READS if not r.startswith("eq")) + tuple(
    f"eq{k}_fz_{s}" for k in range(3) for s in ("flipped", "ood"))
RULES = ("AN", "ANs", "ANt", "JS")


def run_cells(seed: int, kind: np.ndarray) -> dict:
    """{"a"/"b": [per endpoint cells]} of one simulated run (8 pairs)."""
    phi, keep = simulate(2 * PAIRS, N, kind, seed, arm_rho=RHO, end_rho=RHO)
    return {arm: [A.endpoint_cells(phi[j, k, ..., 0] > 0, keep, kind) for k in range(phi.shape[1])]
            for j, arm in enumerate(("a", "b"))}


def _drop(cells: dict, p: int) -> dict:
    keep_rows = np.arange(PAIRS) != p
    return {arm: [{f: (c[keep_rows], m) for f, (c, m) in e.items()} for e in ends]
            for arm, ends in cells.items()}


def run_record(seed: int, kind: np.ndarray) -> dict:
    """{read: [point, V_j, B, V_S, I, (b_k, n_k) per kind]} of one run."""
    cells = run_cells(seed, kind)
    plan = IntervalPlan("both", PAIRS, {"jackknife": (1, 1 + PAIRS)})
    out = {}
    for read in READS:
        point, terms = A.read_terms(cells, "a", "b", read)
        rows = [point] + [A.read_terms(_drop(cells, p), "a", "b", read)[0] for p in range(PAIRS)]
        v_j = plan.variances(np.array(rows))["jackknife"]
        if v_j is None or not all(np.isfinite(t[0]) for t in terms):
            out[read] = [point] + [np.nan] * (4 + 2 * len(KINDS))
            continue
        r = anova.samples_part(anova.linear_cells(terms), kind)
        strata = [x for code in KINDS.values() for x in r["strata"].get(code, (np.nan, 0))]
        out[read] = [point, v_j, r["b"], r["v_s"], r["interaction"], *strata]
    return out


def truth_point(seed: int, kind: np.ndarray) -> list[float]:
    cells = run_cells(seed, kind)
    return [A.read_terms(cells, "a", "b", r)[0] for r in READS]


def half_width(rec: np.ndarray, rule: str) -> np.ndarray:
    """rec [runs, fields] of one read."""
    v_j, b, v_s = rec[:, 1], rec[:, 2], rec[:, 3]
    v = v_j + (v_s if rule == "JS" else np.maximum(b, 0.0))
    if rule in ("AN", "JS"):
        return 1.959963984540054 * np.sqrt(v)
    if rule == "ANt":
        return stats.t.ppf(0.975, PAIRS - 1) * np.sqrt(v)
    q = [stats.t.ppf(0.975, anova.satterthwaite_df(
        vi, vj, {c: (row[5 + 2 * j], int(row[6 + 2 * j])) for j, c in enumerate(KINDS.values())}, PAIRS))
        if np.isfinite(vi) else np.nan for vi, vj, row in zip(v, v_j, rec)]
    return np.array(q) * np.sqrt(v)


def wilson(p: float, n: int) -> tuple[float, float]:
    z = 1.959963984540054
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return c - h, c + h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--truth-runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    t0 = time.time()
    kind = sample_kinds(N, FLIPPED, OOD)
    truth = np.nanmean([truth_point(a.seed * 1_000_003 + 500_000 + s, kind) for s in range(a.truth_runs)], axis=0)
    recs = [run_record(a.seed * 1_000_003 + r, kind) for r in range(a.runs)]
    L = ["# B-hat's rules in simulation (reported, deciding nothing)", "",
         f"Plan: [real_shadows_anova_plan.md](real_shadows_anova_plan.md). `python bench/sim_anova.py "
         f"--runs {a.runs} --truth-runs {a.truth_runs} --seed {a.seed}` ({lscpu.model_name()}, "
         f"{time.time() - t0:.0f} s). The matched simulator, {N} samples ({FLIPPED:.0%} flipped, "
         f"{OOD:.0%} OOD), 8 pairs, arm_rho {RHO}, end_rho {RHO}, 3 endpoints; truth: the mean point "
         f"of {a.truth_runs} runs. Coverage / mean width; JS is jacksum with its samples' part exact "
         "(V_j + V_S); var: the points' variance over the runs. 95 % Wilson range of a 0.95 at this many runs: "
         + "[{:.3f}, {:.3f}]".format(*wilson(0.95, a.runs)) + ".", "",
         "| read | truth | " + " | ".join(RULES) + " | B < 0 | V_j / var | B / var | V_S / var |",
         "|---|---:|" + "---:|" * len(RULES) + "---:|---:|---:|---:|"]
    summary = {}
    for j, read in enumerate(READS):
        rec = np.array([r[read] for r in recs], float)
        ok = np.isfinite(rec[:, 1])
        rec = rec[ok]
        cells = []
        for rule in RULES:
            h = half_width(rec, rule)
            cov = float(np.mean(np.abs(rec[:, 0] - truth[j]) <= h))
            cells.append(f"{cov:.3f} / {2 * np.mean(h):.4f}")
            summary.setdefault(rule, []).append(cov)
        var = float(np.var(rec[:, 0], ddof=1))
        L.append(f"| {read} | {truth[j]:+.4f} | " + " | ".join(cells)
                 + f" | {np.mean(rec[:, 2] < 0):.2f} | {np.mean(rec[:, 1]) / var:.2f} | "
                 f"{np.mean(rec[:, 2]) / var:.2f} | {np.mean(rec[:, 3]) / var:.2f} |")
    L += ["", "Mean coverage over the reads: " + ", ".join(f"{r} {np.mean(v):.3f} ({min(v):.3f}-{max(v):.3f})"
                                                         for r, v in summary.items())]
    text = "\n".join(L) + "\n"
    if a.out:
        a.out.write_text(text)
        a.out.with_suffix(".json").write_text(json.dumps({"truth": truth.tolist(), "reads": READS,
                                                          "runs": recs}, default=float) + "\n")
    print(text)


if __name__ == "__main__":
    main()
