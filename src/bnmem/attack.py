"""Membership inference from shadow-model logits: signals, LiRA (Carlini et al. 2022) and
the Feldman-Zhang memorization score; RMIA lives in bnmem.rmia.

Shapes: m models, N pool samples, Q queries (augmentations), C classes, S = m - 1 shadows.
Leave-one-out evaluation makes every model in turn the target and all others its shadows.
LiRA's per-sample medians are made leave-one-out exact without re-sorting per target: the
IN and OUT signals of every sample are sorted once, and removing the target's value from a
sorted list only shifts the median's index (`_remove_one`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.special import log_ndtr

from bnmem.io import InputError, load_npz
from bnmem.margin import log_prob_from_margin, logit_margin  # noqa: F401 (re-exported)
from bnmem.rmia import loo_rmia

LIRA_VARIANTS = {  # name -> (online, fixed_variance)
    "lira_online": (True, False),
    "lira_offline": (False, False),
    "lira_online_fixed": (True, True),
    "lira_offline_fixed": (False, True),
}
SD_FLOOR = 1e-8  # identical shadow signals would give sd 0 and an infinite likelihood
_HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


# ---------------------------------------------------------------- signals

@dataclass(frozen=True)
class Signals:
    """Per-model signals of one arm, models sorted by id."""
    phi: np.ndarray        # [m, N, Q] float64 logit margin
    logp: np.ndarray       # [m, N] float64 log Pr(y | x, model), averaged over queries
    correct: np.ndarray    # [m, N] bool, argmax of the identity query == y
    keep: np.ndarray       # [m, N] bool membership
    model_ids: np.ndarray  # [m] int64, ascending


def signals(logits: np.ndarray, labels: np.ndarray, identity_query: int = 0,
            chunk: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(phi [m,N,Q], logp [m,N], correct [m,N]) from logits [m,N,Q,C]; `chunk` models at a
    time, so no float64 copy of the whole logits array is ever made."""
    m, n, q, _ = logits.shape
    phi, logp, correct = np.empty((m, n, q)), np.empty((m, n)), np.empty((m, n), bool)
    for a in range(0, m, chunk):
        part = logits[a:a + chunk]
        phi[a:a + chunk] = logit_margin(part, labels[None, :, None])
        # log of the query-mean probability of the label
        logp[a:a + chunk] = np.logaddexp.reduce(log_prob_from_margin(phi[a:a + chunk]), axis=2)
        correct[a:a + chunk] = part[:, :, identity_query].argmax(axis=-1) == labels[None, :]
    return phi, logp - np.log(q), correct


def load_shadow(paths: list[Path], labels: np.ndarray, identity_query: int = 0) -> Signals:
    """Read shadow shards, check them, and return their signals sorted by model id.

    Raises InputError (one line, naming the file) on a missing or unreadable shard,
    inconsistent shapes, non-finite logits or duplicate model ids.
    """
    fields = ("model_ids", "keep", "phi", "logp", "correct")
    parts, shape = [], None
    for path in paths:
        z = load_npz(path, ("logits", "keep", "model_ids"))
        lg, keep, ids = z["logits"], z["keep"], z["model_ids"]
        m = ids.shape[0] if ids.ndim == 1 else -1
        if lg.ndim != 4 or keep.shape != (m, labels.size) or lg.shape[:2] != (m, labels.size):
            raise InputError(f"{path}: logits {lg.shape}, keep {keep.shape}, model_ids "
                             f"{ids.shape} do not fit [m, N={labels.size}, Q, C], [m, N], [m]")
        if shape is not None and lg.shape[2:] != shape:
            raise InputError(f"{path}: queries x classes {lg.shape[2:]} differ from {shape} "
                             f"in {paths[0]}")
        if keep.dtype != bool:
            raise InputError(f"{path}: keep is {keep.dtype}, expected bool")
        if not np.isfinite(lg).all():
            bad = ids[~np.isfinite(lg).reshape(m, -1).all(axis=1)]
            raise InputError(f"{path}: non-finite logits from models {bad.tolist()}")
        if labels.min() < 0 or labels.max() >= lg.shape[3]:
            raise InputError(f"{path}: {lg.shape[3]} classes, but labels span "
                             f"[{labels.min()}, {labels.max()}]")
        shape = lg.shape[2:]
        parts.append(dict(zip(fields, (ids.astype(np.int64), keep,
                                       *signals(lg, labels, identity_query)))))
    if not parts:
        raise InputError("no shadow shards given")
    ids = np.concatenate([p["model_ids"] for p in parts])
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise InputError(f"duplicate model ids {uniq[counts > 1].tolist()} across "
                         f"{[str(p) for p in paths]}")
    order = np.argsort(ids)  # global id order, never file order
    return Signals(**{f: np.concatenate([p[f] for p in parts])[order] for f in fields})


# ---------------------------------------------------------------- LiRA

