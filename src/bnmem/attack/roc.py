"""ROC metrics for membership inference, with sample-level bootstrap CIs.

An attack's output is a score per (target model, pool sample) pair; the label is whether
the sample was in the target's training set. All metrics are computed from the ROC points
at distinct score thresholds, with optional per-pair weights: a bootstrap resample of pool
samples is just a vector of multiplicities, so one sort serves every resample and all
target rows of a drawn sample travel together.
"""
from __future__ import annotations

import ctypes
import logging
from pathlib import Path

import numpy as np

from bnmem.core import ckernel
from bnmem.core.kinds import SUBSETS
from bnmem.attack.intervals import percentile_ci

log = logging.getLogger(__name__)
KERNEL = Path(__file__).with_name("roc_boot.c")  # the resamples' one-pass C loop
_LIB: list = []  # [the loaded kernel or None], filled on first use

FPR_LEVELS = {"1e-4": 1e-4, "1e-3": 1e-3, "1e-2": 1e-2}  # key suffix -> FPR bound (strict)
MIN_FALSE_POSITIVES = 10  # TPR at FPR f is reported only when negatives x f >= this
CI_KEYS = ("auc", "tpr_at_fpr_1e-3")  # metrics that get bootstrap CIs
ROC_GRID = np.logspace(-4, 0, 100)  # FPR values of the stored ROC curves
_MAX_CELLS = 2 ** 20  # resamples x pairs per bootstrap batch (~8 float64 temporaries: ~64 MB)


