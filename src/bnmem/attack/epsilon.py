"""Empirical ε: a lower bound on the ε of (ε, δ)-differential privacy that an attack's
scores prove, with Clopper–Pearson confidence (Jagielski, Ullman, Oprea 2020; Nasr et al.
2021).

Any (ε, δ)-DP training satisfies, for every membership test and both neighbouring
datasets (Kairouz, Oh, Viswanath 2015),

    TPR <= e^ε FPR + δ,   TNR <= e^ε FNR + δ,   FNR <= e^ε TNR + δ,   FPR <= e^ε TPR + δ,

so a test "member if score >= t" with a high TPR at a low FPR proves
ε >= log((TPR - δ) / FPR), and so on for the other three (the last two are the test
"member if score < t": members scored *low*). TPR and FPR are bounded by Clopper–Pearson
intervals, and the bound is the largest over thresholds and the four ratios. Because the
threshold is picked after seeing the data, the confidence is made simultaneous: the
thresholds are a fixed grid of label-free quantiles of the pooled scores
(`threshold_grid`), and each of the 4 m one-sided rate bounds (TPR and FPR, above and
below, at m thresholds) is taken at α / (4 m) (Bonferroni), so the whole maximum is a 95 %
lower bound. bnmem.attack.simulate's randomized-response and Laplace mechanisms, whose ε
is known, test it (tests/test_epsilon.py).

The trials are (model, sample) pairs of the leave-one-out attack; Clopper–Pearson treats
them as independent, which pairs that share a sample or a model are not exactly: the
bound is an audit figure, not a proof.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import beta

CONFIDENCE = 0.95
GRID_LEVELS = 32  # quantile levels per tail of the threshold grid
RATIOS = ("tpr/fpr", "tnr/fnr", "fnr/tnr", "fpr/tpr")  # the four inequalities


def clopper_pearson(k: np.ndarray, n: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper–Pearson bounds at level 1 - alpha each: (lo, hi) with
    P(p < lo) <= alpha and P(p > hi) <= alpha for k successes out of n."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, beta.ppf(alpha, k, n - k + 1), 0.0)
        hi = np.where(k < n, beta.ppf(1 - alpha, k + 1, n - k), 1.0)
    return lo, hi


def threshold_grid(pooled: np.ndarray, levels: int = GRID_LEVELS) -> np.ndarray:
    """Distinct thresholds from label-free quantiles of all scores: `levels` log-spaced
    tail probabilities from 1 / n to 1/2 in each tail (the low-FPR tests live in the
    upper tail, the low-FNR ones in the lower)."""
    pooled = np.sort(pooled)
    n = pooled.size
    tail = np.geomspace(1.0 / n, 0.5, levels)
    probs = np.concatenate([tail, 1 - tail])
    idx = np.clip(np.ceil(probs * n).astype(np.int64) - 1, 0, n - 1)
    # "score >= t" for t a pooled value: every grid point is a reachable operating point
    return np.unique(pooled[idx])


def epsilon_lower_bound(scores: np.ndarray, members: np.ndarray, delta: float,
                        confidence: float = CONFIDENCE, levels: int = GRID_LEVELS,
                        simultaneous: bool = True) -> dict:
    """The ε these scores prove at `delta`, with `confidence` over the whole maximum.

    Args:
        scores: attack scores, higher = more likely a member; nan = not scored (left out).
        members: bool, same shape: the trial's truth.
        delta: the δ of the (ε, δ) claim being audited.
        simultaneous: Bonferroni over the 4 m rate bounds (the valid maximum); False takes
            each at the plain 1 - confidence (tests show it overshoots).
    Returns:
        {epsilon_lo (>= 0, the bound), epsilon_point (the same maximum without confidence),
        threshold and ratio (which inequality: tpr/fpr, tnr/fnr, fnr/tnr, fpr/tpr), tpr
        and fpr of "score >= threshold", members,
        nonmembers, thresholds (m), delta, confidence}; epsilon_lo is 0 when no test proves
        anything (and None without members or non-members).
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    lab = np.asarray(members, dtype=bool).ravel()
    ok = ~np.isnan(s)
    s, lab = s[ok], lab[ok]
    n_in, n_out = int(lab.sum()), int((~lab).sum())
    out = {"members": n_in, "nonmembers": n_out, "delta": float(delta),
           "confidence": float(confidence)}
    if n_in == 0 or n_out == 0:
        return {**out, "epsilon_lo": None, "epsilon_point": None, "threshold": None,
                "ratio": None, "tpr": None, "fpr": None, "thresholds": 0}
    t = threshold_grid(s, levels)
    m = t.size
    alpha = (1 - confidence) / (4 * m if simultaneous else 1)
    # counts at or above each threshold
    tp = n_in - np.searchsorted(np.sort(s[lab]), t, side="left")
    fp = n_out - np.searchsorted(np.sort(s[~lab]), t, side="left")
    tpr_lo, tpr_hi = clopper_pearson(tp, n_in, alpha)
    fpr_lo, fpr_hi = clopper_pearson(fp, n_out, alpha)
    tpr, fpr = tp / n_in, fp / n_out
    tnr_lo, tnr_hi, fnr_lo, fnr_hi = 1 - fpr_hi, 1 - fpr_lo, 1 - tpr_hi, 1 - tpr_lo
    bound = np.stack([_log_ratio(tpr_lo - delta, fpr_hi), _log_ratio(tnr_lo - delta, fnr_hi),
                      _log_ratio(fnr_lo - delta, tnr_hi), _log_ratio(fpr_lo - delta, tpr_hi)])
    tnr, fnr = 1 - fpr, 1 - tpr
    point = np.stack([_log_ratio(tpr - delta, fpr), _log_ratio(tnr - delta, fnr),
                      _log_ratio(fnr - delta, tnr), _log_ratio(fpr - delta, tpr)])
    d, j = np.unravel_index(np.argmax(bound), bound.shape)
    best = float(bound[d, j])
    return {**out, "epsilon_lo": max(best, 0.0),
            "epsilon_point": max(float(np.max(point)), 0.0),
            "threshold": float(t[j]), "ratio": RATIOS[d],
            "tpr": float(tpr[j]), "fpr": float(fpr[j]), "thresholds": int(m)}


def _log_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """log(num / den); -inf where num <= 0 or den == 0 (a threshold with no false
    positives proves nothing finite without a confidence bound: the bounds' den is a
    Clopper–Pearson upper bound, > 0)."""
    num, den = np.asarray(num, dtype=np.float64), np.asarray(den, dtype=np.float64)
    ok = (num > 0) & (den > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.log(np.where(ok, num, 1.0) / np.where(ok, den, 1.0))
    return np.where(ok, r, -np.inf)


def arm_epsilon(scores: np.ndarray, keep: np.ndarray, subsets: dict[str, np.ndarray],
                delta: float) -> dict[str, dict]:
    """Empirical ε of one arm's attack scores [m, N] (keep [m, N]) on every subset of
    samples (`subsets`: name -> bool [N] over the pool)."""
    return {name: epsilon_lower_bound(scores[:, rows], keep[:, rows], delta)
            for name, rows in subsets.items()}
