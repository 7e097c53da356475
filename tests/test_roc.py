"""The ROC bootstrap's C pass (roc_boot.c) equals the numpy reference: AUC to float64
rounding (different summation order), TPR at the low FPR exactly (integer weights make
every running sum exact), nan where a resample has no members or no non-members."""
import shutil

import numpy as np
import pytest

from bnmem import roc
from bnmem.roc import _bootstrap, _bootstrap_numpy, bootstrap_weights


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
