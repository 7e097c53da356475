"""Gradient claims over shadow models (bnmem.attack.grad_claims) where the truth is known."""
import numpy as np
import pytest

from bnmem.attack.grad_claims import compare, heldout, ratios


def synthetic(rng, g, n, kind, flip_factor, util):
    """Norms [g, E, N]: clean ~ lognormal, flipped scaled by flip_factor; held-out per endpoint."""
    e = len(util)
    norms = rng.lognormal(0.0, 0.3, (g, e, n))
    norms[:, :, kind == 1] *= flip_factor
    return norms, np.tile(np.asarray(util, float), (g, 1))


def test_ratio_of_ratios_recovers_a_known_factor_and_its_null():
    rng = np.random.default_rng(0)
    n, g = 4000, 6
    kind = np.zeros(n, np.int8)
    kind[:400] = 1
    keep = rng.random((g, n)) < 0.5
    bn, u_bn = synthetic(rng, g, n, kind, 6.0, [0.70, 0.78, 0.80])
    none, u_none = synthetic(rng, g, n, kind, 3.0, [0.60, 0.70, 0.76])
    rb, rn = ratios(bn, keep, kind, 1), ratios(none, keep, kind, 1)
    assert rb.shape == (g, 3) and np.allclose(rb, 6.0, rtol=0.1)
    out = compare(rb, u_bn, rn, u_none)
    for point in ("equal_epochs", "matched_heldout"):
        est = out[point]
        assert est["value"] == pytest.approx(2.0, rel=0.05) and est["lo"] < 2.0 < est["hi"]
        assert est["lo"] > 1.5 and est["models"] == g
    m = out["matched_heldout"]
    assert m["level"] == pytest.approx(0.76) and m["positions"] == [pytest.approx(0.75), 2.0]
    # the null: both arms scale flipped norms alike -> the interval covers 1
    same, _ = synthetic(rng, g, n, kind, 6.0, [0.70, 0.78, 0.80])
    out = compare(rb, u_bn, ratios(same, keep, kind, 1), u_bn)
    assert out["equal_epochs"]["lo"] < 1.0 < out["equal_epochs"]["hi"]


def test_matched_heldout_interpolates_each_model_in_budget_order():
    # arm a's ratio grows with its utility; b reaches only 0.7: a is read at 0.7
    ra = np.array([[1.0, 2.0, 4.0], [1.0, 2.0, 4.0]])
    ua = np.array([[0.6, 0.8, 0.9], [0.6, 0.8, 0.9]])
    rb = np.array([[1.0, 1.5, 2.0], [1.0, 1.5, 2.0]])
    ub = np.array([[0.5, 0.6, 0.7], [0.5, 0.6, 0.7]])
    out = compare(ra, ua, rb, ub)
    # a reaches 0.7 half-way from its first to its second endpoint: log-linear, sqrt(2);
    # b at its last endpoint: 2
    expect = np.exp(0.5 * np.log(2.0)) / 2.0
    assert out["matched_heldout"]["value"] == pytest.approx(expect)
    assert out["equal_epochs"]["value"] == pytest.approx(2.0)
    assert out["matched_heldout"]["lo"] == pytest.approx(expect)  # no spread between models


def test_heldout_counts_out_clean_samples_only():
    keep = np.array([[True, False, False, False]])
    kind = np.array([0, 0, 0, 1])
    correct = [np.array([[False, True, False, True]])]
    np.testing.assert_allclose(heldout(correct, keep, kind), [[0.5]])


def test_gradient_models_are_one_per_complementary_pair():
    from bnmem.core.keep import keep_matrix
    from bnmem.train.shadow import grad_model
    chosen = [j for j in range(16) if grad_model(j, 4)]
    assert chosen == [0, 2, 4, 6]
    keep = keep_matrix(16, 1000, 0)
    # no two chosen models are complements of each other (disjoint IN halves)
    for a in chosen:
        for b in chosen:
            if a != b:
                assert (keep[a] & keep[b]).any()


def test_geometric_interval_uses_students_t_bit_for_bit():
    """_geo's t quantile (scipy.special.stdtrit, no scipy.stats import) is t.ppf exactly,
    and the interval is exp(mean +- t * se) of the logs."""
    from scipy.stats import t
    from scipy.special import stdtrit
    from bnmem.attack.grad_claims import _geo
    for df in range(1, 400):
        assert stdtrit(df, 0.975) == t.ppf(0.975, df)
    logs = np.log([1.5, 2.0, 1.8, 2.4])
    m, se = logs.mean(), logs.std(ddof=1) / 2
    out = _geo(logs)
    assert out["lo"] == float(np.exp(m - t.ppf(0.975, 3) * se))
    assert out["hi"] == float(np.exp(m + t.ppf(0.975, 3) * se))
    # its df reaches the claim's p-value: read on the log scale with t(3), not as normal
    from bnmem.report.verdict import Evidence, p_values
    e = Evidence.of(out, training=True)
    assert e.df == 3
    z = (m - 0.0) / se  # log(1) = 0
    assert p_values(e, 1, 1.0, log=True)[0] == pytest.approx(t.sf(z, 3), rel=1e-9)
