"""Empirical ε (bnmem.attack.epsilon) where the truth is known: mechanisms with an exact ε
(randomized response, Laplace), a null (ε = 0), members scored low, and Clopper–Pearson
against scipy's exact binomial interval."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from bnmem.attack.epsilon import clopper_pearson, epsilon_lower_bound
from bnmem.attack.simulate import dp_mechanism

DELTA = 1e-5


def test_clopper_pearson_is_scipys_exact_interval():
    for k, n in [(0, 20), (3, 20), (20, 20), (117, 1000), (1, 5000)]:
        lo, hi = clopper_pearson(k, n, 0.025)  # one-sided 2.5 % each = two-sided 95 %
        ref = binomtest(k, n).proportion_ci(0.95, method="exact")
        assert lo == pytest.approx(ref.low, abs=1e-12) and hi == pytest.approx(ref.high, abs=1e-12)


def test_beta_quantile_is_scipy_stats_bit_for_bit():
    """clopper_pearson's betaincinv (no scipy.stats import) equals beta.ppf exactly over
    random successes and trials at the levels the stage uses; a changed formula fails."""
    from scipy.special import betaincinv
    from scipy.stats import beta
    rng = np.random.default_rng(0)
    n = rng.integers(1, 200_000, size=20_000)
    k = rng.integers(1, n + 1)
    for q in (0.025, 0.975, 0.05 / 32, 1 - 0.05 / 32):
        np.testing.assert_array_equal(betaincinv(k, n - k + 1, q), beta.ppf(q, k, n - k + 1))
    lo, hi = clopper_pearson(k, n, 0.025)
    np.testing.assert_array_equal(lo, beta.ppf(0.025, k, n - k + 1))
    np.testing.assert_array_equal(hi, np.where(k < n, beta.ppf(0.975, k + 1, n - k), 1.0))


@pytest.mark.parametrize("kind", ["rr", "laplace", "laplace_low"])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_bound_stays_below_the_true_epsilon(kind, epsilon):
    """Over 200 repetitions the 95 % bound exceeds the mechanism's ε at most 5 % of the
    time (it is simultaneous over thresholds: the Laplace case has many thresholds that
    each attain ε, and an uncorrected maximum overshoots there)."""
    over = [epsilon_lower_bound(*dp_mechanism(kind, epsilon, 4000, r), DELTA)["epsilon_lo"] > epsilon
            for r in range(200)]
    assert np.mean(over) <= 0.05


def test_uncorrected_maximum_would_overshoot():
    """The check above can fail: the maximum over thresholds of plain 95 % bounds
    (no Bonferroni) exceeds the Laplace mechanism's ε far more often than 5 %."""
    over = [epsilon_lower_bound(*dp_mechanism("laplace", 1.0, 4000, r), DELTA,
                                simultaneous=False)["epsilon_lo"] > 1.0 for r in range(200)]
    assert np.mean(over) > 0.10


@pytest.mark.parametrize("kind", ["rr", "laplace", "laplace_low"])
def test_bound_approaches_epsilon_from_below(kind):
    eps = [epsilon_lower_bound(*dp_mechanism(kind, 1.0, n, 7), DELTA)["epsilon_lo"]
           for n in (2_000, 20_000, 200_000)]
    assert eps[0] < eps[2] <= 1.0
    assert eps[2] >= (0.9 if kind == "rr" else 0.6)  # Laplace: e^ε only out in the tail


def test_members_low_are_seen_by_the_second_direction():
    res = epsilon_lower_bound(*dp_mechanism("laplace_low", 2.0, 20_000, 3), DELTA)
    assert res["ratio"] in ("fnr/tnr", "fpr/tpr") and res["epsilon_lo"] > 1.0


@pytest.mark.parametrize("kind", ["rr", "laplace"])
def test_null_proves_nothing(kind):
    bounds = [epsilon_lower_bound(*dp_mechanism(kind, 0.0, 4000, r), DELTA)["epsilon_lo"]
              for r in range(100)]
    assert np.mean(np.asarray(bounds) > 0) <= 0.05


def test_nan_scores_are_left_out_and_one_sided_data_gives_none():
    s, m = dp_mechanism("rr", 1.0, 2000, 1)
    with_nan = np.concatenate([s, [np.nan] * 50])
    lab = np.concatenate([m, [True] * 50])
    assert epsilon_lower_bound(with_nan, lab, DELTA) == epsilon_lower_bound(s, m, DELTA)
    assert epsilon_lower_bound(s, np.ones_like(m), DELTA)["epsilon_lo"] is None


def test_golden_value_of_the_bound():
    """The closed form on hand-made counts: 1000 members, 1000 non-members, every member
    at score 1 and 50 non-members too (the rest at 0): the best test is "score >= 1"
    (TPR 1, FPR 0.05), two thresholds, so each rate bound at 0.05 / 8."""
    from scipy.stats import beta
    scores = np.r_[np.ones(1000), np.ones(50), np.zeros(950)]
    members = np.r_[np.ones(1000, bool), np.zeros(1000, bool)]
    res = epsilon_lower_bound(scores, members, 1e-5)
    a = 0.05 / 8
    tpr_lo, fpr_hi = beta.ppf(a, 1000, 1), beta.ppf(1 - a, 51, 950)
    tnr_lo, fnr_hi = beta.ppf(a, 950, 51), 1 - a ** (1 / 1000)
    want = max(np.log((tpr_lo - 1e-5) / fpr_hi), np.log((tnr_lo - 1e-5) / fnr_hi))
    assert res["thresholds"] == 2 and res["epsilon_lo"] == pytest.approx(want, rel=1e-12)
    assert res["ceiling"] >= res["epsilon_lo"]


