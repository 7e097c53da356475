"""The one interval helper: a percentile 95 % interval over resampled values."""
from __future__ import annotations

import numpy as np


def percentile_ci(values: np.ndarray, level: float = 0.95,
                  min_share: float = 0.0) -> tuple[float | None, float | None]:
    """(lo, hi) percentile interval of the finite `values`; (None, None) when fewer than
    `min_share` of them are finite (a figure undefined in most resamples has no interval)."""
    values = np.asarray(values, dtype=np.float64)
    ok = values[np.isfinite(values)]
    if ok.size == 0 or ok.size < min_share * values.size:
        return None, None
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(ok, [tail, 100 - tail])
    return float(lo), float(hi)


def bootstrap_normal_ci(point: float, draws: np.ndarray, n_units: int, z: float = 1.96,
                        min_share: float = 0.8) -> tuple[float | None, float | None]:
    """point ± z · sd(draws) · sqrt(n/(n-1)), n the number of resampled units (model pairs).

    Centred on the point estimate, not on the draws: a draw over few shadow pairs holds
    fewer distinct models, which biases every draw's attack a little; only the spread is
    used. The sqrt(n/(n-1)) factor undoes the bootstrap's variance shrinkage for few
    units. bench/bench_coverage.py measures the coverage (results/coverage.json).
    """
    draws = np.asarray(draws, dtype=np.float64)
    ok = draws[np.isfinite(draws)]
    if point is None or not np.isfinite(point) or ok.size < max(2, min_share * draws.size):
        return None, None
    half = z * ok.std(ddof=1) * np.sqrt(n_units / max(n_units - 1, 1))
    return float(point - half), float(point + half)
