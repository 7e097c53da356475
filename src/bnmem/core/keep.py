"""Shadow-model keep masks: which pool samples each shadow model trains on (numpy only, so
the attack stage can draw the fake masks of its real null without importing training code)."""
from __future__ import annotations

import numpy as np

from bnmem.core.rng import SALT


def keep_matrix(n_models: int, n: int, seed: int) -> np.ndarray:
    """bool [n_models, n]: every sample IN for exactly n_models / 2 models.

    Models come in complementary pairs (2p, 2p+1): row 2p keeps a seeded random half of
    the pool (floor(n/2) samples), row 2p+1 the other half. Each column therefore has
    exactly n_models/2 True, and every model trains on floor or ceil of n/2 samples.
    """
    if n_models % 2:
        raise ValueError(f"n_models must be even, got {n_models}")
    rng = np.random.default_rng([seed, SALT["keep"]])
    keep = np.zeros((n_models, n), dtype=bool)
    for p in range(n_models // 2):
        half = rng.permutation(n)[: n // 2]
        keep[2 * p, half] = True
        keep[2 * p + 1] = ~keep[2 * p]
    return keep
