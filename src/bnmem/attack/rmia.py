"""RMIA (Zarifzadeh et al. 2024, "Low-Cost High-Power Membership Inference Attacks").

Pr(x|theta) is the softmax probability of the training label, averaged over queries and
handled as a log throughout, so flipped and OOD samples with tiny probabilities never
underflow. Leave-one-out reference means subtract the target's term from per-sample sums
instead of re-reducing over all models for every target. The stage reports the online
attack as `rmia` (reference models both IN and OUT) and the offline one as `rmia_offline`.
"""
from __future__ import annotations

import numpy as np

from bnmem.core.rng import SALT


def _log_mean_masked(logp: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """log of the mean of exp(logp) over models where mask [S, N]; nan where none."""
    vals = np.where(mask, logp, -np.inf)
    top = vals.max(axis=0)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = safe + np.log(np.exp(vals - safe).sum(axis=0)) - np.log(mask.sum(axis=0))
    return np.where(mask.any(axis=0), out, np.nan)


def _reference(l_in: np.ndarray, l_out: np.ndarray, online: bool, a: float) -> np.ndarray:
    """log Pr(x) [N] from the log mean probability of the IN and OUT reference models.

    Online: the mean of the IN-model mean and the OUT-model mean (balanced even when
    leave-one-out leaves one more OUT than IN model; one set missing -> the other).
    Offline: ((1 + a) mean_OUT + (1 - a)) / 2, the paper's linear correction.
    """
    if not online:
        return np.logaddexp(np.log1p(a) + l_out, np.log1p(-a) if a < 1 else -np.inf) - np.log(2)
    with np.errstate(invalid="ignore"):  # nan where a set is empty, replaced below
        both = np.logaddexp(l_in, l_out) - np.log(2)
    return np.where(np.isnan(l_in), l_out, np.where(np.isnan(l_out), l_in, both))


def rmia_reference(logp_shadow: np.ndarray, keep_shadow: np.ndarray, online: bool,
                   a: float) -> np.ndarray:
    """log Pr(x) [N] from reference models logp_shadow [S, N] (see `_reference`)."""
    return _reference(_log_mean_masked(logp_shadow, keep_shadow),
                      _log_mean_masked(logp_shadow, ~keep_shadow), online, a)


def rmia_rank(logp_target: np.ndarray, log_px: np.ndarray, population: np.ndarray,
              gamma: float) -> np.ndarray:
    """RMIA score [N]: share of the population samples z with LR(x, z) >= gamma, where
    LR = (Pr(x|theta)/Pr(x)) / (Pr(z|theta)/Pr(z)), computed in log space (exact for tiny
    probabilities); nan for the population samples themselves.

    The population is reference only: its samples are not scored (nan, left out of every
    ROC), so every scored sample is compared with the same P samples, none of which is
    scored. Any rule that scores a population sample against the others is unfair at
    null: a member is compared with that sample, the sample is not compared with the
    member, and the many tied counts of confident samples break to one side (online RMIA
    0.492 at the real null with denominators P - 1 inside the population, 0.498 with
    P + 1 drawn and P used by everyone).
    """
    pop = np.asarray(population)
    if pop.size < 1:
        raise ValueError("RMIA needs a population of at least 1 sample")
    ratio = logp_target - log_px
    thr = ratio - np.log(gamma)  # LR(x, z) >= gamma  <=>  ratio_z <= thr_x
    score = np.searchsorted(np.sort(ratio[pop]), thr, side="right") / pop.size
    score[pop] = np.nan
    return score


def rmia_scores(logp_target: np.ndarray, logp_shadow: np.ndarray, keep_shadow: np.ndarray,
                population: np.ndarray, gamma: float, online: bool = True,
                a: float = 0.3) -> np.ndarray:
    """RMIA score [N] of one target (logp = log Pr(y|x) averaged over queries)."""
    return rmia_rank(logp_target, rmia_reference(logp_shadow, keep_shadow, online, a),
                     population, gamma)


class _LooLogMean:
    """log mean exp(logp) over a set of models, leave-one-out in O(N) per target.

    Sums are scaled by the set's max; removing model t subtracts its term. Where that
    cancels (t held nearly all the mass) the few affected samples are summed afresh.
    """

    def __init__(self, logp: np.ndarray, mask: np.ndarray) -> None:
        self.logp, self.mask, self.n = logp, mask, mask.sum(axis=0)
        self.top = np.where(mask, logp, -np.inf).max(axis=0)
        self.top = np.where(np.isfinite(self.top), self.top, 0.0)
        self.total = np.exp(np.where(mask, logp - self.top, -np.inf)).sum(axis=0)

    def without(self, *models: int) -> np.ndarray:
        """The log mean over the set without `models` (those that are members)."""
        rest, n1, member = self.total.copy(), self.n.copy(), np.zeros(self.n.shape, bool)
        for t in models:
            rest -= np.where(self.mask[t], np.exp(self.logp[t] - self.top), 0.0)
            n1 -= self.mask[t]
            member |= self.mask[t]
        with np.errstate(divide="ignore", invalid="ignore"):
            out = self.top + np.log(rest) - np.log(n1)
        redo = np.flatnonzero(member & (n1 > 0) & (rest < 1e-8 * self.total))
        if redo.size:
            sub = self.mask[:, redo].copy()
            sub[list(models)] = False
            out[redo] = _log_mean_masked(self.logp[:, redo], sub)
        return np.where(n1 > 0, out, np.nan)


def loo_rmia(logp: np.ndarray, keep: np.ndarray, model_ids: np.ndarray, gamma: float,
             a: float, population: int, seed: int,
             partner: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Leave-one-out RMIA, {"rmia": online, "rmia_offline": offline}, each [m, N]
    (same result as `rmia_scores` on np.delete). With `partner` [m] (each model's
    complement, see `bnmem.attack.lira.complement_partner`) the complement is left out too:
    balanced, as for LiRA.

    Target t's population: `population` of its non-members (reference only: not scored,
    nan in t's row; `rmia_rank`), drawn with a generator keyed by (seed, model id), so it
    does not depend on shard layout. At most half of t's non-members are drawn, so the
    other half is scored.
    """
    ref_in, ref_out = _LooLogMean(logp, keep), _LooLogMean(logp, ~keep)
    out = {"rmia": np.empty(keep.shape), "rmia_offline": np.empty(keep.shape)}
    for t in range(keep.shape[0]):
        rng = np.random.default_rng([seed, SALT["rmia_population"], int(model_ids[t])])
        non = np.flatnonzero(~keep[t])
        if non.size == 0:
            raise ValueError(f"model {model_ids[t]} has no non-members to draw a population from")
        pop = rng.choice(non, size=min(population, non.size // 2), replace=False)
        out_models = (t,) if partner is None else (t, int(partner[t]))
        l_in, l_out = ref_in.without(*out_models), ref_out.without(*out_models)
        for name, online in (("rmia", True), ("rmia_offline", False)):
            out[name][t] = rmia_rank(logp[t], _reference(l_in, l_out, online, a), pop, gamma)
    return out
