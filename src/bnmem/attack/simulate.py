"""Synthetic shadow-model outputs with a known membership signal, for checking the
attacks and intervals where the truth is known (tests, bench/bench_coverage.py).

Every sample i has its own location and spread of the logit-scaled confidence; a model
that trained on i adds `effect * strength_m * d_i` to it, where d_i >= 0 varies by sample
and strength_m by model (model-to-model variation, as between shadow models trained with
different seeds). effect = 0 is the null: membership changes nothing.
"""
from __future__ import annotations

import numpy as np

from bnmem.core.keep import keep_matrix


def synthetic_phi(n_models: int, n: int, queries: int, effect: float, seed: int,
                  model_sd: float = 0.3, arm_effects: tuple[float, ...] | None = None,
                  kind: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(phi [arms, m, N, Q] float64, keep [m, N]) with complementary pairs (the shadow
    stage's keep matrix). One arm per entry of `arm_effects` (default: (effect,)); the
    arms share keep, samples and models' noise streams (paired, like the real arms).
    With `kind` [N], flipped samples (1) sit 3 lower (hard: wrong unless memorized) and
    get a 3x larger membership effect, as a memorized outlier would."""
    rng = np.random.default_rng([seed, 0x51A])
    keep = keep_matrix(n_models, n, seed)
    loc, spread = rng.normal(0, 2, n), rng.uniform(0.5, 1.5, n)
    d = np.abs(rng.normal(0, 1, n))
    if kind is not None:
        hard = np.asarray(kind) == 1
        loc, d = np.where(hard, loc - 3.0, loc), np.where(hard, 3.0 * d, d)
    strength = rng.normal(1, model_sd, (n_models, 1, 1))
    shift = rng.normal(0, model_sd, (n_models, 1, 1))
    noise = rng.normal(size=(n_models, n, queries))
    base = loc[None, :, None] + shift + spread[None, :, None] * noise
    arms = (effect,) if arm_effects is None else arm_effects
    phi = np.stack([base + e * strength * (d * keep)[..., None] for e in arms])
    return phi, keep


def synthetic_logits(n_models: int, n: int, queries: int, classes: int, seed: int
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(logits [m, N, Q, C] float32, labels [N], keep [m, N]) with no membership signal:
    per-sample class scores plus model and query noise of a per-sample scale."""
    rng = np.random.default_rng([seed, 0x10C])
    keep = keep_matrix(n_models, n, seed)
    labels = rng.integers(0, classes, n)
    center = rng.normal(0, 2, (n, classes))
    center[np.arange(n), labels] += rng.normal(2, 2, n)
    scale = rng.uniform(0.3, 2.0, (n, 1))
    logits = center[None, :, None, :] + scale[None, :, None, :] * rng.normal(
        size=(n_models, n, queries, classes))
    return logits.astype(np.float32), labels, keep
