"""How often the coverage_mem32 plan's confirmation passes a rule of known true coverage
(bench/results/coverage_mem32_plan.md, its addendum): studies of 500 runs simulated by a
Gaussian copula whose five memorization cells' coverage indicators are correlated as
`twoway`'s were on seed 43 (results/coverage_matched32_seed43.jsonl), misses split evenly
between the tails; the plan's first three conditions ("three") and the addendum's five
("five": also a 0.925 floor and a mean of at least 0.94; every cell has a word here).

    python bench/mem32_passrates.py [--sims 3000] [--md bench/results/mem32_passrates.md]
"""
from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import numpy as np
from scipy.stats import norm

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("cm32", ROOT / "bench" / "coverage_matched32.py")
C = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(C)

# true coverage per cell (C.MEM's order: flipped common, flipped overlap, OOD common,
# flipped at matched fit, OOD at matched fit)
LEVELS = [0.95, 0.945, 0.94, 0.935, 0.93, 0.925, [0.92, 0.95, 0.95, 0.95, 0.95],
          [0.95, 0.95, 0.92, 0.95, 0.92], 0.96, 0.965, 0.97, 0.975]


def correlation(store: Path) -> np.ndarray:
    """The five memorization cells' coverage indicators' correlation under `twoway`."""
    t, done, _ = C.load(store)
    idx = [C.NAMES.index(f) for f in C.MEM]
    lo = np.array([d["twoway"][0] for d in done])[:, idx]
    hi = np.array([d["twoway"][1] for d in done])[:, idx]
    return np.corrcoef(((lo <= t[idx]) & (t[idx] <= hi)).astype(float).T)


def _res(cov, below, above, column: str = "twoway") -> dict:
    """A simulated study's five memorization cells as the readout's `read` gives them
    (coverage and tails from every one of its runs) in `column`, for its `confirm`."""
    rows = {f: {"coverage": float(c), "miss_below": float(b), "miss_above": float(a),
                "runs": C.RUNS} for f, c, b, a in zip(C.MEM, cov, below, above)}
    return {"table": {column: rows}, f"{column}_words": {f: C.word(r) for f, r in rows.items()}}


def cli(doc: str) -> argparse.Namespace:
    """A pass-rate script's arguments: --sims, --md."""
    ap = argparse.ArgumentParser(description=doc,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sims", type=int, default=3000)
    ap.add_argument("--md", type=Path, default=None)
    return ap.parse_args()


def emit(md: list[str], path: Path | None) -> None:
    """Print the table (and write it to `path` where given)."""
    text = "\n".join(md) + "\n"
    if path:
        path.write_text(text)
    print(text, end="")


def three(cov, below, above) -> bool:
    """The plan's first three conditions (its 0.92 floor, no mean), by the readout's rule."""
    return C.confirm(_res(cov, below, above), floor=0.92, mean_min=None)["confirmed"]


def five(cov, below, above) -> bool:
    """The addendum's five conditions: the readout's `confirm` itself."""
    return C.confirm(_res(cov, below, above))["confirmed"]


def pass_rate(p, rule, chol, rng, sims: int, n: int = C.RUNS) -> float:
    q = norm.ppf(np.broadcast_to(np.asarray(p, float), (5,)))
    ok = 0
    for _ in range(sims):
        cover = rng.standard_normal((n, 5)) @ chol.T < q
        u = rng.random((n, 5))
        miss = ~cover
        ok += rule(cover.mean(0), (miss & (u < 0.5)).mean(0), (miss & (u >= 0.5)).mean(0))
    return ok / sims


def main() -> None:
    a = cli(__doc__)
    r = correlation(ROOT / "results" / "coverage_matched32_seed43.jsonl")
    chol = np.linalg.cholesky(r + 1e-9 * np.eye(5))
    rng = np.random.default_rng(1)
    md = ["# Pass rates of the coverage_mem32 confirmation (`python bench/mem32_passrates.py"
          f" --sims {a.sims}`)", "",
          f"{a.sims} simulated studies of {C.RUNS} runs per level (see the script's docstring).",
          "", "| true coverage per cell | three conditions | five conditions |", "|---|---:|---:|"]
    for p in LEVELS:
        md.append(f"| {p} | {pass_rate(p, three, chol, rng, a.sims):.3f} | "
                  f"{pass_rate(p, five, chol, rng, a.sims):.3f} |")
    emit(md, a.md)


if __name__ == "__main__":
    main()
