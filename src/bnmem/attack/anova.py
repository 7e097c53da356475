"""The samples' part of a figure's variance without the model-by-sample interaction, from
the pairs x samples table itself (bench/results/real_shadows_anova_plan.md).

With complementary pairs every pool sample is IN for exactly one model of each pair, so
the figures memorization reads are means of per-(pair, sample) cells: Feldman-Zhang
memorization of a kind is the mean over its samples and the pairs of c_in - c_out (the
pair's IN model correct minus its OUT model correct), held-out accuracy the mean over clean
samples of c_out, fit the mean of c_in. A read (a difference at equal budgets, or at a
matched common point interpolated between endpoints) is a smooth function F of such means
M_j; its linearization sum_j g_j M_j is a sum over the table of u_ps (`linear_cells`).

For that sum, with the samples drawn by a bootstrap stratified by kind (the attack stage's
`bootstrap_weights`), `samples_part` gives
  V_S = sum_k sum_{s in k} (z_s - mean_k z)^2, z_s = sum_p u_ps: the samples' bootstrap's
        variance, exactly (no Monte Carlo draws);
  I   = sum_k P / (P - 1) sum_{s in k} sum_p r_ps^2, r the two-way residual within stratum k:
        the interaction part of V_S, which the pairs' jackknife already counts;
  B   = V_S - I: under the two-way random-effects model u = a_p + b_s + e_ps (per stratum)
        unbiased for the samples' part without the interaction.

No rule of the attack stage reads B yet: the study that tried V_j + max(B, 0) for
memorization adopted nothing (bench/results/real_shadows_anova_plan.md's outcome); the
analyses (bench/real_shadow_anova.py, bench/sim_anova.py) use this module.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from bnmem.core.kinds import KINDS

STEP = 1e-7  # central differences of a read in its endpoint means


def pair_cells(correct: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(c_in, c_out) [P, N] float64 of models ordered as complementary pairs (rows 2p, 2p+1):
    the pair's IN model's correctness on each sample, and its OUT model's."""
    correct, keep = np.asarray(correct, bool), np.asarray(keep, bool)
    m = keep.shape[0]
    if m % 2 or not (keep[0::2] ^ keep[1::2]).all():
        raise ValueError("keep: rows 2p and 2p+1 must be complementary pairs")
    first_in = keep[0::2]
    c_in = np.where(first_in, correct[0::2], correct[1::2]).astype(np.float64)
    c_out = np.where(first_in, correct[1::2], correct[0::2]).astype(np.float64)
    return c_in, c_out


def gradient(f: Callable[[np.ndarray], float], x: np.ndarray, step: float = STEP) -> np.ndarray:
    """Central differences of f at x (one entry per input); nan where f is not finite."""
    x = np.asarray(x, np.float64)
    g = np.empty(x.size)
    for j in range(x.size):
        hi, lo = x.copy(), x.copy()
        hi[j] += step
        lo[j] -= step
        g[j] = (f(hi) - f(lo)) / (2 * step)
    return g


def linear_cells(terms: list[tuple[float, np.ndarray, np.ndarray]]) -> np.ndarray:
    """u [P, N] of a linearized read: sum over `terms` (g_j, cells_j [P, N], mask_j [N]) of
    g_j x cells_j / (P x n_j) on the samples of mask_j (n_j of them), 0 elsewhere: each
    term one endpoint mean M_j = mean of cells_j over the pairs and mask_j's samples."""
    u = None
    for g, cells, mask in terms:
        mask = np.asarray(mask, bool)
        if u is None:
            u = np.zeros(cells.shape, np.float64)
        if g == 0.0 or not mask.any():
            continue
        u[:, mask] += g * cells[:, mask] / (cells.shape[0] * mask.sum())
    if u is None:
        raise ValueError("no terms")
    return u