def roc_points(scores: np.ndarray, labels: np.ndarray, weights: np.ndarray | None = None,
               groups: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """ROC points (fpr, tpr), one per distinct threshold plus (0, 0); labels True = member.

    `weights` [B, G] gives B weighted curves at once (shape [B, n_thresholds + 1]); pair i
    gets weight weights[:, groups[i]] (groups defaults to one group per pair). Without
    weights the result is one unweighted curve (1-D). Ties share one point, so the
    trapezoid AUC counts a tied pair as one half. A nan score is a pair the attack does
    not score (RMIA's reference population): it is left out.
    """
    scores = np.asarray(scores, dtype=np.float64).ravel()
    labels = np.asarray(labels, dtype=bool).ravel()
    order, ends = ranked(scores)
    lab = labels[order]
    if weights is None:
        w = lab[None].astype(np.float64)
        total = np.arange(1, order.size + 1, dtype=np.float64)[None]
        fpr, tpr = _curve(w, total, ends)
        return fpr[0], tpr[0]
    groups = None if groups is None else np.asarray(groups).ravel()
    w = np.asarray(weights, dtype=np.float64)[:, order if groups is None else groups[order]]
    return ranked_curves(w, lab, ends)


def ranked_curves(w: np.ndarray, lab: np.ndarray, ends: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """`roc_points`' weighted curves [B, k] from weights already in `ranked` order:
    w [B, n] (overwritten), lab [n] the labels in that order, ends its tie-group ends.
    A caller that keeps one ranking for many weight vectors (`bnmem.attack.resample`)
    gets exactly roc_points' numbers without sorting again."""
    total = np.cumsum(w, axis=1)
    w *= lab  # in place: keeps the batch at two [B, n] arrays
    return _curve(w, total, ends)


def _curve(w: np.ndarray, total: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fpr, tpr) [B, k + 1] from the ranked member weights w and the cumulative weights."""
    tp = np.cumsum(w, axis=1, out=w)[:, ends]
    fp = total[:, ends] - tp
    with np.errstate(invalid="ignore", divide="ignore"):  # no positives/negatives -> nan
        tpr = tp / tp[:, -1:]
        fpr = fp / fp[:, -1:]
    zero = np.zeros((w.shape[0], 1))
    return np.hstack([zero, fpr]), np.hstack([zero, tpr])


def ranked(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, ends): the scored pairs (nan left out) by descending score, and the last
    position of each tie group in that order. Not a stable sort: every use takes whole
    tie groups."""
    order = np.argsort(-flat)
    order = order[~np.isnan(flat[order])]
    s = flat[order]
    return order, np.r_[np.flatnonzero(s[1:] != s[:-1]), s.size - 1]


def tpr_supported(n_negatives: int, fpr: float) -> bool:
    """TPR at FPR f can mean something only when f x negatives allows MIN_FALSE_POSITIVES
    false positives; below that it is TPR at (near) zero false positives. A necessary
    condition: `operating_support` then asks how many distinct samples those are."""
    return n_negatives * fpr >= MIN_FALSE_POSITIVES


def operating_support(scores: np.ndarray, labels: np.ndarray,
                      levels: dict[str, float] | None = None) -> dict[str, dict]:
    """Who supports TPR at FPR < f: at the ROC point `roc_summary` reads (the highest TPR
    with FPR strictly below f; of the points with that TPR, the last below f), the false
    and true positives it counts, as (model, sample) pairs and as distinct samples and
    models.

    scores, labels [m, N] (rows models, columns samples). The rate is `supported` when
    its false positives come from >= MIN_FALSE_POSITIVES distinct samples: a sample that
    scores high in every model it is OUT of is one piece of evidence, not eight, so pairs
    overstate how well the FPR is pinned down.
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=bool)
    lab = labels.ravel()
    order, ends = ranked(scores.ravel())  # unscored pairs (nan) are left out
    lab_s = lab[order]
    tp, fp = np.cumsum(lab_s)[ends], np.cumsum(~lab_s)[ends]
    n_neg_scored = int((~lab_s).sum())
    n_pos, n_neg = max(int(lab_s.sum()), 1), max(n_neg_scored, 1)
    tpr, fpr = np.r_[0.0, tp / n_pos], np.r_[0.0, fp / n_neg]
    out = {}
    for key, level in (FPR_LEVELS if levels is None else levels).items():
        ok = np.flatnonzero(fpr < level)
        # the highest TPR, at the last point below f on that plateau: the false positives
        # the rate f affords (a separable attack reaches TPR 1 at 0 FP, but its FPR f is
        # pinned down by the negatives it passes before f)
        best = tpr[ok].max()
        j = int(ok[tpr[ok] == best][-1])
        taken = order[:ends[j - 1] + 1] if j > 0 else order[:0]
        rows, cols = np.unravel_index(taken, scores.shape)
        pos = lab[taken]
        row = {"tpr": float(tpr[j]), "fpr": float(fpr[j]),
               "fp_pairs": int((~pos).sum()), "fp_samples": int(np.unique(cols[~pos]).size),
               "fp_models": int(np.unique(rows[~pos]).size),
               "tp_pairs": int(pos.sum()), "tp_samples": int(np.unique(cols[pos]).size)}
        row["supported"] = bool(tpr_supported(n_neg_scored, level)
                                and row["fp_samples"] >= MIN_FALSE_POSITIVES)
        out[key] = row
    return out


def roc_summary(fpr: np.ndarray, tpr: np.ndarray,
                levels: dict[str, float] | None = None) -> dict[str, np.ndarray]:
    """AUC, best balanced accuracy, TPR at FPR strictly below each level (default
    FPR_LEVELS) and TPR at zero false positives.

    Works on one curve (scalars out) or a batch [B, k] (arrays of B out).
    """
    auc = np.sum(np.diff(fpr, axis=-1) * (tpr[..., 1:] + tpr[..., :-1]) / 2, axis=-1)
    out = {"auc": auc, "balanced_acc": np.max((tpr + 1 - fpr) / 2, axis=-1)}
    undefined = np.isnan(auc)  # a curve without members or non-members
    out["tpr_at_zero_fp"] = np.where(undefined, np.nan, np.max(np.where(fpr <= 0, tpr, 0.0), axis=-1))
    for key, level in (FPR_LEVELS if levels is None else levels).items():
        # (0, 0) is always a point, so the max over points with FPR < level is defined
        best = np.max(np.where(fpr < level, tpr, 0.0), axis=-1)
        out[f"tpr_at_fpr_{key}"] = np.where(undefined, np.nan, best)
    return out


def roc_grid(fpr: np.ndarray, tpr: np.ndarray, grid: np.ndarray = ROC_GRID) -> np.ndarray:
    """TPR at the FPR values `grid`, linear between ROC points (at a vertical step: its top).

    np.interp picks the last of equal x values below and the first above, which is exactly
    the ROC curve's segment between two thresholds.
    """
    return np.interp(grid, fpr, tpr)


def bootstrap_weights(kind: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """[n_boot, N] multiplicities of a bootstrap over pool samples, stratified by `kind`.

    Stratifying keeps every subset's size fixed across resamples (the OOD subset is small)
    and makes `all` the union of the subset resamples.
    """
    kind = np.asarray(kind)
    w = np.zeros((n_boot, kind.size), dtype=np.float64)
    rows = np.arange(n_boot)[:, None]
    for k in np.unique(kind):
        idx = np.flatnonzero(kind == k)
        draw = idx[rng.integers(0, idx.size, size=(n_boot, idx.size))]
        np.add.at(w, (rows, draw), 1.0)
    return w


def evaluate(scores: np.ndarray, keep: np.ndarray, kind: np.ndarray,
             boot: np.ndarray | None = None,
             subsets: tuple[str, ...] = tuple(SUBSETS)) -> tuple[dict, dict, dict]:
    """Metrics of one attack's [m, N] scores, per subset of pool samples.

    Args:
        scores: [m, N] attack score, higher = more likely a member.
        keep: [m, N] membership labels.
        kind: [N] pool sample kind (0 clean, 1 flipped, 2 OOD).
        boot: optional [B, N] bootstrap multiplicities (see `bootstrap_weights`).
        subsets: which of SUBSETS to evaluate (default all of them).
    Returns:
        metrics {subset: {metric: float | None, plus `<ci key>_lo/_hi`}},
        resamples {subset: {ci key: [B] array}} (for paired differences),
        curves {subset: [len(ROC_GRID)] TPR at ROC_GRID}.
    A subset with no samples, or without members or non-members, gets None everywhere.
    """
    metrics, resamples, curves = {}, {}, {}
    for name in subsets:
        code = SUBSETS[name]
        cols = np.arange(kind.size) if code is None else np.flatnonzero(kind == code)
        lab = keep[:, cols]
        if cols.size == 0 or lab.all() or not lab.any():
            metrics[name] = {k: None for k in _metric_keys(boot is not None)}
            continue
        s = scores[:, cols]
        fpr, tpr = roc_points(s, lab)
        scored = ~np.isnan(s)
        n_neg = int((~lab & scored).sum())
        metrics[name] = {k: float(v) for k, v in roc_summary(fpr, tpr).items()}
        metrics[name]["n_negatives"] = n_neg
        metrics[name]["n_negative_samples"] = int((~lab & scored).any(axis=0).sum())
        support = operating_support(s, lab)
        for key in FPR_LEVELS:  # unsupported: null, not TPR at (near) 0 FP
            metrics[name][f"support_{key}"] = support[key]
            if not support[key]["supported"]:
                metrics[name][f"tpr_at_fpr_{key}"] = None
        curves[name] = roc_grid(fpr, tpr)
        if boot is None:
            continue
        resamples[name] = _bootstrap(s, lab, boot[:, cols])
        metrics[name]["interval"] = "samples"  # what the _lo/_hi bounds resample
        for key in CI_KEYS:
            lo, hi = percentile_ci(resamples[name][key])
            if metrics[name].get(key) is None:
                lo = hi = None
            metrics[name][f"{key}_lo"], metrics[name][f"{key}_hi"] = lo, hi
    return metrics, resamples, curves


def paired_deltas(metrics: dict, resamples: dict, base: str = "none") -> dict:
    """arm - base differences with 95 % CIs from the same bootstrap resamples.

    Args:
        metrics: {arm: {attack: {subset: {...}}}} as built from `evaluate`.
        resamples: {arm: {attack: {subset: {key: [B]}}}}; all arms drawn with one `boot`.
    Returns {arm: {attack: {subset: {key, key_lo, key_hi}}}} for every arm but `base`
    (empty when `base` is absent); None where either side is undefined.
    """
    if base not in metrics:
        return {}
    out: dict = {}
    for arm in metrics:
        if arm == base:
            continue
        for attack, subsets in metrics[arm].items():
            for subset, m in subsets.items():
                if subset not in SUBSETS:  # e.g. the real null's row
                    continue
                b = metrics[base][attack][subset]
                ra = resamples[arm][attack].get(subset)
                rb = resamples[base][attack].get(subset)
                row = {}
                for key in CI_KEYS:
                    ok = None not in (m[key], b[key], ra, rb)
                    lo, hi = percentile_ci(ra[key] - rb[key]) if ok else (None, None)
                    row[key] = m[key] - b[key] if ok else None
                    row[f"{key}_lo"], row[f"{key}_hi"] = lo, hi
                out.setdefault(arm, {}).setdefault(attack, {})[subset] = row
    return out


def _metric_keys(with_ci: bool) -> list[str]:
    keys = (["auc", "balanced_acc", "tpr_at_zero_fp", "n_negatives", "n_negative_samples"]
            + [f"tpr_at_fpr_{k}" for k in FPR_LEVELS] + [f"support_{k}" for k in FPR_LEVELS])
    return keys + ([f"{k}_{s}" for k in CI_KEYS for s in ("lo", "hi")] if with_ci else [])


def _bootstrap(scores: np.ndarray, labels: np.ndarray, w: np.ndarray) -> dict[str, np.ndarray]:
    """CI metrics of each resample; `w` [B, n_cols] are per-sample multiplicities (integers).

    One sort, then one pass over the sorted pairs per resample in C (roc_boot.c: ~1 ns per
    pair; the full-scale protocol's 3.8 M pairs x 200 resamples in seconds); where the
    kernel cannot run, `_bootstrap_numpy` (the reference, ~30x slower) gives the same
    values (tests/test_roc.py).
    """
    lib = _kernel()
    if lib is None or scores.size >= 2 ** 31 or w.size >= 2 ** 31:
        return _bootstrap_numpy(scores, labels, w)
    order, ends = ranked(np.asarray(scores, dtype=np.float64).ravel())  # nan left out
    last = np.zeros(order.size, np.uint8)
    last[ends] = 1  # a tie group ends here
    groups = np.broadcast_to(np.arange(scores.shape[1], dtype=np.int32), scores.shape).ravel()
    g = np.ascontiguousarray(groups[order])
    lab = np.ascontiguousarray(np.asarray(labels, bool).ravel()[order].astype(np.uint8))
    scored = ~np.isnan(np.asarray(scores, dtype=np.float64))
    pos = (np.asarray(labels, bool) & scored).sum(0).astype(np.float64)  # scored members per sample
    neg = (~np.asarray(labels, bool) & scored).sum(0).astype(np.float64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    keys = [k for k in CI_KEYS if k != "auc"]
    levels = np.array([FPR_LEVELS[k.removeprefix("tpr_at_fpr_")] for k in keys])
    auc, tpr = np.empty(w.shape[0]), np.empty((w.shape[0], levels.size))
    ptr = [a.ctypes.data for a in (g, lab, last, w, pos, neg, levels, auc, tpr)]
    lib.roc_boot(order.size, w.shape[1], w.shape[0], levels.size, *ptr)
    return {"auc": auc, **{k: tpr[:, i] for i, k in enumerate(keys)}}


def _kernel() -> ctypes.CDLL | None:
    """roc_boot.c compiled and loaded once per process; None without a C compiler or with
    BNMEM_NATIVE=0 (the numpy path runs then)."""
    if not _LIB:
        lib = None
        if ckernel.enabled():
            try:
                lib = ctypes.CDLL(str(ckernel.compile_library("roc_boot", KERNEL, [KERNEL])))
                lib.roc_boot.restype = ctypes.c_int
                lib.roc_boot.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p] * 9
            except (OSError, RuntimeError) as exc:
                log.warning("ROC bootstrap kernel unavailable (%s): using numpy", str(exc)[:200])
        _LIB.append(lib)
    return _LIB[0]


def _bootstrap_numpy(scores: np.ndarray, labels: np.ndarray,
                     w: np.ndarray) -> dict[str, np.ndarray]:
    """The reference: every resample's weighted ROC curve, then its summaries."""
    groups = np.broadcast_to(np.arange(scores.shape[1]), scores.shape).ravel()  # pair -> sample
    step = max(1, _MAX_CELLS // scores.size)
    parts = []
    for b0 in range(0, w.shape[0], step):
        summ = roc_summary(*roc_points(scores, labels, w[b0:b0 + step], groups))
        parts.append({k: summ[k] for k in CI_KEYS})
    return {k: np.concatenate([p[k] for p in parts]) for k in CI_KEYS}
