"""The intervals at matched held-out accuracy (annealed endpoints interpolated by
bnmem.attack.frontier) cover a known truth on simulated runs: a fast, seeded version of
bench/bench_coverage_matched.py (500 runs there, bench/results/coverage_matched.md)."""
import json

import numpy as np
import pytest

from bnmem.attack.coverage_matched import matched_coverage, simulate


def test_simulated_endpoints_rise_in_utility_and_leakage():
    """The simulation's premise: each arm's later endpoints are more useful (held-out
    accuracy up) and leak more, and membership moves members only."""
    kind = np.zeros(400, np.int8)
    kind[:40] = 1
    for rho in ({}, {"arm_rho": 0.3, "end_rho": 0.3}):  # the first design; the measured one
        phi, keep = simulate(16, 400, kind, 3, **rho)
        out = [[float(((phi[j, k, ..., 0] > 0) & ~keep).sum() / (~keep).sum()) for k in range(3)]
               for j in range(2)]
        assert all(a < b for row in out for a, b in zip(row, row[1:])), (rho, out)
        gap = phi[0, 2, ..., 0] - phi[1, 2, ..., 0]  # arm a - arm b at the last endpoint
        if not rho:  # shared noise: non-members differ by the utility shift alone
            assert np.allclose(np.std(gap[~keep]), 0) and np.std(gap[keep]) > 0
        else:  # each arm's own noise: non-members differ too
            assert np.std(gap[~keep]) > 0.5


@pytest.mark.slow  # a simulation study (about 12 s): the full suite, not the edit loop
def test_matched_heldout_intervals_cover_on_simulated_runs():
    res = matched_coverage(20, n=800, draws=20, truth_runs=40, seed=2, arm_rho=0.3, end_rho=0.3,
                           procedures=("mixed",))
    assert res["truth"]["auc_matched"] > 0  # a leaks more at matched utility (the design)
    mixed = res["table"]["mixed"]
    for name in ("auc_matched", "auc_overlap", "fz_flipped_matched", "fz_flipped_overlap",
                 "auc_fit", "auc_fit_overlap", "fz_flipped_fit"):
        assert mixed[name]["runs"] == 20
        assert mixed[name]["coverage"] >= 0.8, (name, mixed[name])



def test_ood_samples_are_hard_and_memorized_and_the_matched_reads_are_simulated():
    """OOD samples (kind 2) sit low and are memorized like flipped ones, so the OOD
    figures the verdicts read have a signal; matched fit and the overlap reads the study
    simulates come out of the same draws as the primary criterion; without OOD samples their
    figures are absent."""
    from bnmem.attack.coverage import EXTRA_FIGURES, FIGURES, draw_figures, sample_kinds
    from bnmem.attack.coverage_matched import FIGURES as MATCHED, _rows
    from bnmem.attack.simulate import synthetic_phi
    kind = sample_kinds(2000, 0.05, 0.01)
    assert (kind == 1).sum() == 100 and (kind == 2).sum() == 20 and kind[100:120].tolist() == [2] * 20
    phi, keep = synthetic_phi(16, 2000, 1, 0.0, 3, arm_effects=(0.6, 0.3), kind=kind, arm_rho=0.3)
    correct = phi[0, ..., 0] > 0
    ood, clean = kind == 2, kind == 0
    assert correct[~keep & ood[None]].mean() < correct[~keep & clean[None]].mean() - 0.2  # hard
    assert correct[keep & ood[None]].mean() > correct[~keep & ood[None]].mean() + 0.1  # memorized
    f = draw_figures(phi, keep, kind, np.ones((1, 8), np.int64), np.ones((1, 2000)),
                     FIGURES + EXTRA_FIGURES)[:, 0]
    fz_ood, acc = f[:, len(FIGURES)], f[:, len(FIGURES) + 1]
    assert fz_ood[0] > fz_ood[1] > 0 and 0.3 < acc[0] < 0.9  # the stronger arm memorizes more
    rows = {}
    for k in (kind, sample_kinds(2000, 0.05)):
        ph, kp = simulate(16, 2000, k, 4, arm_rho=0.3, end_rho=0.3)
        rows[len(np.unique(k))] = dict(zip([m[0] for m in MATCHED],
                                           _rows(ph, kp, k, np.ones((1, 8), np.int64), np.ones((1, 2000)))[0]))
    with_ood, without = rows[3], rows[2]
    assert all(np.isfinite(v) for v in with_ood.values()), with_ood
    assert np.isnan(without["fz_ood_matched"]) and np.isnan(without["fz_ood_fit"])
    # matched fit is read at its own common point, not at the held-out one
    assert without["auc_matched"] != without["auc_fit"]  # two criteria, two common points


