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


def _noise(rng: np.random.Generator, shape: tuple, df: float | None) -> np.ndarray:
    """Unit-variance noise: normal, or Student-t on `df` df scaled by sqrt((df - 2) / df)."""
    if df is None:
        return rng.normal(size=shape)
    return rng.standard_t(df, shape) * np.sqrt((df - 2) / df)


def synthetic_phi(n_models: int, n: int, queries: int, effect: float, seed: int,
                  model_sd: float = 0.3, arm_effects: tuple[float, ...] | None = None,
                  kind: np.ndarray | None = None, arm_rho: float = 1.0,
                  noise_df: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(phi [arms, m, N, Q] float64, keep [m, N]) with complementary pairs (the shadow
    stage's keep matrix). One arm per entry of `arm_effects` (default: (effect,)); the
    arms share keep and samples, and their models' noise (per-sample noise, shift,
    strength) is correlated `arm_rho` between arms: 1 shares it all; real shadows of two
    arms with the same seed correlate about 0.3 (bench/results/noise_structure.md).
    With `kind` [N], flipped (1) and OOD (2) samples sit 3 lower (hard: wrong unless
    memorized) and get a 3x larger membership effect, as a memorized outlier would.
    `noise_df`: each (model, sample, query) noise Student-t on that many df (> 2), scaled
    to unit variance, instead of normal: heavy tails in every score, members' too (with
    arm_rho < 1 each arm's noise mixes a shared and an own draw, so it is heavy-tailed but
    not t itself; None: the normal draws, bit for bit as before)."""
    if noise_df is not None and not noise_df > 2:
        raise ValueError(f"noise_df: {noise_df!r}; valid: None or a number > 2 (unit variance)")
    rng = np.random.default_rng([seed, 0x51A])
    keep = keep_matrix(n_models, n, seed)
    loc, spread = rng.normal(0, 2, n), rng.uniform(0.5, 1.5, n)
    d = np.abs(rng.normal(0, 1, n))
    if kind is not None:
        hard = np.asarray(kind) >= 1
        loc, d = np.where(hard, loc - 3.0, loc), np.where(hard, 3.0 * d, d)
    strength = rng.normal(1, model_sd, (n_models, 1, 1))
    shift = rng.normal(0, model_sd, (n_models, 1, 1))
    noise = _noise(rng, (n_models, n, queries), noise_df)
    arms = (effect,) if arm_effects is None else arm_effects
    out = []
    for j, e in enumerate(arms):
        st, sh, no = strength, shift, noise
        if arm_rho < 1:  # each arm's own part, drawn after the shared ones (rho 1: as before)
            own = np.random.default_rng([seed, 0x51B, j])
            a, c = np.sqrt(arm_rho), np.sqrt(1 - arm_rho)  # loadings: correlation arm_rho
            st = 1 + a * (strength - 1) + c * own.normal(0, model_sd, strength.shape)
            sh = a * shift + c * own.normal(0, model_sd, shift.shape)
            no = a * noise + c * _noise(own, noise.shape, noise_df)
        out.append(loc[None, :, None] + sh + spread[None, :, None] * no
                   + e * st * (d * keep)[..., None])
    return np.stack(out), keep


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


def dp_mechanism(kind: str, epsilon: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(scores [n] float64, members [n] bool) of a mechanism whose ε is known exactly, one
    trial per entry, half of them members, for testing empirical-ε bounds:

    - `rr`: randomized response: the output is the membership bit with probability
      e^ε / (1 + e^ε), else its flip; ε-DP, and the test "output = 1" attains ε exactly.
    - `laplace`: the bit plus Laplace noise of scale 1 / ε (sensitivity 1): ε-DP, and
      every threshold t >= 1 attains TPR / FPR = e^ε, so many thresholds are near-optimal
      (a bound that picks the best of many without correcting for it overshoots here).
    - `laplace_low`: as laplace with members scored *low*: only the TNR / FNR direction
      sees it.
    ε = 0 is a null: the output does not depend on membership.
    """
    rng = np.random.default_rng([seed, 0xE95])
    members = rng.permutation(np.arange(n) < n // 2)
    bit = members.astype(np.float64)
    if kind == "rr":
        keep_bit = rng.random(n) < np.exp(epsilon) / (1 + np.exp(epsilon))
        return np.where(keep_bit, bit, 1 - bit), members
    if kind in ("laplace", "laplace_low"):
        noise = rng.laplace(0.0, 1.0 / epsilon, n) if epsilon > 0 else rng.laplace(0, 1, n)
        signal = bit if epsilon > 0 else np.zeros(n)
        scores = signal + noise
        return (scores if kind == "laplace" else -scores), members
    raise ValueError(f"kind: {kind!r}; valid: rr | laplace | laplace_low")
