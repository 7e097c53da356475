"""Summaries of per-sample gradient norms per sample kind: medians, p90, ratios to clean,
AUROC of corrupted vs clean, and a log-spaced histogram (numpy only; the grads stage writes
them, the report reads them)."""
from __future__ import annotations

import numpy as np

from bnmem.core.kinds import CLEAN, RARE
from bnmem.core.kinds import KINDS as KIND_CODES

KINDS = tuple(KIND_CODES.items())


def summarize(norms: np.ndarray, kind: np.ndarray, suffix: str = "") -> dict[str, float | None]:
    """Median / p90 per kind, median ratios to clean and AUROC(corrupted vs clean).

    Keys: median_norm_<kind>, p90_norm_<kind>, ratio_flipped_clean, ratio_ood_clean,
    auroc_corrupted_vs_clean, each + `suffix`; None where a kind (or clean) is absent.
    """
    out: dict[str, float | None] = {}
    med = {}
    for name, code in KINDS:
        v = norms[kind == code]
        med[name] = float(np.median(v)) if len(v) else None
        out[f"median_norm_{name}{suffix}"] = med[name]
        out[f"p90_norm_{name}{suffix}"] = float(np.quantile(v, 0.9)) if len(v) else None
    for name in RARE:
        ok = med[name] is not None and med["clean"] not in (None, 0.0)
        out[f"ratio_{name}_clean{suffix}"] = med[name] / med["clean"] if ok else None
    corrupted = kind != CLEAN
    out[f"auroc_corrupted_vs_clean{suffix}"] = (
        auroc(corrupted, norms) if 0 < corrupted.sum() < len(kind) else None)
    return out


def auroc(positive: np.ndarray, scores: np.ndarray) -> float:
    """AUROC of `scores` for labels `positive` (bool, both classes present), exactly: the
    Mann-Whitney count of (positive, negative) pairs ranked correctly, ties counting one
    half, in integers (twice the mid-ranks), divided once, so the result is the correctly
    rounded AUC whatever the order of the samples (sklearn's trapezoid over float rates,
    used before, differs from it by at most a few units in the last place)."""
    positive = np.asarray(positive, dtype=bool)
    scores = np.asarray(scores, dtype=np.float64)
    if np.isnan(scores).any():
        raise ValueError("norms: NaN gradient norms have no AUROC (non-finite weights or inputs)")
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    order = np.argsort(scores, kind="stable")
    s = scores[order]
    # tie groups [start, end) in ascending order; twice a group's mid-rank (1-based) is
    # start + end + 1, an integer
    cut = np.flatnonzero(s[1:] != s[:-1]) + 1
    starts, ends = np.r_[0, cut], np.r_[cut, s.size]
    twice = np.repeat(starts + ends + 1, ends - starts).astype(np.int64)
    u2 = int(twice[positive[order]].sum()) - n_pos * (n_pos + 1)  # 2 x Mann-Whitney U
    return u2 / (2 * n_pos * n_neg)


def histogram(norms: np.ndarray, kind: np.ndarray, bins: int = 40) -> dict[str, np.ndarray]:
    """Log-spaced histogram per kind on bins shared across kinds (columns for a CSV).

    Bins span [min positive norm, max norm]; exact zeros (saturated softmax) fall in the
    first bin. density = count / (n_kind * log10(bin_right / bin_left)), a density over
    log10(norm), so kinds of different sizes compare on one axis. Absent kinds give no rows.
    """
    pos = norms[norms > 0]
    lo = float(pos.min()) if len(pos) else 1e-12
    hi = max(float(norms.max()) if len(norms) else lo, lo) * (1 + 1e-9)
    edges = np.geomspace(lo, hi if hi > lo * (1 + 1e-6) else lo * 10, bins + 1)
    widths = np.log10(edges[1:] / edges[:-1])
    cols: dict[str, list] = {"kind": [], "bin_left": [], "bin_right": [], "count": [],
                             "density": []}
    for name, code in KINDS:
        v = np.clip(norms[kind == code], edges[0], edges[-1])
        if not len(v):
            continue
        count, _ = np.histogram(v, edges)
        cols["kind"] += [name] * bins
        cols["bin_left"] += list(edges[:-1])
        cols["bin_right"] += list(edges[1:])
        cols["count"] += list(count)
        cols["density"] += list(count / (len(v) * widths))
    return {k: np.asarray(v) for k, v in cols.items()}
