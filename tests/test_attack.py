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

from bnmem.attack import (LIRA_VARIANTS, fit_gaussians, lira_scores, load_shadow,
                          log_prob_from_margin, logit_margin, loo_lira, memorization,
                          score_lira)
from bnmem.rmia import loo_rmia, rmia_scores
from bnmem.io import InputError, save_npz
from bnmem.roc import (bootstrap_weights, evaluate, paired_deltas, roc_points,
                       roc_summary)

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
    scores = score_lira(draw(member), g, online=True, fixed_variance=False)
    expected = norm.cdf(d / np.sqrt(2 * (1.0 if shared_noise else 0.5)))
    assert auc(scores, member) == pytest.approx(expected, abs=0.01)
    assert auc(draw(member).mean(-1), member) < expected - 0.1  # per-sample calibration matters


def reference_lira(x, phi_s, keep_s, online, fixed, one_sided=True):
    """Per-sample loops with scipy.stats.norm: median location, ddof-1 std, pooled std =
    sqrt(sum of within-sample squared deviations / sum of (n - 1)) per query."""
    n, q = x.shape
    sets = {True: keep_s, False: ~keep_s}
    mu = {k: np.array([[np.median(phi_s[v[:, i], i, j]) for j in range(q)] for i in range(n)])
          for k, v in sets.items()}
    sd = {k: np.array([[np.std(phi_s[v[:, i], i, j], ddof=1) for j in range(q)]
                       for i in range(n)]) for k, v in sets.items()}
    for k, v in sets.items():
        if fixed:
            ss = [sum(((phi_s[v[:, i], i, j] - phi_s[v[:, i], i, j].mean()) ** 2).sum()
                      for i in range(n)) for j in range(q)]
            dof = sum(v[:, i].sum() - 1 for i in range(n))
            sd[k] = np.broadcast_to(np.sqrt(np.array(ss) / dof), (n, q))
    if online:
        out = norm.logpdf(x, mu[True], sd[True]) - norm.logpdf(x, mu[False], sd[False])
    elif one_sided:
        out = -norm.logsf(x, mu[False], sd[False])
    else:
        out = -np.log(2 * norm.sf(np.abs(x - mu[False]) / sd[False]))
    return out.mean(-1)


@pytest.mark.parametrize("online,fixed,one_sided",
                         [(*v, True) for v in LIRA_VARIANTS.values()] + [(False, False, False)])
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
    online = score_lira(x, g, online=True, fixed_variance=False)
    assert np.isfinite(online).all()
    assert online[3] == pytest.approx(-norm.logpdf(2.0, g.mu_out[0, 3], g.sd_out[0, 3]))
    assert score_lira(x, fit_gaussians(phi_s, ~keep_s), False, False)[3] == 0.0  # no OUT


@pytest.mark.parametrize("m,balanced", [(8, True), (4, True), (7, False)])
def test_loo_never_uses_target_as_its_own_shadow(m, balanced):
    """Leave-one-out scores equal scoring each target against np.delete'd shadows; with 4
    models or an unbalanced keep some sets shrink to 1 or 0 shadows (fallback paths)."""
    rng = np.random.default_rng(2)
    n = 60
    keep = balanced_keep(rng, m, n) if balanced else rng.random((m, n)) < 0.3
    phi = rng.normal(size=(m, n, 2)) + keep[..., None]
    phi[1] += 40.0  # a target far from the rest: any self-use would move its statistics
    logp = log_prob_from_margin(phi).mean(-1)
    logp[1, :5] = 0.0  # model 1 holds nearly all of these samples' probability mass
    logp[:, :5] = np.where(np.arange(m)[:, None] == 1, 0.0, -60.0)
    loo = loo_lira(phi, keep)
    only = loo_lira(phi, keep, variants=("lira_offline_fixed",))
    assert list(only) == ["lira_offline_fixed"]
    np.testing.assert_array_equal(only["lira_offline_fixed"], loo["lira_offline_fixed"])
    rmia = loo_rmia(logp, keep, np.arange(m), gamma=1.5, a=0.3, population=20, seed=0)
    for t in range(m):
        others, kept = np.delete(phi, t, 0), np.delete(keep, t, 0)
        for name, (online, fixed) in LIRA_VARIANTS.items():
            np.testing.assert_allclose(loo[name][t], lira_scores(phi[t], others, kept, online,
                                                                 fixed), rtol=1e-9, atol=1e-9)
        non = np.flatnonzero(~keep[t])
        pop = np.random.default_rng([0, 0x5A11, t]).choice(non, min(20, non.size), replace=False)
        for name, online in (("rmia", True), ("rmia_offline", False)):
            np.testing.assert_allclose(rmia[name][t], rmia_scores(
                logp[t], np.delete(logp, t, 0), kept, pop, gamma=1.5, online=online))


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
    labels, keep = rng.integers(0, C, n), balanced_keep(rng, m, n)
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
    np.testing.assert_array_equal(loo_lira(split.phi, split.keep)["lira_online"],
                                  loo_lira(one.phi, one.keep)["lira_online"])


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
    assert s[0] == 1.0 and s[0] > s[~keep[t]].max()


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
        assert row["tpr_at_fpr_1e-3_lo"] <= row["tpr_at_fpr_1e-3_hi"]
        assert not any("." in k for k in row)
    again = evaluate(scores, keep, kind, bootstrap_weights(kind, 50, np.random.default_rng([0, 1])))
    assert again[0] == met
    assert (boot.sum(1) == n).all() and (boot[:, kind == 2].sum(1) == 20).all()  # stratified
    deltas = paired_deltas({"none": {"x": met}, "batchnorm": {"x": met}},
                           {"none": {"x": res}, "batchnorm": {"x": res}})
    assert deltas["batchnorm"]["x"]["ood"] == {"auc": 0.0, "auc_lo": 0.0, "auc_hi": 0.0,
                                               "tpr_at_fpr_1e-3": 0.0,
                                               "tpr_at_fpr_1e-3_lo": 0.0,
                                               "tpr_at_fpr_1e-3_hi": 0.0}
    empty = evaluate(scores, keep, np.zeros(n, np.int8), boot)[0]
    assert empty["flipped"]["auc"] is None and empty["all"]["auc"] == met["all"]["auc"]