@dataclass(frozen=True)
class _SetStats:
    """One membership set (IN or OUT) per query and sample, ready for leave-one-out.

    Removing member t from a sorted set of n moves the median only by which side of the
    median t sits on, so the three possible reduced medians are precomputed and a target
    picks one by its rank: no per-target sorting. Arrays are query-major ([Q, N]) so the
    per-query work and the mean over queries run on contiguous rows.
    """
    phi: np.ndarray     # [S, Q, N] the signals
    mask: np.ndarray    # [S, N] membership of each model in the set
    rank: np.ndarray    # [S, Q, N] int32 position of a member in the set's ascending order
    n: np.ndarray       # [N] set size
    center: np.ndarray  # [Q, N] set mean
    ss: np.ndarray      # [Q, N] sum of squared deviations from the mean
    median: np.ndarray  # [Q, N] median of the whole set (nan if empty)
    drop: np.ndarray    # [3, Q, N] median without a member of rank <= a, in (a, b], > b
    cut: np.ndarray     # [2, N] a, b: lower and upper median index of the reduced set


def _set_stats(phi_qn: np.ndarray, mask: np.ndarray) -> _SetStats:
    """Statistics of the set `mask` [S, N] of signals phi_qn [S, Q, N]."""
    values = np.moveaxis(phi_qn, 0, -1)  # [Q, N, S] view: sort along models
    inside = mask.T[None]
    masked = np.where(inside, values, np.inf)  # non-members sort to the end
    order = np.argsort(masked, axis=-1)
    srt = np.take_along_axis(masked, order, -1)
    rank = np.empty(order.shape, dtype=np.int32)
    np.put_along_axis(rank, order, np.arange(order.shape[-1], dtype=np.int32), axis=-1)
    n = mask.sum(axis=0)
    center = np.where(mask[:, None], phi_qn, 0).sum(0) / np.maximum(n, 1)
    ss = (np.where(mask[:, None], phi_qn - center, 0) ** 2).sum(0)

    def kth(k: np.ndarray) -> np.ndarray:  # k [N] -> k-th smallest member [Q, N]
        k = np.broadcast_to(np.clip(k, 0, srt.shape[-1] - 1)[None, :, None], srt.shape[:2] + (1,))
        return np.take_along_axis(srt, k, -1)[..., 0]

    median = np.where(n == 0, np.nan, 0.5 * (kth((n - 1) // 2) + kth(n // 2)))
    a, b = (n - 2) // 2, (n - 1) // 2  # median indices of the n - 1 remaining members
    drop = np.where(n < 2, np.nan, np.stack([0.5 * (kth(a + 1) + kth(b + 1)),
                                             0.5 * (kth(a) + kth(b + 1)),
                                             0.5 * (kth(a) + kth(b))]))
    return _SetStats(phi_qn, mask, np.ascontiguousarray(np.moveaxis(rank, -1, 0)), n, center,
                     ss, median, drop, np.stack([a, b]))


def _remove_one(st: _SetStats, t: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(median [Q,N], ss [Q,N], n [N]) of the set with model t removed (if a member)."""
    if t is None:
        return st.median, st.ss, st.n
    member, r = st.mask[t], st.rank[t]
    a, b = st.cut
    dropped = np.where(r <= a, st.drop[0], np.where(r <= b, st.drop[1], st.drop[2]))
    med = np.where(member, dropped, st.median)
    # Welford removal: ss' = ss - d^2 n / (n - 1), d = phi_t - old mean. It cancels when
    # t was an outlier holding most of ss; those few samples are summed afresh.
    factor = np.where(member & (st.n > 1), st.n / np.maximum(st.n - 1, 1), 0.0)
    ss = np.maximum(st.ss - (st.phi[t] - st.center) ** 2 * factor, 0.0)
    redo = np.flatnonzero(member & (ss < 1e-4 * st.ss).any(axis=0))
    if redo.size:
        sub = st.mask[:, None, redo].copy()  # [S, 1, r]
        sub[t] = False
        v = st.phi[:, :, redo]
        mean = np.where(sub, v, 0).sum(0) / np.maximum(sub.sum(0), 1)
        ss[:, redo] = (np.where(sub, v - mean, 0) ** 2).sum(0)
    return med, ss, st.n - member


@dataclass(frozen=True)
class Gaussians:
    """Per-sample IN/OUT Gaussians of the signal, query-major: location = median,
    scale = std (ddof 1); `pooled_*` the within-sample std pooled over samples."""
    mu_in: np.ndarray       # [Q, N], nan where no IN shadow
    mu_out: np.ndarray      # [Q, N], nan where no OUT shadow
    sd_in: np.ndarray       # [Q, N]
    sd_out: np.ndarray      # [Q, N]
    pooled_in: np.ndarray   # [Q, 1]
    pooled_out: np.ndarray  # [Q, 1]


def _scales(ss: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(per-sample sd [Q,N], pooled sd [Q,1]); samples with < 2 shadows take the pooled sd."""
    ok = n >= 2
    dof = np.where(ok, n - 1, 0).sum()
    pooled = np.sqrt(np.where(ok, ss, 0).sum(1, keepdims=True) / max(dof, 1))
    pooled = pooled if dof > 0 else np.ones_like(pooled)  # no sample has 2 shadows
    per = np.where(ok, np.sqrt(ss / np.maximum(n - 1, 1)), pooled)
    return np.maximum(per, SD_FLOOR), np.maximum(pooled, SD_FLOOR)


def _gaussians(st_in: _SetStats, st_out: _SetStats, exclude: int | None = None) -> Gaussians:
    mu_in, ss_in, n_in = _remove_one(st_in, exclude)
    mu_out, ss_out, n_out = _remove_one(st_out, exclude)
    (sd_in, pooled_in), (sd_out, pooled_out) = _scales(ss_in, n_in), _scales(ss_out, n_out)
    return Gaussians(mu_in, mu_out, sd_in, sd_out, pooled_in, pooled_out)


def fit_gaussians(phi_shadow: np.ndarray, keep_shadow: np.ndarray) -> Gaussians:
    """IN/OUT Gaussians from shadow signals phi_shadow [S, N, Q] and keep_shadow [S, N]."""
    phi_qn = np.ascontiguousarray(np.swapaxes(phi_shadow, 1, 2))
    return _gaussians(_set_stats(phi_qn, keep_shadow), _set_stats(phi_qn, ~keep_shadow))


def _score(x: np.ndarray, g: Gaussians, online: bool, fixed_variance: bool,
           one_sided: bool) -> np.ndarray:
    """`score_lira` on query-major target signals x [..., Q, N]."""
    sd_in = g.pooled_in if fixed_variance else g.sd_in
    sd_out = g.pooled_out if fixed_variance else g.sd_out
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


def score_lira(phi_target: np.ndarray, g: Gaussians, online: bool, fixed_variance: bool,
               one_sided: bool = True) -> np.ndarray:
    """LiRA score [..., N] of target signals [..., N, Q], averaged over queries; higher =
    member.

    Online: log N(phi; mu_in, s_in) - log N(phi; mu_out, s_out). Offline one-sided:
    -log P(phi' > phi | OUT) (log-survival, exact deep in the tail); two-sided:
    -log P(|phi' - mu_out| > |phi - mu_out|). fixed_variance: s = the std pooled over samples.
    A distribution without shadows for a sample contributes 0 (its term drops out).
    """
    return _score(np.swapaxes(phi_target, -1, -2), g, online, fixed_variance, one_sided)


def lira_scores(phi_target: np.ndarray, phi_shadow: np.ndarray, keep_shadow: np.ndarray,
                online: bool, fixed_variance: bool, one_sided: bool = True) -> np.ndarray:
    """LiRA score [N] of one target from its shadows (see `score_lira`, `fit_gaussians`)."""
    return score_lira(phi_target, fit_gaussians(phi_shadow, keep_shadow), online,
                      fixed_variance, one_sided)


def loo_lira(phi: np.ndarray, keep: np.ndarray, one_sided: bool = True,
             variants: tuple[str, ...] = tuple(LIRA_VARIANTS)) -> dict[str, np.ndarray]:
    """LIRA_VARIANTS (default all four), leave-one-out: {name: [m, N]}, row t = target t
    scored with the other m - 1 models as shadows (same result as `lira_scores` on
    np.delete)."""
    phi_qn = np.ascontiguousarray(np.swapaxes(phi, 1, 2))  # [m, Q, N]
    st_in, st_out = _set_stats(phi_qn, keep), _set_stats(phi_qn, ~keep)
    out = {name: np.empty(keep.shape) for name in variants}
    for t in range(keep.shape[0]):
        g = _gaussians(st_in, st_out, exclude=t)
        for name in variants:
            online, fixed = LIRA_VARIANTS[name]
            out[name][t] = _score(phi_qn[t], g, online, fixed, one_sided)
    return out


# ---------------------------------------------------------------- memorization

def memorization(correct: np.ndarray,
                 keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feldman-Zhang score [N]: accuracy over IN models minus over OUT models (all models,
    not leave-one-out), with the IN and OUT model counts; nan where a count is 0."""
    n_in, n_out = keep.sum(0), (~keep).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc_in = (correct & keep).sum(0) / n_in
        acc_out = (correct & ~keep).sum(0) / n_out
    return acc_in - acc_out, n_in, n_out


def run_attacks(sig: Signals, one_sided: bool, gamma: float, a: float, population: int,
                seed: int) -> dict[str, np.ndarray]:
    """Every attack's leave-one-out scores {name: [m, N]} for one arm."""
    scores = loo_lira(sig.phi, sig.keep, one_sided)
    scores.update(loo_rmia(sig.logp, sig.keep, sig.model_ids, gamma, a, population, seed))
    return scores
