"""Membership inference from shadow-model signals (bnmem.attack.signals): LiRA (Carlini et
al. 2022) under balanced leave-one-out; RMIA lives in bnmem.attack.rmia.

Shapes: m models, N pool samples, Q queries (augmentations), C classes, S = m - 1 shadows.
Balanced leave-one-out makes every model in turn the target and all models but it and its
complement (the model trained on the other half of the pool) its shadows, so every sample
has equally many IN and OUT shadows. Shadow signals are regrouped by pair and sorted once
(`PairSignals`); any weighting of pairs (leaving one out, a bootstrap draw over pairs)
then gets its medians from cumulative weights.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
from scipy.special import log_ndtr

from bnmem.core.io import InputError
from bnmem.attack.rmia import loo_rmia
from bnmem.attack.signals import Signals

LIRA_VARIANTS = {  # name -> (online, variance: see `score_lira`)
    "lira_online": (True, "sample"),
    "lira_offline": (False, "sample"),
    "lira_online_fixed": (True, "pooled"),
    "lira_offline_fixed": (False, "pooled"),
    "lira_online_global": (True, "global"),   # the LiRA reference code's fixed variance
    "lira_offline_global": (False, "global"),
}
VARIANCES = ("sample", "pooled", "global")
SD_FLOOR = 1e-8  # identical shadow signals would give sd 0 and an infinite likelihood
_HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


# ---------------------------------------------------------------- LiRA

@dataclass(frozen=True)
class Gaussians:
    """Per-sample IN/OUT Gaussians of the signal, query-major: location = median,
    scale = std (ddof 1); `pooled_*` the within-sample std pooled over samples (spread
    around each sample's own mean); `global_*` the std of all shadow signals of all samples
    and queries around their common mean (ddof 0), as the LiRA reference code's
    `np.std(dat_in)`: it adds the spread between samples' means."""
    mu_in: np.ndarray       # [Q, N], nan where no IN shadow
    mu_out: np.ndarray      # [Q, N], nan where no OUT shadow
    sd_in: np.ndarray       # [Q, N]
    sd_out: np.ndarray      # [Q, N]
    pooled_in: np.ndarray   # [Q, 1]
    pooled_out: np.ndarray  # [Q, 1]
    global_in: np.ndarray   # [1, 1]
    global_out: np.ndarray  # [1, 1]


def _scales(ss: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per-sample sd [..., Q, N], pooled sd [..., Q, 1]) from ss [..., Q, N] and counts
    n [N]; samples with < 2 shadows take the pooled sd."""
    ok = n >= 2
    dof = np.where(ok, n - 1, 0).sum()
    pooled = np.sqrt(np.where(ok, ss, 0).sum(-1, keepdims=True) / max(dof, 1))
    pooled = pooled if dof > 0 else np.ones_like(pooled)  # no sample has 2 shadows
    per = np.where(ok, np.sqrt(ss / np.maximum(n - 1, 1)), pooled)
    return np.maximum(per, SD_FLOOR), np.maximum(pooled, SD_FLOOR)


def fit_gaussians(phi_shadow: np.ndarray, keep_shadow: np.ndarray) -> Gaussians:
    """IN/OUT Gaussians from shadow signals phi_shadow [S, N, Q] and keep_shadow [S, N]:
    the reference path (a plain median / std per sample), any membership layout."""
    phi = np.swapaxes(phi_shadow, 1, 2)  # [S, Q, N]
    out = []
    for mask in (keep_shadow, ~keep_shadow):
        m = mask[:, None, :]
        n = mask.sum(0)
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-nan: a sample without shadows
            med = np.nanmedian(np.where(m, phi, np.nan), axis=0)
            mean = np.where(m, phi, 0).sum(0) / np.maximum(n, 1)
        ss = (np.where(m, phi - mean, 0) ** 2).sum(0)
        values = phi[np.broadcast_to(m, phi.shape)]
        glob = np.full((1, 1), max(float(values.std()) if values.size > 1 else 1.0, SD_FLOOR))
        out.append((np.where(n == 0, np.nan, med), *_scales(ss, n), glob))
    (mu_in, sd_in, pooled_in, gl_in), (mu_out, sd_out, pooled_out, gl_out) = out
    return Gaussians(mu_in, mu_out, sd_in, sd_out, pooled_in, pooled_out, gl_in, gl_out)


# ---------------------------------------------------------------- balanced leave-one-out

def complement_partner(keep: np.ndarray, model_ids: np.ndarray) -> np.ndarray:
    """[m] index of each model's complement (the model trained on exactly the other half).

    The shadow stage trains models in complementary pairs (ids 2p, 2p + 1; see
    `bnmem.train.shadow.keep_matrix`); balanced leave-one-out needs every pair complete.
    """
    ids = np.asarray(model_ids)
    where = {int(i): k for k, i in enumerate(ids)}
    partner = np.array([where.get(int(i) ^ 1, -1) for i in ids])
    if (partner < 0).any() or not all((keep[partner[t]] == ~keep[t]).all()
                                      for t in range(len(ids))):
        raise InputError("balanced leave-one-out needs complementary model pairs (ids 2p, "
                         "2p+1 with opposite keep masks, as the shadow stage trains them); "
                         f"got model ids {ids.tolist()}")
    return partner


@dataclass(frozen=True)
class PairSignals:
    """Shadow signals regrouped by complementary pair: for every pair p and sample i, the
    signal of the pair's model that trained on i (`inside`) and of the one that did not
    (`outside`), each sorted once along pairs so that any weighting of pairs (leave-one-
    pair-out, a bootstrap draw) gets its medians from cumulative weights, without sorting.
    """
    inside: np.ndarray    # [P, Q, N] sorted along P
    outside: np.ndarray   # [P, Q, N] sorted along P
    in_order: np.ndarray  # [P, Q, N] pair index of each sorted IN value
    out_order: np.ndarray
    pair_of: np.ndarray   # [m] pair index of each model
    first: np.ndarray     # [P] the pair's model with the lower id (index into models)
    second: np.ndarray    # [P]
    inside_raw: np.ndarray   # [P, Q, N] `inside` in pair order (leave_one_out's multisets)
    outside_raw: np.ndarray  # [P, Q, N]

    @classmethod
    def build(cls, phi: np.ndarray, keep: np.ndarray, model_ids: np.ndarray) -> "PairSignals":
        """From phi [m, N, Q] (models in id order), keep [m, N], model_ids [m]."""
        partner = complement_partner(keep, model_ids)
        first = np.flatnonzero(np.arange(len(partner)) < partner)
        second = partner[first]
        pair_of = np.empty(len(partner), dtype=np.int64)
        pair_of[first], pair_of[second] = np.arange(first.size), np.arange(first.size)
        a, b = np.swapaxes(phi[first], 1, 2), np.swapaxes(phi[second], 1, 2)  # [P, Q, N]
        k = keep[first][:, None, :]
        inside, outside = np.where(k, a, b), np.where(k, b, a)
        io, oo = np.argsort(inside, axis=0), np.argsort(outside, axis=0)
        return cls(np.take_along_axis(inside, io, 0), np.take_along_axis(outside, oo, 0),
                   io, oo, pair_of, first, second, inside, outside)

    def gaussians(self, weight: np.ndarray) -> Gaussians:
        """IN/OUT Gaussians of the shadow pairs taken `weight` [P] times each (integers):
        the location is the median of that multiset (a bootstrap draw's duplicates count),
        the spread is over the *distinct* pairs drawn, since a duplicated model is no
        independent evidence of spread (with duplicates counted, a pair drawn twice would
        look like two identical shadows: spread 0, scores ~1e17)."""
        n, distinct = int(weight.sum()), (weight > 0).astype(weight.dtype)
        m = int(distinct.sum())
        mu_in = _weighted_median(self.inside, self.in_order, weight, n)
        mu_out = _weighted_median(self.outside, self.out_order, weight, n)
        ss_in = _spread(self.inside, self.in_order, distinct, m)
        ss_out = _spread(self.outside, self.out_order, distinct, m)
        counts = np.full(mu_in.shape[-1], m)
        (sd_in, pooled_in), (sd_out, pooled_out) = _scales(ss_in, counts), _scales(ss_out, counts)
        sel = distinct > 0
        gl_in, gl_out = (_global_sd(raw[sel])[0] for raw in (self.inside_raw, self.outside_raw))
        return Gaussians(mu_in, mu_out, sd_in, sd_out, pooled_in, pooled_out, gl_in, gl_out)

    def leave_one_out(self, counts: np.ndarray) -> tuple[np.ndarray, Gaussians | None]:
        """For every drawn pair p (counts[p] > 0) at once: the Gaussians of the draw
        without p, i.e. `gaussians(counts with counts[p] = 0)`, in O(P) per sample instead
        of O(P^2). Returns (the pairs p [D], Gaussians with a leading axis [D, Q, N]);
        (empty, None) when leaving a pair out leaves fewer than two distinct pairs.

        Location: the draw's multiset sorted once (E, n values per sample); without the
        c_p copies of p's value, the k-th smallest is E[k-1] if k <= a_p (the copies
        sorted before p's) and E[k + c_p - 1] otherwise. Spread: sums over the distinct
        pairs (centred on their mean) minus p's term.
        """
        counts = np.asarray(counts)
        drawn = np.flatnonzero(counts > 0)
        m = drawn.size - 1  # distinct pairs left when one drawn pair is left out
        if m < 2:
            return drawn[:0], None
        c = counts[drawn][:, None, None]
        n = int(counts.sum()) - c  # [D, 1, 1] multiset size without p
        out = []
        for raw, order in ((self.inside_raw, self.in_order),
                           (self.outside_raw, self.out_order)):
            expanded = np.sort(np.repeat(raw, counts, axis=0), axis=0)  # E [n_draw, Q, N]
            cs = counts[order]
            before = np.empty_like(cs)
            np.put_along_axis(before, order, np.cumsum(cs, axis=0) - cs, axis=0)
            a = before[drawn]  # [D, Q, N] copies sorted before p's

            def kth(k: np.ndarray) -> np.ndarray:  # k-th smallest (1-based) without p
                idx = np.where(k <= a, k - 1, k + c - 1)
                return np.take_along_axis(expanded, idx, 0)

            mu = 0.5 * (kth((n + 1) // 2) + kth(n // 2 + 1))
            x = raw[drawn]
            x = x - x.mean(0)  # centred: the sums below lose no precision to the mean
            s1, s2 = x.sum(0) - x, (x ** 2).sum(0) - x ** 2
            ss = np.maximum(s2 - s1 ** 2 / m, 0.0)
            out.append((mu, *_scales(ss, np.full(raw.shape[-1], m)), _global_sd(raw[drawn], True)))
        (mu_in, sd_in, pooled_in, gl_in), (mu_out, sd_out, pooled_out, gl_out) = out
        return drawn, Gaussians(mu_in, mu_out, sd_in, sd_out, pooled_in, pooled_out, gl_in, gl_out)


def _global_sd(x: np.ndarray, leave_out: bool = False) -> np.ndarray:
    """Global std (ddof 0) of all values of the pairs x [D, Q, N] together: [1, 1, 1]; with
    leave_out, [D, 1, 1] where row p is the std of every pair's values but p's."""
    d = x.shape[0]
    if d == 0:
        return np.ones((1, 1, 1))
    x = x - x.mean()  # centred once: the sums below lose no precision to the mean
    s1, s2 = x.sum(axis=(1, 2)), (x ** 2).sum(axis=(1, 2))  # [D] per pair
    size = x[0].size
    if leave_out:
        s1, s2, cnt = s1.sum() - s1, s2.sum() - s2, (d - 1) * size
    else:
        s1, s2, cnt = s1.sum(keepdims=True), s2.sum(keepdims=True), d * size
    if cnt < 2:
        return np.ones((s1.size, 1, 1))
    var = np.maximum(s2 / cnt - (s1 / cnt) ** 2, 0.0)
    return np.maximum(np.sqrt(var), SD_FLOOR)[:, None, None]


def _weighted_median(srt: np.ndarray, order: np.ndarray, w: np.ndarray, n: int) -> np.ndarray:
    """Median [Q, N] of the multiset that holds sorted value srt[j] w[order[j]] times (srt,
    order [P, Q, N] sorted along P); nan when n == 0."""
    if n == 0:
        return np.full(srt.shape[1:], np.nan)
    cum = np.cumsum(w[order], axis=0)

    def kth(k: int) -> np.ndarray:  # k-th smallest (1-based) of the multiset
        j = (cum < k).sum(axis=0)
        return np.take_along_axis(srt, j[None], 0)[0]

    return 0.5 * (kth((n + 1) // 2) + kth(n // 2 + 1))


def _spread(srt: np.ndarray, order: np.ndarray, ind: np.ndarray, m: int) -> np.ndarray:
    """Sum of squared deviations from the mean [Q, N] of the values whose pair has ind 1."""
    if m == 0:
        return np.zeros(srt.shape[1:])
    iv = ind[order]
    mean = (iv * srt).sum(0) / m
    return (iv * (srt - mean) ** 2).sum(0)


def _score(x: np.ndarray, g: Gaussians, online: bool, variance: str,
           one_sided: bool) -> np.ndarray:
    """`score_lira` on query-major target signals x [..., Q, N]."""
    sd_in, sd_out = {"sample": (g.sd_in, g.sd_out), "pooled": (g.pooled_in, g.pooled_out),
                     # the reference code: online uses the IN std for both, offline the OUT std
                     "global": ((g.global_in, g.global_in) if online
                                else (g.global_out, g.global_out))}[variance]
    z_out = (x - g.mu_out) / sd_out
    if online:  # log N(x; in) - log N(x; out); an empty set's term is 0
        z_in = (x - g.mu_in) / sd_in
        term_in = -0.5 * z_in ** 2 - np.log(sd_in)
        term_out = -0.5 * z_out ** 2 - np.log(sd_out)
        per_query = (np.where(np.isnan(z_in), _HALF_LOG_2PI, term_in)
                     - np.where(np.isnan(z_out), _HALF_LOG_2PI, term_out))
    else:
        tail = log_ndtr(-z_out) if one_sided else np.log(2.0) + log_ndtr(-np.abs(z_out))
        per_query = np.where(np.isnan(z_out), 0.0, -tail)
    return per_query.mean(axis=-2)


def score_lira(phi_target: np.ndarray, g: Gaussians, online: bool, variance: str,
               one_sided: bool = True) -> np.ndarray:
    """LiRA score [..., N] of target signals [..., N, Q], averaged over queries; higher =
    member.

    Online: log N(phi; mu_in, s_in) - log N(phi; mu_out, s_out). Offline one-sided:
    -log P(phi' > phi | OUT) (log-survival, exact deep in the tail); two-sided:
    -log P(|phi' - mu_out| > |phi - mu_out|). variance: "sample" (s = each sample's own
    std), "pooled" (the within-sample std pooled over samples: bnmem's fixed variance) or
    "global" (the std of all shadow signals, between-sample spread included: the LiRA
    reference code's fixed variance, which uses the IN std for both densities online and
    the OUT std offline). A distribution without shadows for a sample
    contributes 0 (its term drops out).
    """
    if variance not in VARIANCES:
        raise ValueError(f"variance must be one of {VARIANCES}, got {variance!r}")
    return _score(np.swapaxes(phi_target, -1, -2), g, online, variance, one_sided)


def lira_scores(phi_target: np.ndarray, phi_shadow: np.ndarray, keep_shadow: np.ndarray,
                online: bool, variance: str, one_sided: bool = True) -> np.ndarray:
    """LiRA score [N] of one target from its shadows (see `score_lira`, `fit_gaussians`)."""
    return score_lira(phi_target, fit_gaussians(phi_shadow, keep_shadow), online,
                      variance, one_sided)


def loo_lira(phi: np.ndarray, keep: np.ndarray, model_ids: np.ndarray | None = None,
             one_sided: bool = True, variants: tuple[str, ...] = tuple(LIRA_VARIANTS),
             pairs: PairSignals | None = None) -> dict[str, np.ndarray]:
    """LIRA_VARIANTS (default all of them), balanced leave-one-out: {name: [m, N]}.

    Row t = target t scored with every model but t and its complement as shadows, so every
    sample has as many IN as OUT shadows (m/2 - 1 each). Leaving out one model only would
    leave a member 7 IN / 8 OUT shadows and a non-member 8 / 7, which biases online LiRA
    below 0.5 at null. Equals `lira_scores` on np.delete(..., [t, partner]).
    """
    ids = np.arange(keep.shape[0]) if model_ids is None else model_ids
    ps = pairs or PairSignals.build(phi, keep, ids)
    phi_qn = np.swapaxes(phi, 1, 2)  # [m, Q, N]
    out = {name: np.empty(keep.shape) for name in variants}
    pairs, g = ps.leave_one_out(np.ones(ps.first.size, dtype=np.int64))
    if g is None:  # 4 models: one pair left per target, each set holds one shadow
        for p in range(ps.first.size):
            w = np.ones(ps.first.size, dtype=np.int64)
            w[p] = 0
            _score_pairs(out, ps, np.array([p]), _stack(ps.gaussians(w)), phi_qn, one_sided)
        return out
    _score_pairs(out, ps, pairs, g, phi_qn, one_sided)
    return out


def _stack(g: Gaussians) -> Gaussians:
    """One pair's Gaussians with a leading pair axis of length 1."""
    return Gaussians(*(np.asarray(v)[None] for v in vars(g).values()))


def _score_pairs(out: dict, ps: PairSignals, pairs: np.ndarray, g: Gaussians,
                 phi_qn: np.ndarray, one_sided: bool) -> None:
    """out[variant][t] for both models t of every pair in `pairs`, scored with that
    pair's Gaussians (g's leading axis)."""
    for t in (ps.first[pairs], ps.second[pairs]):
        for name in out:
            online, variance = LIRA_VARIANTS[name]
            out[name][t] = _score(phi_qn[t], g, online, variance, one_sided)


def lira_draw(ps: PairSignals, phi: np.ndarray, counts: np.ndarray, variant: str,
              one_sided: bool = True) -> dict[int, np.ndarray]:
    """One bootstrap draw over model pairs: pair p taken counts[p] times. Returns
    {model index: scores [N]} for the models of drawn pairs, each scored against the
    drawn pairs other than its own (balanced leave-one-pair-out within the draw); a
    pair with fewer than two other distinct pairs drawn is skipped."""
    online, variance = LIRA_VARIANTS[variant]
    pairs, g = ps.leave_one_out(counts)  # none when one distinct shadow pair is left per side
    if g is None:
        return {}
    out = {}
    for t in (ps.first[pairs], ps.second[pairs]):
        scores = _score(np.swapaxes(phi[t], 1, 2), g, online, variance, one_sided)
        out.update(zip(t.tolist(), scores))
    return out


def run_attacks(sig: Signals, one_sided: bool, gamma: float, a: float, population: int,
                seed: int) -> dict[str, np.ndarray]:
    """Every attack's balanced leave-one-out scores {name: [m, N]} for one arm."""
    scores = loo_lira(sig.phi, sig.keep, sig.model_ids, one_sided)
    partner = complement_partner(sig.keep, sig.model_ids)
    scores.update(loo_rmia(sig.logp, sig.keep, sig.model_ids, gamma, a, population, seed,
                           partner))
    return scores
