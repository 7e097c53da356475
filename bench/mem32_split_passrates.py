"""How often the coverage_mem32_split plan's confirmation passes a split rule of known true
coverage (bench/results/coverage_mem32_split_plan.md, its addendum): studies of 500 runs
simulated by a Gaussian copula whose five memorization cells' coverage indicators are
correlated as the split rule's were on seeds 43 and 44 pooled (1 000 runs), each cell's
misses falling above the truth in the share they did there; decided by the readout's own
`confirm(column="split")` under the coverage_mem32 addendum's five conditions ("five") and
with the split addendum's two per-kind conditions ("seven").

    python bench/mem32_split_passrates.py [--sims 3000] [--md bench/results/mem32_split_passrates.md]
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from scipy.stats import norm

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("m32p", ROOT / "bench" / "mem32_passrates.py")
P = importlib.util.module_from_spec(_spec)  # the coverage_mem32 plan's pass rates
_spec.loader.exec_module(P)
C = P.C  # the readout (bench/coverage_matched32.py)

CHOSEN_ON = (43, 44)
# true coverage per cell in C.MEM's order (flipped common, flipped overlap, OOD common,
# flipped at matched fit, OOD at matched fit)
LEVELS = {"seeds 43/44 pooled": None, "0.95 everywhere": [0.95] * 5,
          "0.96 everywhere": [0.96] * 5, "0.94 everywhere": [0.94] * 5,
          "0.93 everywhere": [0.93] * 5,
          "flipped 0.975, OOD 0.95 (buys nothing on flipped)": [0.975, 0.975, 0.95, 0.975, 0.95],
          "flipped 0.97, OOD 0.95": [0.97, 0.97, 0.95, 0.97, 0.95],
          "flipped 0.965, OOD 0.95": [0.965, 0.965, 0.95, 0.965, 0.95],
          "flipped 0.93, OOD 0.95": [0.93, 0.93, 0.95, 0.93, 0.95],
          "flipped 0.95, OOD 0.92": [0.95, 0.95, 0.92, 0.95, 0.92]}


def indicators(seeds=CHOSEN_ON) -> tuple[np.ndarray, np.ndarray]:
    """(covered [runs, 5], missed above the truth [runs, 5]) of the split rule's five
    memorization cells over the committed stores of `seeds`, runs stacked."""
    cov, above = [], []
    for seed in seeds:
        t, done, _ = C.load(ROOT / "results" / f"coverage_matched32_seed{seed}.jsonl")
        idx = [C.NAMES.index(f) for f in C.MEM]
        s = np.array([C.split_intervals(d) for d in done])[:, :, idx]  # [runs, 2, 5]
        lo, hi = s[:, 0], s[:, 1]
        cov.append((lo <= t[idx]) & (t[idx] <= hi))
        above.append(lo > t[idx])
    return np.concatenate(cov), np.concatenate(above)


def decide(cov, below, above) -> tuple[bool, bool]:
    """(the five conditions pass, all seven pass), by the readout's `confirm`."""
    c = C.confirm(P._res(cov, below, above, "split"), column="split")
    return c["five"], c["confirmed"]


def pass_rates(p, chol, up, rng, sims: int, n: int = C.RUNS) -> tuple[float, float]:
    q = norm.ppf(np.asarray(p, float))
    got = np.zeros(2)
    for _ in range(sims):
        cover = rng.standard_normal((n, 5)) @ chol.T < q
        miss, u = ~cover, rng.random((n, 5))
        got += decide(cover.mean(0), (miss & (u >= up)).mean(0), (miss & (u < up)).mean(0))
    return tuple(got / sims)


def main() -> None:
    a = P.cli(__doc__)
    cov, above = indicators()
    r = np.corrcoef(cov.astype(float).T)
    chol = np.linalg.cholesky(r + 1e-9 * np.eye(5))
    up = above.sum(0) / (~cov).sum(0)  # each cell's share of misses above the truth
    pooled = cov.mean(0)
    rng = np.random.default_rng(1)
    fl = [i for i, f in enumerate(C.MEM) if C.SPLIT[f] == "jacktwo"]
    od = [i for i, f in enumerate(C.MEM) if C.SPLIT[f] == "twoway"]
    md = ["# Pass rates of the coverage_mem32_split confirmation "
          f"(`python bench/mem32_split_passrates.py --sims {a.sims}`)", "",
          f"{a.sims} simulated studies of {C.RUNS} runs per level (see the script's docstring). "
          f"The split rule's coverage indicators on seeds 43 and 44 pooled ({len(cov)} runs): "
          "correlations " + f"{min(r[i, j] for i in fl for j in fl if i < j):.2f}-"
          f"{max(r[i, j] for i in fl for j in fl if i < j):.2f} among the flipped cells, "
          f"{r[od[0], od[1]]:.2f} between the OOD cells, at most "
          f"{max(abs(r[i, j]) for i in fl for j in od):.2f} across kinds; share of misses above "
          "the truth " + ", ".join(f"{x:.2f}" for x in up) + f" ({', '.join(C.MEM)}).", "",
          "| true coverage per cell | five conditions | seven conditions |", "|---|---:|---:|"]
    for name, p in LEVELS.items():
        p = pooled if p is None else p
        label = f"{name} ({', '.join(f'{x:.3f}' for x in p)})" if name.startswith("seeds") else name
        five, seven = pass_rates(p, chol, up, rng, a.sims)
        md.append(f"| {label} | {five:.3f} | {seven:.3f} |")
    P.emit(md, a.md)


if __name__ == "__main__":
    main()