def samples_part(u: np.ndarray, kind: np.ndarray) -> dict:
    """{"v_s", "interaction", "b", "strata": {kind: (b_k, n_k)}} of a [P, N] table u whose sum
    is the linearized read (module docstring), samples stratified by `kind`."""
    u, kind = np.asarray(u, np.float64), np.asarray(kind)
    p = u.shape[0]
    if p < 2:
        raise ValueError("samples_part needs at least 2 pairs")
    v_s = inter = 0.0
    strata = {}
    for k in np.unique(kind):
        x = u[:, kind == k]
        z = x.sum(axis=0)
        vk = float(((z - z.mean()) ** 2).sum())
        r = x - x.mean(axis=0, keepdims=True) - x.mean(axis=1, keepdims=True) + x.mean()
        ik = float(p / (p - 1) * (r ** 2).sum())
        v_s, inter = v_s + vk, inter + ik
        strata[int(k)] = (vk - ik, int(x.shape[1]))
    return {"v_s": v_s, "interaction": inter, "b": v_s - inter, "strata": strata}


def satterthwaite_df(v: float, v_j: float, strata: dict, n_pairs: int) -> float:
    """Satterthwaite's df of the variance v = V_j + max(B, 0) (the plan's ANs): V_j on P - 1
    df, each stratum's part of B, floored at 0, on n_k - 1."""
    den = v_j ** 2 / (n_pairs - 1) + sum(max(b, 0.0) ** 2 / (n - 1)
                                         for b, n in strata.values() if n > 1)
    return float(v ** 2 / den) if den > 0 else np.inf


def endpoint_cells(correct: np.ndarray, keep: np.ndarray, kind: np.ndarray) -> dict:
    """{endpoint figure: (cells [P, N], mask [N])} of one endpoint's models (rows 2p, 2p+1
    a complementary pair): the means arm_draw computes for memorization and the utilities
    that locate a matched point."""
    mask = {name: np.asarray(kind) == code for name, code in KINDS.items()}
    c_in, c_out = pair_cells(correct, keep)
    return {"in_acc_clean": (c_in, mask["clean"]), "out_acc_clean": (c_out, mask["clean"]),
            "fz_flipped": (c_in - c_out, mask["flipped"]), "fz_ood": (c_in - c_out, mask["ood"])}


def cell_mean(cell: tuple) -> float:
    c, m = cell
    return float(c[:, m].mean()) if m.any() else np.nan


def read_terms(cells_a: list[dict], cells_b: list[dict], figure: str,
               criterion: str | None = None, key: str | None = None, budget: int | None = None
               ) -> tuple[float, list]:
    """(the point of a - b, its linearization's terms [(g, cells, mask)]) for one
    memorization read: at equal budget `budget` (an endpoint index), or under `criterion`
    (bnmem.attack.frontier.CRITERIA) at draw_compare's `key` (the common point: the figure;
    the overlap: "<figure>_overlap"), g by central differences of draw_compare itself."""
    from bnmem.attack.frontier import CRITERIA, draw_compare
    if budget is not None:
        ta, tb = cells_a[budget][figure], cells_b[budget][figure]
        return cell_mean(ta) - cell_mean(tb), [(1.0, *ta), (-1.0, *tb)]
    util = CRITERIA[criterion][0]
    inputs = [(side, e, f) for side, ends in enumerate((cells_a, cells_b))
              for e in range(len(ends)) for f in (util, figure)]
    sides = (cells_a, cells_b)
    x0 = np.array([cell_mean(sides[s][e][f]) for s, e, f in inputs])

    def f(x: np.ndarray) -> float:
        ends = ([{} for _ in cells_a], [{} for _ in cells_b])
        for (s, e, name), v in zip(inputs, x):
            ends[s][e][name] = v
        return float(draw_compare(ends[0], ends[1], criterion, (figure,))[key])

    g = gradient(f, x0)
    return f(x0), [(gj, *sides[s][e][name]) for gj, (s, e, name) in zip(g, inputs)]