def test_a_stored_matched_study_equals_the_unstored_one(tmp_path):
    """The matched study's store (its per-run intervals, kept for the tails) changes no
    number: a stored study, and its resumption, equal the plain one."""
    kw = dict(n=300, draws=6, truth_runs=3, seed=7, arm_rho=0.3, end_rho=0.3, ood=0.02,
              procedures=("mixed",))
    plain = matched_coverage(3, **kw)
    store = tmp_path / "m.jsonl"
    stored = matched_coverage(3, store=store, **kw)
    again = matched_coverage(3, store=store, **kw)  # every unit from the store
    same = lambda a, b: json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # nan too
    for res in (stored, again):
        assert same(res["truth"], plain["truth"]) and same(res["table"], plain["table"])
    assert not same(matched_coverage(3, **{**kw, "seed": 8})["table"], plain["table"])  # can fail


def test_model_sd_moves_only_the_models_share_of_the_variance():
    """simulate(model_sd=...) (the real-ratio study's knob, bench/results/real_ratio_plan.md):
    the default is 0.3, so every earlier stored study reproduces; model_sd sets how much
    each model's logits move as a whole (its shift), and leaves the samples untouched."""
    kind = np.zeros(300, np.int8)
    kind[:30] = 1
    rho = {"arm_rho": 0.3, "end_rho": 0.3}
    base, keep = simulate(16, 300, kind, 5, **rho)
    same, keep2 = simulate(16, 300, kind, 5, model_sd=0.3, **rho)
    assert np.array_equal(base, same) and np.array_equal(keep, keep2)
    # a model's shift is the mean of its logits over non-members, less the samples' mean
    def model_spread(phi):
        out = phi[0, 0, ..., 0]
        m = np.where(~keep, out, np.nan)
        return float(np.std(np.nanmean(m - np.nanmean(m, axis=0), axis=1)))
    spreads = {sd: model_spread(simulate(16, 300, kind, 5, model_sd=sd, **rho)[0])
               for sd in (0.0, 0.05, 0.3)}
    # what is left at model_sd 0 is the per-sample noise averaged over 150 samples (~0.1)
    assert max(spreads[0.0], spreads[0.05]) < 0.15 < 0.25 < spreads[0.3] < 0.45, spreads
    low = simulate(16, 300, kind, 5, model_sd=0.05, **rho)[0]
    # the samples' part (each sample's mean over models) barely moves
    assert np.corrcoef(base[0, 0, ..., 0].mean(0), low[0, 0, ..., 0].mean(0))[0, 1] > 0.95


def test_sample_rho_gives_the_arms_partly_different_memorized_samples():
    """simulate(sample_rho=...): None (the default) and 1 share each sample's membership
    effect between the arms bit for bit; below 1 the arms' per-sample effects decorrelate,
    on members only (non-members do not see the effect)."""
    kind = np.zeros(2000, np.int8)
    kind[:200] = 1
    rho = {"arm_rho": 0.3, "end_rho": 0.3}
    base, keep = simulate(16, 2000, kind, 9, **rho)
    assert np.array_equal(base, simulate(16, 2000, kind, 9, sample_rho=1.0, **rho)[0])

    def effect_corr(phi):  # per-sample member - non-member mean at the last endpoint, a vs b
        eff = [np.nanmean(np.where(keep, phi[j, 2, ..., 0], np.nan), 0)
               - np.nanmean(np.where(~keep, phi[j, 2, ..., 0], np.nan), 0) for j in range(2)]
        return float(np.corrcoef(*eff)[0, 1])
    low = simulate(16, 2000, kind, 9, sample_rho=0.0, **rho)[0]
    assert effect_corr(low) < effect_corr(base) - 0.2, (effect_corr(low), effect_corr(base))
    out = ~keep  # non-members: identical with and without the knob
    assert np.array_equal(low[..., 0][:, :, out], base[..., 0][:, :, out])
    assert not np.array_equal(low[..., 0][:, :, keep], base[..., 0][:, :, keep])