def _leaky_rr(epsilon: float, delta0: float, n: int, seed: int):
    """Randomized response that with probability delta0 reveals the bit outright (score
    +-10): (epsilon, delta0)-DP but not (epsilon, 0)-DP."""
    scores, members = dp_mechanism("rr", epsilon, n, seed)
    reveal = np.random.default_rng([seed, 7]).random(n) < delta0
    return np.where(reveal, np.where(members, 10.0, -10.0), scores), members


def test_delta_is_subtracted_not_added():
    """A mechanism that is (1, 0.05)-DP: audited at its delta the bound stays below 1;
    claimed at delta 0 it is caught (the check can fail)."""
    fair = [epsilon_lower_bound(*_leaky_rr(1.0, 0.05, 4000, r), 0.05)["epsilon_lo"] for r in range(100)]
    assert np.mean(np.asarray(fair) > 1.0) <= 0.05
    wrong = [epsilon_lower_bound(*_leaky_rr(1.0, 0.05, 4000, r), 0.0)["epsilon_lo"] for r in range(20)]
    assert np.mean(np.asarray(wrong) > 1.0) > 0.9


def test_ceiling_is_what_a_perfect_attack_reaches():
    from bnmem.attack.epsilon import epsilon_ceiling
    members = np.r_[np.ones(800, bool), np.zeros(800, bool)]
    res = epsilon_lower_bound(members.astype(float), members, 1e-5)
    assert res["epsilon_lo"] == pytest.approx(epsilon_ceiling(800, 800, 1e-5, res["thresholds"]))
    assert epsilon_ceiling(160, 160, 1e-5, 64) < epsilon_ceiling(16000, 16000, 1e-5, 64) < 8


def test_samples_behind_the_bound_are_counted():
    s, m = dp_mechanism("rr", 2.0, 4000, 0)
    res = epsilon_lower_bound(s, m, 1e-5, groups=np.arange(4000) % 100)
    assert res["epsilon_lo"] > 0 and 1 <= res["samples"] <= 100


def test_least_endpoint_at_or_above_a_level_and_overlap():
    from bnmem.attack.mitigation import least_at
    assert least_at([0.5, 0.7, 0.8], [0.1, 2.0, 1.0], 0.65) == 1.0  # no interpolation
    assert least_at([0.5, 0.7], [0.1, 2.0], 0.75) is None
    assert least_at([0.5], [0.1], float("nan")) is None


def _membership(bounds: list[float], accountant: list[float], ceiling: float = 7.5) -> dict:
    ends = [{sub: {"epsilon_lo": b, "ceiling": ceiling} for sub in ("all", "flipped", "ood")}
            for b in bounds]
    return {"arms": {"none": {"empirical_epsilon": ends[-1]},
                     "groupnorm_dp_eps2": {"empirical_epsilon": ends[-1],
                                           "dp_accountant": {"epsilon_max": [a / 2 for a in accountant],
                                                             "epsilon_substitution_max": accountant,
                                                             "noise_multiplier_min": [1.0, 2.0],
                                                             "noise_multiplier_max": [1.1, 2.1]}}},
            "frontier": {"budgets": [1, 12], "arms": {"groupnorm_dp_eps2": {"empirical_epsilon": ends},
                                                      "none": {"empirical_epsilon": ends}}}}


def test_dp_audit_rule_passes_below_and_fails_above_the_accountant():
    """Held to the replace-one ε; "uninformative" where no ceiling reaches it."""
    from bnmem.report.mitigation import dp_audit, mitigation_section
    assert dp_audit(_membership([0.3, 1.9], [2.0, 2.0]))["groupnorm_dp_eps2"][0] == "passes"
    word, broken = dp_audit(_membership([0.3, 2.4], [2.0, 2.0]))["groupnorm_dp_eps2"]
    assert word == "fails" and broken.count("12 epochs") == 3 and "2.40 > 2.00" in broken
    assert set(dp_audit(_membership([0.3, 2.4], [2.0, 2.0]))) == {"groupnorm_dp_eps2"}  # DP arms only
    assert dp_audit(_membership([0.0, 0.0], [9.0, 9.0]))["groupnorm_dp_eps2"][0] == "uninformative"
    text = "\n".join(mitigation_section(_membership([0.3, 2.4], [2.0, 2.0]), 1e-5))
    assert "`groupnorm_dp_eps2` **fails** at 12 epochs all" in text
    assert "`groupnorm_dp_eps2` passes (" in "\n".join(
        mitigation_section(_membership([0.3, 1.9], [2.0, 2.0]), 1e-5))
    assert "`groupnorm_dp_eps2` uninformative (" in "\n".join(
        mitigation_section(_membership([0.0, 0.0], [9.0, 9.0]), 1e-5))
    named = "\n".join(mitigation_section(_membership([0.3, 1.9], [2.0, 2.0]), 1e-5,
                                         inplace={"groupnorm_dp_eps2": ["layer1.relu"], "none": []}))
    assert "In-place activations switched off for DP-SGD" in named and "`layer1.relu`" in named
