"""Empirical ε: a lower bound on the ε of (ε, δ)-differential privacy that an attack's
scores give, with Clopper–Pearson confidence (Jagielski, Ullman, Oprea 2020; Nasr et al.
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
them as independent, which pairs that share a sample or a model are not: the bound is an
audit figure, not a proof, and `samples` says how many distinct samples the decisive count
rests on. The in/out hypotheses of that attack are datasets of equal size that differ by
one *substituted* sample (every shadow trains on exactly half the pool), so the ε it
audits is the replace-one ε, not the add/remove ε an accountant usually reports
(bnmem.train.dp.substitution_epsilon).
"""
from __future__ import annotations

import numpy as np

CONFIDENCE = 0.95
GRID_LEVELS = 32  # quantile levels per tail of the threshold grid
RATIOS = ("tpr/fpr", "tnr/fnr", "fnr/tnr", "fpr/tpr")  # the four inequalities


def clopper_pearson(k: np.ndarray, n: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """One-sided Clopper–Pearson bounds at level 1 - alpha each: (lo, hi) with
    P(p < lo) <= alpha and P(p > hi) <= alpha for k successes out of n."""
    k, n = np.asarray(k, dtype=np.float64), np.asarray(n, dtype=np.float64)
    # the beta quantile: betaincinv is what scipy.stats.beta.ppf computes (bit for bit,
    # tests/test_epsilon.py), without scipy.stats' ~1 s import
    from scipy.special import betaincinv

    with np.errstate(invalid="ignore"):
        lo = np.where(k > 0, betaincinv(k, n - k + 1, alpha), 0.0)
        hi = np.where(k < n, betaincinv(k + 1, n - k, 1 - alpha), 1.0)
    return lo, hi


def threshold_grid(pooled: np.ndarray, levels: int = GRID_LEVELS) -> np.ndarray:
    """Distinct thresholds from label-free quantiles of all scores: `levels` log-spaced
    tail probabilities p from 1 / n to 1/2 in each tail; in the upper tail the threshold
    t with a share p of the scores at or above it (p = 1 / n: the largest score), in the
    lower tail the one with a share p below it (the low-FNR tests). Label-free, but chosen
    from the data: Clopper–Pearson at such a threshold is approximate."""
    pooled = np.sort(pooled)
    n = pooled.size
    k = np.ceil(np.geomspace(1.0 / n, 0.5, levels) * n).astype(np.int64)
    idx = np.clip(np.concatenate([n - k, k]), 0, n - 1)
    return np.unique(pooled[idx])


def epsilon_ceiling(n_in: int, n_out: int, delta: float, thresholds: int,
                    confidence: float = CONFIDENCE) -> float:
    """The most any attack can show with these trial counts: the bound of a perfect test
    (TPR 1 at FPR 0) at the same simultaneous confidence. An audit whose ceiling is below
    the ε under test cannot fail."""
    alpha = (1 - confidence) / (4 * max(thresholds, 1))
    tpr_lo, _ = clopper_pearson(n_in, n_in, alpha)
    _, fpr_hi = clopper_pearson(0, n_out, alpha)
    tnr_lo, _ = clopper_pearson(n_out, n_out, alpha)
    _, fnr_hi = clopper_pearson(0, n_in, alpha)
    best = max(_log_ratio(tpr_lo - delta, fpr_hi), _log_ratio(tnr_lo - delta, fnr_hi))
    return max(float(best), 0.0)


def epsilon_lower_bound(scores: np.ndarray, members: np.ndarray, delta: float,
                        confidence: float = CONFIDENCE, levels: int = GRID_LEVELS,
                        simultaneous: bool = True, groups: np.ndarray | None = None) -> dict:
    """The ε these scores prove at `delta`, with `confidence` over the whole maximum.

    Args:
        scores: attack scores, higher = more likely a member; nan = not scored (left out).
        members: bool, same shape: the trial's truth.
        delta: the δ of the (ε, δ) claim being audited.
        simultaneous: Bonferroni over the 4 m rate bounds (the valid maximum); False takes
            each at the plain 1 - confidence (tests show it overshoots).
        groups: the sample each trial belongs to (same shape); with it the result counts
            the distinct samples behind the decisive test's numerator (`samples`): trials
            of one sample in several models are not independent, so a bound resting on
            few samples is weaker than its trial count says.
    Returns:
        {epsilon_lo (>= 0, the bound), epsilon_point (the same maximum without confidence),
        threshold and ratio (which inequality: tpr/fpr, tnr/fnr, fnr/tnr, fpr/tpr; None
        when nothing is proven), tpr and fpr of "score >= threshold", ceiling (the most
        these counts could show: epsilon_ceiling), samples (with `groups`), members,
        nonmembers, thresholds (m), delta, confidence}; epsilon_lo is 0 when no test proves
        anything (and None without members or non-members).
    """
    s = np.asarray(scores, dtype=np.float64).ravel()
    lab = np.asarray(members, dtype=bool).ravel()
    ok = ~np.isnan(s)
    s, lab = s[ok], lab[ok]
    grp = None if groups is None else np.asarray(groups).ravel()[ok]
    n_in, n_out = int(lab.sum()), int((~lab).sum())
    out = {"members": n_in, "nonmembers": n_out, "delta": float(delta),
           "confidence": float(confidence)}
    if n_in == 0 or n_out == 0:
        return {**out, "epsilon_lo": None, "epsilon_point": None, "threshold": None,
                "ratio": None, "tpr": None, "fpr": None, "thresholds": 0, "ceiling": None,
                "samples": None}
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
    proven = best > 0
    samples = None
    if grp is not None and proven:  # the decisive numerator's trials: which samples
        above = s >= t[j]
        side = {0: above & lab, 1: ~above & ~lab, 2: ~above & lab, 3: above & ~lab}[int(d)]
        samples = int(np.unique(grp[side]).size)
    return {**out, "epsilon_lo": max(best, 0.0),
            "epsilon_point": max(float(np.max(point)), 0.0),
            "threshold": float(t[j]) if proven else None,
            "ratio": RATIOS[d] if proven else None,
            "tpr": float(tpr[j]) if proven else None, "fpr": float(fpr[j]) if proven else None,
            "thresholds": int(m), "ceiling": epsilon_ceiling(n_in, n_out, delta, m, confidence),
            "samples": samples}


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
    sample = np.broadcast_to(np.arange(keep.shape[1]), keep.shape)
    return {name: epsilon_lower_bound(scores[:, rows], keep[:, rows], delta,
                                      groups=sample[:, rows])
            for name, rows in subsets.items()}
