"""The ROC bootstrap's C pass (roc_boot.c) equals the numpy reference: AUC to float64
rounding (different summation order), TPR at the low FPR exactly (integer weights make
every running sum exact), nan where a resample has no members or no non-members."""
import shutil

import numpy as np
import pytest

from bnmem.attack import roc
from bnmem.attack.roc import _bootstrap, _bootstrap_numpy, bootstrap_weights


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler: the numpy path runs")
def test_kernel_builds_where_a_compiler_exists():
    assert roc._kernel() is not None


@pytest.mark.parametrize("m,n,ties", [(8, 300, False), (16, 500, True), (2, 40, True)])
def test_kernel_equals_numpy_reference(m, n, ties):
    rng = np.random.default_rng(m + n)
    labels = rng.random((m, n)) < 0.5
    scores = rng.normal(size=(m, n)) + labels
    if ties:
        scores = np.round(scores, 1)  # many tied thresholds, within and across samples
    kind = rng.integers(0, 3, n)
    w = bootstrap_weights(kind, 64, rng)
    w[0] = 0.0
    w[0, :3] = 1.0  # a resample of three samples: may lack members or non-members
    w[1] = 0.0  # an empty resample: undefined
    got, ref = _bootstrap(scores, labels, w), _bootstrap_numpy(scores, labels, w)
    assert roc._kernel() is None or set(got) == set(ref)
    for key in ref:
        np.testing.assert_array_equal(np.isnan(got[key]), np.isnan(ref[key]))
    np.testing.assert_allclose(got["auc"], ref["auc"], rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(got["tpr_at_fpr_1e-3"], ref["tpr_at_fpr_1e-3"])
    assert np.isnan(got["auc"][1])


def test_kernel_off_falls_back(monkeypatch):
    """BNMEM_NATIVE=0 turns the kernel off, and the numpy path it falls back to gives what
    the default path (the kernel, where a compiler exists) gave."""
    rng = np.random.default_rng(0)
    labels = rng.random((4, 50)) < 0.5
    scores = rng.normal(size=(4, 50)) + labels
    w = bootstrap_weights(np.zeros(50, int), 8, rng)
    default = _bootstrap(scores, labels, w)
    monkeypatch.setenv("BNMEM_NATIVE", "0")
    monkeypatch.setattr(roc, "_LIB", [])
    assert roc._kernel() is None
    got = _bootstrap(scores, labels, w)
    np.testing.assert_allclose(got["auc"], default["auc"], rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(got["tpr_at_fpr_1e-3"], default["tpr_at_fpr_1e-3"])


def _brute_support(scores, labels, level):
    """Threshold by threshold from the top: the lowest threshold whose FPR stays below
    `level` and whose TPR is highest (fewest FPs among equal TPRs), then who is above it."""
    n_pos, n_neg = labels.sum(), (~labels).sum()
    best = (0.0, 0.0, np.zeros(scores.shape, bool))
    for t in np.unique(scores)[::-1]:
        above = scores >= t
        fpr, tpr = (above & ~labels).sum() / n_neg, (above & labels).sum() / n_pos
        if fpr < level and tpr >= best[0]:  # the last threshold of the best TPR below f
            best = (tpr, fpr, above)
    tpr, _, above = best
    fp, tp = above & ~labels, above & labels
    return {"tpr": tpr, "fp_pairs": int(fp.sum()), "fp_samples": int(fp.any(0).sum()),
            "fp_models": int(fp.any(1).sum()), "tp_pairs": int(tp.sum()),
            "tp_samples": int(tp.any(0).sum())}


@pytest.mark.parametrize("concentrated", [False, True])
def test_low_fpr_support_counts_distinct_samples(concentrated):
    """Support of TPR at FPR < 3e-3 (up to 36 false-positive pairs here): the false positives at the operating point as pairs,
    distinct samples and models, equal to a threshold-by-threshold count. When a few
    samples score high in every model they are OUT of, the pairs clear the >= 10 rule but
    the distinct samples do not: unsupported."""
    rng = np.random.default_rng(3)
    m, n = 16, 1500
    labels = np.argsort(rng.random((m, n)), axis=0) < m // 2
    scores = np.round(rng.normal(size=(m, n)) + 1.5 * labels, 2)
    if concentrated:
        scores[:, :4] = 9.0 + rng.random((m, 4))  # 4 samples top every model, IN or OUT
    got = roc.operating_support(scores, labels, {"3e-3": 3e-3})["3e-3"]
    ref = _brute_support(scores, labels, 3e-3)
    assert got["tpr"] == pytest.approx(ref["tpr"])
    for k in ("fp_pairs", "fp_samples", "fp_models", "tp_pairs", "tp_samples"):
        assert got[k] == ref[k], k
    assert got["fp_pairs"] >= roc.MIN_FALSE_POSITIVES  # the old pair rule would accept both
    assert got["supported"] is (not concentrated)
    if concentrated:
        assert got["fp_samples"] < roc.MIN_FALSE_POSITIVES


def test_a_separable_attack_is_supported():
    """AUC 1: TPR 1 at zero false positives, and the rate f is still pinned down by the
    negatives passed before f (the last point of the TPR plateau below f)."""
    rng = np.random.default_rng(4)
    m, n = 16, 2000
    labels = np.argsort(rng.random((m, n)), axis=0) < m // 2
    scores = rng.normal(size=(m, n)) + 20.0 * labels
    sup = roc.operating_support(scores, labels, {"1e-3": 1e-3})["1e-3"]
    assert sup["tpr"] == 1.0 and sup["supported"] and sup["fp_samples"] >= roc.MIN_FALSE_POSITIVES
    assert sup["fp_pairs"] == 15  # 16 000 negatives x 1e-3, strictly below: 15


def test_unscored_pairs_are_left_out():
    """nan scores (RMIA's reference population) are not scored: every ROC figure, the C
    bootstrap and its numpy reference equal those of the scored pairs alone."""
    rng = np.random.default_rng(7)
    m, n = 8, 300
    labels = rng.random((m, n)) < 0.5
    scores = np.round(rng.normal(size=(m, n)) + labels, 1)
    holes = scores.copy()
    holes[rng.random((m, n)) < 0.3] = np.nan
    keep = ~np.isnan(holes)
    fpr, tpr = roc.roc_points(holes, labels)
    ref = roc.roc_points(holes[keep], labels[keep])
    np.testing.assert_array_equal(fpr, ref[0])
    np.testing.assert_array_equal(tpr, ref[1])
    w = bootstrap_weights(rng.integers(0, 3, n), 32, rng)
    got, num = _bootstrap(holes, labels, w), _bootstrap_numpy(holes, labels, w)
    np.testing.assert_allclose(got["auc"], num["auc"], rtol=1e-12)
    np.testing.assert_array_equal(got["tpr_at_fpr_1e-3"], num["tpr_at_fpr_1e-3"])
    one = np.ones((1, n))
    assert _bootstrap(holes, labels, one)["auc"][0] == pytest.approx(
        float(roc.roc_summary(*ref)["auc"]), abs=1e-12)
    sup = roc.operating_support(holes, labels, {"1e-1": 0.1})["1e-1"]
    assert sup["fp_pairs"] <= int((~labels & keep).sum())