# ---------------------------------------------------------------- stage

def test_attack_stage_end_to_end(tmp_path):
    rng = np.random.default_rng(8)
    m, n = 8, 60
    kind = np.repeat([0, 1, 2], [40, 14, 6]).astype(np.int8)
    labels = rng.integers(0, C, n)
    np.savez(tmp_path / "pool.npz", y_train=labels, kind=kind)
    params = {"arms": ["none", "batchnorm"], "pool_size": n,
              "shadow": {"n_models": m, "shards": 2, "shard_ids": [0, 1]},
              "attack": {"bootstrap": 20, "rmia_population": 10}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    for j, arm in enumerate(params["arms"]):
        keep = balanced_keep(rng, m, n)
        phi = rng.normal(size=(m, n, 2)) + (1 + j) * keep[..., None]
        epochs = (rng.normal(size=(m, 3, n)) + keep[:, None], rng.random((m, 3, n)) < 0.9)
        write_shadow(tmp_path / "shadow" / arm, phi, keep, np.arange(m), labels,
                     [[4, 5, 6, 7], [0, 1, 2, 3]], epochs)
    cmd = [sys.executable, str(ROOT / "stages" / "attack.py"), "--params", "params.yaml",
           "--pool", "pool.npz", "--shadow-dir", "shadow", "--metrics", "out/attack.json",
           "--scores-dir", "out/scores", "--roc", "out/roc.csv", "--deltas", "out/deltas.json",
           "--matched", "out/matched.json"]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    matched = json.loads((tmp_path / "out/matched.json").read_text())
    assert set(matched["arms"]) == {"none", "batchnorm"}
    assert len(matched["arms"]["none"]["curve"]) == 3
    assert "matched" in matched["delta_batchnorm_minus_none"]
    met = json.loads((tmp_path / "out/attack.json").read_text())
    assert set(met["none"]) >= {"lira_online", "lira_offline", "lira_online_fixed",
                                "lira_offline_fixed", "rmia"}
    row = met["batchnorm"]["lira_online"]["ood"]
    assert {"auc", "balanced_acc", "tpr_at_fpr_1e-3", "tpr_at_fpr_1e-2", "auc_lo"} <= set(row)
    assert "lira_online" in json.loads((tmp_path / "out/deltas.json").read_text())["batchnorm"]
    with np.load(tmp_path / "out/scores/none.npz") as z:
        assert z["lira_online"].shape == (m, n) and z["mem_score"].shape == (n,)
    (tmp_path / "shadow/none/shard_1.npz").unlink()
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 2 and "shard_1.npz: file not found" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_matched_lira_attacks_each_arm_at_its_matched_epoch():
    """A fast arm reaches the common fit early; it is attacked at that epoch's signals, the
    slow arm at its last epoch, and the final-epoch figures are reported beside them."""
    from bnmem.matched import matched_lira
    rng = np.random.default_rng(5)
    m, n, e = 8, 300, 4
    kind = np.repeat([0, 1, 2], [240, 40, 20]).astype(np.int8)
    fit = {"none": [0.5, 0.6, 0.7, 0.8], "batchnorm": [0.6, 0.85, 0.95, 1.0]}
    leak = {"none": [0.1, 0.2, 0.3, 0.4], "batchnorm": [0.2, 0.5, 1.0, 2.0]}
    arrays = {}
    for arm in fit:
        keep = balanced_keep(rng, m, n)
        phi = np.stack([rng.normal(size=(m, n)) + leak[arm][t] * keep for t in range(e)], 1)
        correct = np.stack([rng.random((m, n)) < fit[arm][t] for t in range(e)], 1)
        arrays[arm] = {"epoch_phi": phi, "epoch_correct": correct, "keep": keep}
    boot = bootstrap_weights(kind, 30, np.random.default_rng(0))
    out = matched_lira(arrays, kind, boot)
    none, bn = out["arms"]["none"], out["arms"]["batchnorm"]
    assert out["target_clean_in_acc"] == pytest.approx(none["curve"][-1]["clean_in_acc"])
    assert none["epoch"] == 4 and bn["epoch"] == 2  # BN's fit passes ~0.8 at epoch 2
    assert bn["clean_in_acc"] >= out["target_clean_in_acc"]
    # the matched attack is the epoch-2 attack, weaker than BN's final one
    assert bn["matched"]["all"]["auc"] == pytest.approx(bn["curve"][1]["auc_lira_online_identity"])
    assert bn["matched"]["all"]["auc"] < bn["final"]["all"]["auc"]
    assert none["matched"] == none["final"]
    d = out["delta_batchnorm_minus_none"]
    assert d["matched"]["flipped"]["auc"] == pytest.approx(
        bn["matched"]["flipped"]["auc"] - none["matched"]["flipped"]["auc"])  # point, no CI
    assert d["matched"]["flipped"]["auc_lo"] is None
    assert d["matched"]["all"]["auc"] == pytest.approx(bn["matched"]["all"]["auc"]
                                                       - none["matched"]["all"]["auc"])
    assert d["final"]["all"]["auc_lo"] <= d["final"]["all"]["auc"] <= d["final"]["all"]["auc_hi"]
