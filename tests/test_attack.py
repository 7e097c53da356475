"""Membership inference: signal, LiRA vs theory and a scipy reference, leave-one-out,
shard ordering, RMIA, ROC metrics and bootstrap CIs, and the attack stage end to end."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from bnmem.attack.lira import (
    LIRA_VARIANTS, PairSignals, complement_partner, fit_gaussians, lira_draw, lira_scores,
    loo_lira, score_lira,
)
from bnmem.attack.signals import load_shadow, memorization
from bnmem.core.margin import log_prob_from_margin, logit_margin
from bnmem.core.io import InputError, save_npz
from bnmem.attack.rmia import loo_rmia, rmia_scores
from bnmem.core.rng import SALT
from bnmem.attack.roc import (
    SUBSETS, bootstrap_weights, evaluate, paired_deltas, roc_points, roc_summary,
)
from bnmem.core.keep import keep_matrix

ROOT = Path(__file__).resolve().parents[1]
C = 10


def balanced_keep(rng: np.random.Generator, m: int, n: int) -> np.ndarray:
    """[m, n] with every sample IN for exactly m // 2 models."""
    return np.argsort(rng.random((m, n)), axis=0) < m // 2


def as_logits(phi: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Logits whose margin is phi: z_y = phi + log(C - 1), every other class 0."""
    z = np.zeros(phi.shape + (C,), np.float32)
    lab = np.broadcast_to(labels, phi.shape)[..., None]
    np.put_along_axis(z, lab, (phi + np.log(C - 1))[..., None].astype(np.float32), axis=-1)
    return z


def auc(scores, labels) -> float:
    return float(roc_summary(*roc_points(scores, labels))["auc"])


# ---------------------------------------------------------------- signal

def test_logit_margin_exact_at_margin_800():
    z = np.zeros((3, C), np.float32)
    z[0, 3], z[1, 3] = 800, -800
    z[2, 3], z[2, 7] = 800, 700  # the runner-up dominates the others' logsumexp
    phi = logit_margin(z, np.array([3, 3, 3]))
    assert np.isfinite(phi).all()
    np.testing.assert_allclose(phi, [800 - np.log(9), -800 - np.log(9),
                                     100 - np.log1p(8 * np.exp(-700.0))], rtol=1e-14)
    logp = log_prob_from_margin(phi)  # log softmax_y without underflow
    assert np.isfinite(logp).all() and logp[1] == pytest.approx(-800 - np.log(9), rel=1e-14)


# ---------------------------------------------------------------- LiRA

@pytest.mark.parametrize("shared_noise", [True, False])
def test_lira_online_auc_matches_gaussian_theory(shared_noise):
    """phi = b_i + d * member + eps, eps ~ N(0, 1). With the true Gaussians the online
    log-LR of each query is affine in phi_q - b_i with one slope for every sample, so the
    query-averaged score ranks like mean_q(phi_q) - b_i: AUC = Phi(d / sqrt(2 v)), v the
    variance of the query mean (1 if both queries share eps, 1/2 if independent). The
    Gaussians are fitted from 400 + 400 shadows: estimation noise costs O(1e-3)."""
    rng = np.random.default_rng(0)
    n, s, t, d = 1000, 800, 40, 1.0
    labels = rng.integers(0, C, n)
    b = rng.normal(0, 3, n)  # per-sample difficulty: raw phi alone would rank poorly

    def draw(member):
        eps = rng.normal(size=member.shape + ((1,) if shared_noise else (2,)))
        phi = np.broadcast_to(b[:, None] + d * member[..., None] + eps, member.shape + (2,))
        return logit_margin(as_logits(phi, labels[:, None]), labels[:, None])

    keep_shadow = balanced_keep(rng, s, n)
    member = rng.random((t, n)) < 0.5
    g = fit_gaussians(draw(keep_shadow), keep_shadow)
    scores = score_lira(draw(member), g, online=True, variance="sample")
    expected = norm.cdf(d / np.sqrt(2 * (1.0 if shared_noise else 0.5)))
    assert auc(scores, member) == pytest.approx(expected, abs=0.01)
    assert auc(draw(member).mean(-1), member) < expected - 0.1  # per-sample calibration matters


def reference_lira(x, phi_s, keep_s, online, variance, one_sided=True):
    """Per-sample loops with scipy.stats.norm: median location, ddof-1 std; "pooled" =
    sqrt(sum of within-sample squared deviations / sum of (n - 1)) per query; "global" =
    the LiRA reference code's fixed variance, np.std of every shadow signal of the set
    (all samples and queries, ddof 0)."""
    n, q = x.shape
    sets = {True: keep_s, False: ~keep_s}
    mu = {k: np.array([[np.median(phi_s[v[:, i], i, j]) for j in range(q)] for i in range(n)])
          for k, v in sets.items()}
    sd = {k: np.array([[np.std(phi_s[v[:, i], i, j], ddof=1) for j in range(q)]
                       for i in range(n)]) for k, v in sets.items()}
    for k, v in sets.items():
        if variance == "pooled":
            ss = [sum(((phi_s[v[:, i], i, j] - phi_s[v[:, i], i, j].mean()) ** 2).sum()
                      for i in range(n)) for j in range(q)]
            dof = sum(v[:, i].sum() - 1 for i in range(n))
            sd[k] = np.broadcast_to(np.sqrt(np.array(ss) / dof), (n, q))
        elif variance == "global":  # np.std(dat_in) online for both, np.std(dat_out) offline
            src = sets[True] if online else sets[False]
            dat = np.concatenate([phi_s[src[:, i], i, :].ravel() for i in range(n)])
            sd[k] = np.full((n, q), np.std(dat))
    if online:
        out = norm.logpdf(x, mu[True], sd[True]) - norm.logpdf(x, mu[False], sd[False])
    elif one_sided:
        out = -norm.logsf(x, mu[False], sd[False])
    else:
        out = -np.log(2 * norm.sf(np.abs(x - mu[False]) / sd[False]))
    return out.mean(-1)


@pytest.mark.parametrize("online,fixed,one_sided",
                         [(*v, True) for v in LIRA_VARIANTS.values()] + [(False, "sample", False)])
def test_lira_matches_scipy_reference(online, fixed, one_sided):
    rng = np.random.default_rng(1)
    s, n, q = 9, 6, 2
    keep_s = balanced_keep(rng, s, n)  # 4 IN, 5 OUT per sample
    phi_s = rng.normal(size=(s, n, q)) * 2 + keep_s[..., None]
    x = rng.normal(size=(n, q)) * 3
    got = lira_scores(x, phi_s, keep_s, online, fixed, one_sided)
    np.testing.assert_allclose(got, reference_lira(x, phi_s, keep_s, online, fixed, one_sided),
                               rtol=1e-10)


def test_lira_with_too_few_shadows():
    """< 2 shadows in a set: the pooled std; 0 shadows: that term drops out (score 0 offline)."""
    keep_s = np.array([[1, 1, 1, 0], [1, 1, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]], bool)
    phi_s = np.arange(16.0).reshape(4, 4, 1) % 5
    g = fit_gaussians(phi_s, keep_s)
    assert g.sd_in[0, 2] == g.pooled_in[0, 0]  # one IN shadow (Gaussians are [Q, N])
    x = np.full((4, 1), 2.0)
    online = score_lira(x, g, online=True, variance="sample")
    assert np.isfinite(online).all()
    assert online[3] == pytest.approx(-norm.logpdf(2.0, g.mu_out[0, 3], g.sd_out[0, 3]))
    assert score_lira(x, fit_gaussians(phi_s, ~keep_s), False, "sample")[3] == 0.0  # no OUT


@pytest.mark.parametrize("m", [8, 4])
def test_balanced_loo_leaves_out_target_and_complement(m):
    """Balanced leave-one-out scores equal scoring each target against np.delete'd shadows
    without it and its complement (every sample then has m/2 - 1 IN and OUT shadows); with
    4 models each set holds one shadow (the pooled-std fallback)."""
    rng = np.random.default_rng(2)
    n = 60
    keep = keep_matrix(m, n, 1)
    phi = rng.normal(size=(m, n, 2)) + keep[..., None]
    phi[1] += 40.0  # a target far from the rest: any self-use would move its statistics
    logp = log_prob_from_margin(phi).mean(-1)
    logp[:, :5] = np.where(np.arange(m)[:, None] == 1, 0.0, -60.0)  # model 1 holds the mass
    ids = np.arange(m)
    loo = loo_lira(phi, keep, ids)
    only = loo_lira(phi, keep, ids, variants=("lira_offline_fixed",))
    assert list(only) == ["lira_offline_fixed"]
    np.testing.assert_array_equal(only["lira_offline_fixed"], loo["lira_offline_fixed"])
    partner = complement_partner(keep, ids)
    assert (partner == ids ^ 1).all()
    rmia = loo_rmia(logp, keep, ids, gamma=1.5, a=0.3, population=20, seed=0, partner=partner)
    for t in range(m):
        drop = [t, t ^ 1]
        others, kept = np.delete(phi, drop, 0), np.delete(keep, drop, 0)
        assert (kept.sum(0) == m // 2 - 1).all()  # balanced for every sample
        for name, (online, fixed) in LIRA_VARIANTS.items():
            np.testing.assert_allclose(loo[name][t], lira_scores(phi[t], others, kept, online,
                                                                 fixed), rtol=1e-9, atol=1e-9)
        non = np.flatnonzero(~keep[t])
        pop = np.random.default_rng([0, SALT["rmia_population"], t]).choice(non, min(20, non.size // 2), replace=False)
        for name, online in (("rmia", True), ("rmia_offline", False)):
            np.testing.assert_allclose(rmia[name][t], rmia_scores(
                logp[t], np.delete(logp, drop, 0), kept, pop, gamma=1.5, online=online))


def test_loo_needs_complementary_pairs():
    keep = keep_matrix(4, 10, 0)
    keep[1, 0] = keep[0, 0]  # pair (0, 1) no longer complementary
    with pytest.raises(InputError, match="complementary model pairs"):
        loo_lira(np.zeros((4, 10, 1)), keep, np.arange(4))


def test_pair_weights_equal_the_expanded_multiset():
    """Gaussians of pairs taken w times each equal the reference fit on the shadows
    repeated w times (a bootstrap draw); a draw of all ones equals leave-one-out."""
    rng = np.random.default_rng(11)
    m, n = 10, 30
    keep = keep_matrix(m, n, 2)
    phi = rng.normal(size=(m, n, 2)) + keep[..., None]
    ids = np.arange(m)
    ps = PairSignals.build(phi, keep, ids)
    for w in (np.array([2, 0, 1, 3, 1]), np.array([0, 0, 4, 0, 1]), np.ones(5, int)):
        rows = np.repeat(np.arange(m), np.repeat(w, 2))  # the draw's multiset of models
        distinct = np.repeat(np.arange(m), np.repeat(w > 0, 2))
        ref, ref_spread = fit_gaussians(phi[rows], keep[rows]), fit_gaussians(phi[distinct],
                                                                              keep[distinct])
        got = ps.gaussians(w)
        for f in ("mu_in", "mu_out"):  # location: the median of the multiset
            np.testing.assert_allclose(getattr(got, f), getattr(ref, f), rtol=1e-12, atol=1e-12)
        for f in ("sd_in", "sd_out", "pooled_in", "pooled_out"):  # spread: distinct pairs
            np.testing.assert_allclose(getattr(got, f), getattr(ref_spread, f), rtol=1e-12,
                                       atol=1e-12)
    # a pair drawn twice is no evidence of spread: no collapse to the 1e-8 floor (~1e17
    # scores when duplicates counted as spread); per-sample variances from 2 pairs are
    # still noisy, so the bound is loose
    d = lira_draw(ps, phi, np.array([2, 1, 1, 0, 0]), "lira_online")
    assert np.abs(np.concatenate(list(d.values()))).max() < 1e6
    assert sorted(d) == [0, 1, 2, 3, 4, 5]  # pairs 1, 2 have only one other distinct pair...
    assert not lira_draw(ps, phi, np.array([3, 1, 0, 0, 0]), "lira_online")  # ...each: skipped
    d = lira_draw(ps, phi, np.ones(5, int), "lira_online_fixed")
    loo = loo_lira(phi, keep, ids, variants=("lira_online_fixed",))["lira_online_fixed"]
    assert sorted(d) == list(range(m))
    for t in range(m):
        np.testing.assert_allclose(d[t], loo[t], rtol=1e-12)


def test_leave_one_out_equals_the_per_pair_reference():
    """The O(P) leave-one-pair-out Gaussians of a draw equal `gaussians` recomputed with
    each drawn pair left out (the O(P^2) reference), with ties and duplicated pairs:
    locations exactly, spreads to float64 rounding."""
    rng = np.random.default_rng(12)
    m, n = 16, 50
    keep = keep_matrix(m, n, 4)
    phi = np.round(rng.normal(size=(m, n, 2)) + keep[..., None], 1)  # many ties
    phi[:, :5] += 1e3  # a large offset: the centred sums must not cancel
    ps = PairSignals.build(phi, keep, np.arange(m))
    for counts in (np.ones(8, int), np.array([3, 0, 1, 2, 0, 1, 1, 0]),
                   np.array([0, 4, 0, 0, 2, 0, 2, 0]), rng.multinomial(8, np.full(8, 1 / 8))):
        pairs, got = ps.leave_one_out(counts)
        np.testing.assert_array_equal(pairs, np.flatnonzero(counts))
        for i, p in enumerate(pairs):
            w = counts.copy()
            w[p] = 0
            ref = ps.gaussians(w)
            for f in ("mu_in", "mu_out"):  # order statistics: exact
                np.testing.assert_array_equal(getattr(got, f)[i], getattr(ref, f))
            # spread: a sum of squares minus p's term loses ~1e-16 of the whole sum, so
            # where the rest are all equal (true sd 0, floored to 1e-8) the downdate
            # leaves sqrt(1e-16 x spread^2) ~ 1e-8 x spread (spread ~1 here): atol 1e-7
            for f in ("sd_in", "sd_out", "pooled_in", "pooled_out"):
                np.testing.assert_allclose(getattr(got, f)[i], getattr(ref, f), rtol=1e-12,
                                           atol=1e-7)
    assert ps.leave_one_out(np.array([0, 5, 0, 0, 3, 0, 0, 0]))[1] is None  # one pair left


# ---------------------------------------------------------------- shards

def write_shadow(tmp_path, phi, keep, ids, labels, splits, epochs=None):
    """Shards holding the models `splits` (lists of row indices) with the given ids;
    `epochs` = (epoch_phi [m, E, N], epoch_correct [m, E, N]) adds the per-epoch arrays."""
    paths = []
    for k, rows in enumerate(splits):
        paths.append(tmp_path / f"shard_{k}.npz")
        extra = {} if epochs is None else {"epoch_phi": epochs[0][rows].astype(np.float32),
                                           "epoch_correct": epochs[1][rows]}
        save_npz(paths[-1], logits=as_logits(phi[rows], labels[None, :, None]),
                 keep=keep[rows], model_ids=ids[rows].astype(np.int64), **extra)
    return paths


def test_shards_sorted_by_model_id_not_file_order(tmp_path):
    rng = np.random.default_rng(3)
    m, n = 6, 40
    labels, keep = rng.integers(0, C, n), keep_matrix(m, n, 3)
    phi = rng.normal(size=(m, n, 2)) + keep[..., None]
    ids = np.arange(m)
    one = load_shadow(write_shadow(tmp_path / "a", phi, keep, ids, labels, [list(range(m))]),
                      labels)
    # shard_0 holds the highest ids, in descending order within the file
    split = load_shadow(write_shadow(tmp_path / "b", phi, keep, ids, labels,
                                     [[5, 4, 3], [2, 0, 1]]), labels)
    np.testing.assert_array_equal(split.model_ids, np.arange(m))
    for field in ("phi", "logp", "correct", "keep"):
        np.testing.assert_array_equal(getattr(split, field), getattr(one, field))
    np.testing.assert_array_equal(loo_lira(split.phi, split.keep, split.model_ids)["lira_online"],
                                  loo_lira(one.phi, one.keep, one.model_ids)["lira_online"])


def test_shard_errors_name_the_file(tmp_path):
    rng = np.random.default_rng(4)
    labels, keep = rng.integers(0, C, 10), balanced_keep(rng, 4, 10)
    phi = rng.normal(size=(4, 10, 2))
    paths = write_shadow(tmp_path, phi, keep, np.array([0, 1, 1, 2]), labels, [[0, 1], [2, 3]])
    with pytest.raises(InputError, match="duplicate model ids \\[1\\]"):
        load_shadow(paths, labels)
    with pytest.raises(InputError, match="shard_9.npz: file not found"):
        load_shadow(paths + [tmp_path / "shard_9.npz"], labels)
    paths[1].write_bytes(paths[1].read_bytes()[:100])
    with pytest.raises(InputError, match="shard_1.npz: not a readable"):
        load_shadow(paths, labels)
    with pytest.raises(InputError, match="shard_0.npz: .*do not fit"):
        load_shadow(paths[:1], labels[:9])


# ---------------------------------------------------------------- RMIA, memorization

def test_rmia_ranks_planted_member_first():
    rng = np.random.default_rng(5)
    m, n = 8, 200
    keep = balanced_keep(rng, m, n)
    logp = np.log(rng.uniform(0.4, 0.6, (m, n)))  # membership leaves no trace ...
    keep[:, 0] = np.arange(m) < m // 2
    logp[:, 0] = np.where(keep[:, 0], np.log(0.9), -30.0)  # ... except on sample 0
    t = 0  # a member of sample 0
    pop = np.flatnonzero(~keep[t])[:50]
    s = rmia_scores(logp[t], np.delete(logp, t, 0), np.delete(keep, t, 0), pop, gamma=1.5)
    assert s[0] == 1.0 and s[0] > np.nanmax(s[~keep[t]])
    assert np.isnan(s[pop]).all() and not np.isnan(np.delete(s, pop)).any()  # reference only


def test_memorization_score():
    keep = np.array([[1, 1], [1, 0], [0, 1], [0, 0]], bool)
    correct = np.array([[1, 1], [1, 0], [0, 0], [1, 1]], bool)
    score, n_in, n_out = memorization(correct, keep)
    np.testing.assert_allclose(score, [1.0 - 0.5, 0.5 - 0.5])
    np.testing.assert_array_equal(n_in, [2, 2])


# ---------------------------------------------------------------- metrics

def test_tpr_at_fpr_is_strictly_below():
    """100 non-members at 0..99; 5 members above all, 5 just above non-member 98. The
    point (FPR 0.01, TPR 1) has FPR == 1e-2, not below it: TPR@FPR<1e-2 is 0.5."""
    scores = np.r_[np.arange(100.0), np.full(5, 200.0), np.full(5, 98.5)]
    labels = np.r_[np.zeros(100, bool), np.ones(10, bool)]
    summ = roc_summary(*roc_points(scores, labels))
    assert summ["tpr_at_fpr_1e-2"] == 0.5 and summ["tpr_at_fpr_1e-3"] == 0.5
    assert summ["balanced_acc"] == pytest.approx((1 + 0.99) / 2)


def test_roc_metrics_match_sklearn_and_brute_force():
    rng = np.random.default_rng(6)
    scores, labels = rng.integers(0, 20, 500).astype(float), rng.random(500) < 0.3  # many ties
    summ = roc_summary(*roc_points(scores, labels))
    assert summ["auc"] == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    brute = max(((scores[labels] >= th).mean() + (scores[~labels] < th).mean()) / 2
                for th in np.r_[np.unique(scores), np.inf])
    assert summ["balanced_acc"] == pytest.approx(brute, abs=1e-12)


def test_bootstrap_ci_contains_estimate_and_is_seeded():
    rng = np.random.default_rng(7)
    m, n = 8, 300
    keep, kind = balanced_keep(rng, m, n), np.repeat([0, 1, 2], [240, 40, 20]).astype(np.int8)
    scores = rng.normal(size=(m, n)) + keep * (1 + kind)
    boot = bootstrap_weights(kind, 50, np.random.default_rng([0, 1]))
    met, res, curves = evaluate(scores, keep, kind, boot)
    for sub in ("all", "clean", "flipped", "ood"):
        row = met[sub]
        assert row["auc_lo"] <= row["auc"] <= row["auc_hi"]
        assert not any("." in k for k in row)
        # negatives x FPR < 10 false positives: TPR at that FPR is not reported
        assert row["n_negatives"] == int((~keep[:, kind == SUBSETS[sub]] if SUBSETS[sub] is not None
                                          else ~keep).sum())
        assert (row["tpr_at_fpr_1e-2"] is None) == (row["n_negatives"] * 1e-2 < 10)
        assert row["tpr_at_fpr_1e-3"] is None and row["tpr_at_fpr_1e-3_lo"] is None
        assert row["tpr_at_fpr_1e-4"] is None
        assert 0 <= row["tpr_at_zero_fp"] <= 1
    again = evaluate(scores, keep, kind, bootstrap_weights(kind, 50, np.random.default_rng([0, 1])))
    assert again[0] == met
    assert (boot.sum(1) == n).all() and (boot[:, kind == 2].sum(1) == 20).all()  # stratified
    deltas = paired_deltas({"none": {"x": met}, "batchnorm": {"x": met}},
                           {"none": {"x": res}, "batchnorm": {"x": res}})
    assert deltas["batchnorm"]["x"]["ood"] == {"auc": 0.0, "auc_lo": 0.0, "auc_hi": 0.0,
                                               "tpr_at_fpr_1e-3": None,
                                               "tpr_at_fpr_1e-3_lo": None,
                                               "tpr_at_fpr_1e-3_hi": None}
    # 2 x 60 000 negatives: 12 false positives allowed at 1e-4, so it is reported, and
    # (members shifted by 4 sd) it is far above the FPR
    big = np.r_[np.ones(60_000, bool), np.zeros(60_000, bool)][None].repeat(2, 0)
    big[1] = ~big[1]
    big_scores = rng.normal(size=big.shape) + 4.0 * big
    row = evaluate(big_scores, big, np.zeros(big.shape[1], np.int8), subsets=("all",))[0]["all"]
    assert row["n_negatives"] == 120_000 and row["tpr_at_fpr_1e-4"] > 0.1
    empty = evaluate(scores, keep, np.zeros(n, np.int8), boot)[0]
    assert empty["flipped"]["auc"] is None and empty["all"]["auc"] == met["all"]["auc"]


# ---------------------------------------------------------------- stage

def test_attack_stage_end_to_end(tmp_path):
    rng = np.random.default_rng(8)
    m, n, e = 12, 60, 3  # 6 pairs: most bootstrap draws hold >= 3 distinct pairs
    kind = np.repeat([0, 1, 2], [40, 14, 6]).astype(np.int8)
    labels = rng.integers(0, C, n)
    np.savez(tmp_path / "pool.npz", y_train=labels, kind=kind)
    params = {"arms": ["none", "batchnorm"], "pool_size": n,
              # no annealed endpoints (the pipeline test runs them): the within-run fallback
              "shadow": {"n_models": m, "shards": 2, "shard_ids": [0, 1], "budgets": []},
              "attack": {"bootstrap": 20, "model_bootstrap": 20, "rmia_population": 10}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    keep = keep_matrix(m, n, 0)  # one keep matrix for all arms, as the shadow stage makes
    for j, arm in enumerate(params["arms"]):
        phi = rng.normal(size=(m, n, 2)) + (1 + j) * keep[..., None]
        epochs = (rng.normal(size=(m, e, n)) + keep[:, None],
                  rng.random((m, e, n)) < np.linspace(0.5, 0.9 + 0.05 * j, e)[None, :, None])
        write_shadow(tmp_path / "shadow" / arm, phi, keep, np.arange(m), labels,
                     [[6, 7, 8, 9, 10, 11], [0, 1, 2, 3, 4, 5]], epochs)
    cmd = [sys.executable, str(ROOT / "stages" / "attack.py"), "--params", "params.yaml",
           "--pool", "pool.npz", "--shadow-dir", "shadow", "--results", "out/attack.json",
           "--membership", "out/membership.json", "--metrics", "out/headline.json",
           "--deltas", "out/deltas.json",
           "--scores-dir", "out/scores", "--roc", "out/roc.csv"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    mem = json.loads((tmp_path / "out/membership.json").read_text())
    assert mem["variant"] == "lira_online_fixed" and mem["interval"] == "models+samples"
    assert set(mem["arms"]) == {"none", "batchnorm"}
    assert len(mem["arms"]["none"]["epoch"]["fit"]) == e
    assert mem["frontier"]["compare"] == {} and mem["grads"] is None  # one endpoint: no frontier
    c = mem["compare"]["batchnorm_minus_none"]
    assert {"equal_epochs", "matched_fit", "curve"} <= set(c)
    row = c["equal_epochs"]["auc_all"]
    assert row["lo"] <= row["value"] <= row["hi"]
    # procedure mixed: AUC from the jackknife + samples rows (1.96), TPR from the pairs-only
    # rows with Student's t on P - 1 = 5 df; the joint rows for AUC over a matched overlap;
    # no halves or delete-4 rows: their rule (AUC at equal epochs) is for 8 pairs and >= 100
    # draws, and mixed does not draw rows no rule reads
    assert set(mem["segments"]) == {"jackknife", "samples", "pairs", "both"}
    sd = row["sd"]
    assert row["hi"] - row["value"] == pytest.approx(1.96 * np.hypot(sd["jackknife"], sd["samples"]))
    assert mem["arms"]["none"]["null"]["masks"] == 16
    assert 0.4 < mem["arms"]["none"]["null"]["auc"]["mean"] < 0.6
    met = json.loads((tmp_path / "out/attack.json").read_text())
    assert set(met["none"]) >= {"lira_online", "lira_offline", "lira_online_fixed",
                                "lira_offline_fixed", "lira_online_global", "rmia"}
    for name, res in met["none"].items():  # the real null of every variant
        assert set(res["null"]) == {"auc", "tpr_at_fpr_1e-3", "tpr_at_fpr_1e-4", "epsilon_lo",
                                        "masks"}, name
    row = met["batchnorm"]["lira_online"]["ood"]
    assert {"auc", "balanced_acc", "tpr_at_fpr_1e-3", "tpr_at_fpr_1e-2", "auc_lo",
            "tpr_at_zero_fp", "n_negatives"} <= set(row)
    deltas = json.loads((tmp_path / "out/deltas.json").read_text())
    assert deltas["batchnorm"]["rmia"]["all"]["auc_lo"] is not None
    head = json.loads((tmp_path / "out/headline.json").read_text())
    assert set(head["none"]) == {"auc_all", "auc_clean", "auc_flipped", "auc_ood",
                                 "tpr_at_fpr_1e-3_all", "null_auc", "epsilon_lo_all"}
    with np.load(tmp_path / "out/scores/none.npz") as z:
        assert z["lira_online"].shape == (m, n) and z["mem_score"].shape == (n,)
    (tmp_path / "shadow/none/shard_1.npz").unlink()
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2 and "shard_1.npz: file not found" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_mixed_reads_tpr_from_the_pairs_only_rows_with_t(monkeypatch):
    """The stage's models+samples bootstrap under `mixed`: AUC from the jackknife and
    samples-only rows (± 1.96 sd), TPR at 1e-3 from the pairs-only rows, which skip the
    per-epoch figures (± t(P - 1) sd). With a real-shadow rule named for the common point
    (delete4_halves, in use until the sixth pool) 20 draws still draw none of its rows."""
    from scipy import stats

    from bnmem.attack import intervals
    from bnmem.attack.stage import _resampled
    monkeypatch.setitem(intervals.MIXED_RULES, ("auc", "common"), "delete4_halves")
    from bnmem.core.config import config_from_dict
    rng = np.random.default_rng(11)
    m, n = 16, 1400  # 11 200 negative pairs: TPR at 1e-3 supported
    kind = np.zeros(n, np.int8)
    keep = keep_matrix(m, n, 0)
    cfg = config_from_dict({"arms": ["none", "batchnorm"], "pool_size": n,
                            "shadow": {"n_models": m, "budgets": [], "workers": 1},
                            "attack": {"model_bootstrap": 20}})
    data = {}
    for j, arm in enumerate(cfg.arms):
        phi = rng.normal(size=(m, n, 1)) + (0.8 + 0.4 * j) * keep[..., None]
        data[arm] = {"phi": phi, "keep": keep, "correct": phi[..., 0] > 0.3,
                     "model_ids": np.arange(m), "epoch_phi": None, "epoch_correct": None,
                     "loss": rng.random((m, n)), "budgets": []}
    mem = _resampled(cfg, data, kind, "lira_online_fixed")
    # 8 pairs but 20 draws: halves would hold 10 reweightings, under the 50 delete4_halves
    # needs, so no halves or delete-4 rows are drawn and all samples' AUC at equal epochs
    # falls back to jacksum (and its record says so)
    assert set(mem["segments"]) == {"jackknife", "samples", "pairs", "both"}
    assert mem["rules"]["auc@common"] == "jacksum"  # the named rule's fallback at 20 draws
    assert mem["compare"]["batchnorm_minus_none"]["equal_epochs"]["auc_all"]["rule"] == "jacksum"
    row = mem["compare"]["batchnorm_minus_none"]["equal_epochs"]
    t = stats.t.ppf(0.975, m // 2 - 1)
    assert row["tpr_low_all"]["value"] is not None
    assert row["tpr_low_all"]["hi"] - row["tpr_low_all"]["value"] == pytest.approx(
        t * row["tpr_low_all"]["sd"]["pairs"])
    sd = row["auc_all"]["sd"]
    assert row["auc_all"]["hi"] - row["auc_all"]["value"] == pytest.approx(
        1.96 * np.hypot(sd["jackknife"], sd["samples"]))
    # per-subset AUCs are left out of the lean rows only: had the samples-only rows been
    # made lean, the clean samples' AUC would lack its interval
    assert mem["arms"]["none"]["auc_clean"]["lo"] is not None
