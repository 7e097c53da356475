"""Intervals with training randomness (bnmem.attack.resample) and matched fit (bnmem.attack.matched):
interpolation, draw bookkeeping, and coverage on synthetic data with a known truth."""
import numpy as np
import pytest

from bnmem.attack.lira import PairSignals, loo_lira
from bnmem.attack.intervals import IntervalPlan, percentile_ci
from bnmem.attack.matched import at_fit, common_fit, epoch_at, fit_grid
from bnmem.attack.resample import arm_draw, compare, draw_designs, draw_plan
from bnmem.attack.roc import roc_points, roc_summary
from bnmem.core.keep import keep_matrix
from bnmem.attack.coverage import coverage_table


def test_at_fit_interpolates_between_epochs():
    fit, val = [0.5, 0.7, 0.9, 0.8], [1.0, 2.0, 4.0, 0.0]
    assert at_fit(fit, val, 0.6) == pytest.approx((1.5, 1.5))
    assert at_fit(fit, val, 0.85) == pytest.approx((3.5, 2.75))  # first crossing, not the dip
    assert at_fit(fit, val, 0.5) == (1.0, 1.0)
    assert np.isnan(at_fit(fit, val, 0.4)[0])  # below the first recorded fit: no extrapolation
    assert np.isnan(at_fit(fit, val, 0.95)[0])  # never reached
    assert common_fit([0.5, 0.8], [0.6, 0.9]) == 0.8
    grid = fit_grid(np.array([0.5, 0.8]), np.array([0.6, 0.9]), 4)
    np.testing.assert_allclose(grid, [0.6, 0.6 + 0.2 / 3, 0.6 + 0.4 / 3, 0.8])


def test_intervals():
    vals = np.arange(101.0)
    assert percentile_ci(vals) == pytest.approx((2.5, 97.5))
    assert percentile_ci(np.r_[vals[:10], [np.nan] * 90], min_share=0.5) == (None, None)
    draws = np.array([1.0, 0.0, 2.0])  # row 0: the point
    lo, hi = IntervalPlan("both", 2, {"both": (1, 3)}).ci(1.0, draws)
    half = 1.96 * np.std([0.0, 2.0], ddof=1) * np.sqrt(2)  # sd x sqrt(P/(P-1))
    assert (lo, hi) == pytest.approx((1 - half, 1 + half))
    # jacksum: the jackknife's (P-1)/P sum of squares plus the samples-only variance
    jack, samp = np.array([0.9, 1.1, 1.0]), np.array([0.8, 1.2])
    plan = IntervalPlan("jacksum", 3, {"jackknife": (1, 4), "samples": (4, 6)})
    lo, hi = plan.ci(1.0, np.r_[1.0, jack, samp], "auc_all")
    v = 2 / 3 * ((jack - jack.mean()) ** 2).sum() + samp.var(ddof=1)
    assert (lo, hi) == pytest.approx((1 - 1.96 * np.sqrt(v), 1 + 1.96 * np.sqrt(v)))
    mixed = IntervalPlan("mixed", 3, {"jackknife": (1, 4), "samples": (4, 6), "pairs": (4, 6)})
    assert mixed.ci(1.0, np.r_[1.0, jack, samp], "auc_all") == (lo, hi)


def _arm(effect, seed, m=12, n=200, e=3):
    rng = np.random.default_rng(seed)
    keep = keep_matrix(m, n, 0)
    phi = rng.normal(size=(m, n, 2)) + effect * keep[..., None]
    ep = np.stack([rng.normal(size=(m, n)) + effect * (k + 1) / e * keep for k in range(e)], 1)
    correct = np.stack([rng.random((m, n)) < 0.5 + 0.15 * k for k in range(e)], 1)
    return {"phi": phi, "keep": keep, "correct": phi[..., 0] > 0, "model_ids": np.arange(m),
            "epoch_phi": ep, "epoch_correct": correct}


def test_draw_zero_is_the_plain_estimate_and_compare_is_paired():
    kind = np.repeat([0, 1, 2], [160, 30, 10]).astype(np.int8)
    arms = {"a": _arm(1.0, 1), "b": _arm(0.3, 2)}
    counts, weights, _ = draw_plan(kind, 6, 20, np.random.default_rng(0))
    assert (counts[0] == 1).all() and (weights[0] == 1).all() and (counts.sum(1) == 6).all()
    draws = {}
    for name, d in arms.items():
        ps = PairSignals.build(d["phi"], d["keep"], d["model_ids"])
        eps = [PairSignals.build(d["epoch_phi"][:, k, :, None], d["keep"], d["model_ids"])
               for k in range(3)]
        draws[name] = [arm_draw(d, ps, eps, c, w, kind, "lira_online_fixed", True)
                       for c, w in zip(counts, weights)]
        plain = loo_lira(d["phi"], d["keep"], d["model_ids"], variants=("lira_online_fixed",))
        auc = float(roc_summary(*roc_points(plain["lira_online_fixed"], d["keep"]))["auc"])
        assert draws[name][0]["auc_all"] == pytest.approx(auc, abs=1e-12)
    out = compare(draws["a"], draws["b"])
    eq = out["equal_epochs"]["auc_all"]
    assert eq["value"] == pytest.approx(draws["a"][0]["auc_all"] - draws["b"][0]["auc_all"])
    assert eq["lo"] < eq["value"] < eq["hi"] and eq["lo"] > 0  # a leaks clearly more
    m = out["matched_fit"]
    assert m["fit"] == pytest.approx(common_fit(draws["a"][0]["epoch"]["fit"],
                                                draws["b"][0]["epoch"]["fit"]))
    assert len(out["curve"]["fit"]) == len(out["curve"]["lo"])
    # the curves recorded at other epochs per arm (shadow.track_at): each arm's matched
    # point is read on its own epochs, positions otherwise
    rec = compare(draws["a"], draws["b"], epochs_at=((1, 2, 5), (2, 4, 8)))["matched_fit"]
    assert rec["epoch_a"] == pytest.approx(epoch_at(m["epoch_a"], (1, 2, 5)))
    assert rec["epoch_b"] == pytest.approx(epoch_at(m["epoch_b"], (2, 4, 8)))
    assert np.isfinite(m["epoch_b"]) and rec["epoch_b"] != m["epoch_b"]


@pytest.mark.slow  # a simulation study (about 20 s): the full suite, not the edit loop
@pytest.mark.parametrize("n, figures", [
    (1400, ("auc_all", "fz_flipped", "tpr_low_all")),  # 11 200 negatives: TPR at 1e-3
    (1400, ("auc_all", "auc_flipped", "fz_ood", "tpr_low_all")),  # a subset AUC: level full
    (12500, ("auc_all", "tpr_low_all", "tpr_vlow_all"))])  # 100 000 negatives: 1e-4 too
def test_simulated_figures_equal_the_reference_draws_to_the_bit(n, figures):
    """coverage.draw_figures (scores and rankings kept across the unresampled draws, the
    per-subset AUCs only when asked for) gives every figure of every design's draws exactly
    as arm_draw does from scratch at level full."""
    from bnmem.attack.coverage import VARIANT, draw_figures, sample_kinds, simulate_run
    kind = sample_kinds(n, 0.1, 0.05)
    phi, keep = simulate_run(16, n, (0.6, 0.3), kind, 11, 0.3)
    counts, weights, _ = draw_designs(kind, 8, 4, np.random.default_rng(2),
                                      ("pairs", "samples", "both", "jackknife"))
    fast = draw_figures(phi, keep, kind, counts, weights, figures)
    ids = np.arange(keep.shape[0])
    for a, p in enumerate(phi):
        data = {"phi": p, "keep": keep, "correct": p[..., 0] > 0, "model_ids": ids}
        ps = PairSignals.build(p, keep, ids)
        ref = [arm_draw(data, ps, [], c, w, kind, VARIANT, True) for c, w in zip(counts, weights)]
        want = np.array([[r.get(f, np.nan) for f in figures] for r in ref])
        np.testing.assert_array_equal(fast[a], want)
        assert np.isfinite(want).mean(axis=0).min() > 0.8  # every figure, in most draws


def test_interval_coverage_on_synthetic_runs():
    """The default procedure (`mixed`) covers the expected value of every figure type in
    >= 85 % of 40 small seeded runs whose arms share 30 % of their model noise, as real
    shadows do (bench/results/noise_structure.md), with narrower AUC intervals than drawing
    pairs and samples together (`both`); the pairs'
    jackknife alone misses the samples' share of the Feldman-Zhang score (below 0.85 where
    mixed covers)."""
    res = coverage_table(40, n=1250, draws=40, truth_runs=60, seed=1, arm_rho=0.3,
                         procedures=("mixed", "both", "jackknife", "jacksum", "pairs_t"))
    mixed, both, jack, js, pt = (res["table"][p] for p in ("mixed", "both", "jackknife",
                                                            "jacksum", "pairs_t"))
    for name, row in mixed.items():
        assert row["coverage"] >= 0.85, (name, row)
    assert mixed["auc_all"]["mean_width"] < 0.9 * both["auc_all"]["mean_width"]
    assert mixed["tpr_low_all"]["mean_width"] == pt["tpr_low_all"]["mean_width"]
    assert mixed["auc_all"]["mean_width"] == js["auc_all"]["mean_width"]
    assert mixed["auc_all_delta"]["mean_width"] == js["auc_all_delta"]["mean_width"]
    assert jack["fz_flipped"]["coverage"] < 0.85 <= mixed["fz_flipped"]["coverage"]


def test_matched_and_equal_auc_measure_the_same_attack():
    """At equal epochs the comparison that matched fit is judged against uses the per-epoch
    attack's last epoch (identity query), so two arms with the same per-epoch curves differ
    by zero at both points, whatever their all-queries AUC."""
    kind = np.zeros(200, np.int8)
    d = _arm(1.0, 3)
    ps = PairSignals.build(d["phi"], d["keep"], d["model_ids"])
    eps = [PairSignals.build(d["epoch_phi"][:, k, :, None], d["keep"], d["model_ids"])
           for k in range(3)]
    counts, weights, _ = draw_plan(kind, 6, 20, np.random.default_rng(1))
    draws = [arm_draw(d, ps, eps, c, w, kind, "lira_online_fixed", True)
             for c, w in zip(counts, weights)]
    shifted = [{**x, "auc_all": x["auc_all"] + 0.1} for x in draws]  # stronger all-query attack
    out = compare(shifted, draws)
    assert out["equal_epochs"]["auc_all"]["value"] == pytest.approx(0.1)
    assert out["equal_epochs"]["auc_identity"]["value"] == 0.0
    assert out["matched_fit"]["auc_identity"]["value"] == 0.0


def test_low_fpr_tpr_only_where_supported():
    """TPR at FPR 1e-3 needs >= 10 false positives' worth of negatives: with 12 models x
    200 samples (1 200 negatives) it is not reported."""
    kind = np.zeros(200, np.int8)
    d = _arm(1.0, 4)
    ps = PairSignals.build(d["phi"], d["keep"], d["model_ids"])
    row = arm_draw(d, ps, [], np.ones(6, np.int64), np.ones(200), kind, "lira_online_fixed", True)
    assert np.isnan(row["tpr_low_all"]) and np.isfinite(row["auc_all"])
    assert "tpr_vlow_all" not in row  # TPR at 1e-4: not even a key below 100 000 negatives


def test_every_row_inherits_the_points_low_fpr_support():
    """16 models x 1 250 samples: 10 000 negatives, so TPR at 1e-3 is supported for the
    point; a delete-4 row (a 4-pair run: 5 000 negatives of its own) estimates that run's
    spread and keeps a TPR, as a bootstrap row does (README *Low FPR*)."""
    kind = np.zeros(1250, np.int8)
    d = _arm(1.0, 5, m=16, n=1250)
    ps = PairSignals.build(d["phi"], d["keep"], d["model_ids"])
    for counts in (np.ones(8, np.int64), np.array([0, 1, 0, 1, 1, 0, 0, 1]),
                   np.array([2, 0, 1, 3, 0, 1, 1, 0])):
        row = arm_draw(d, ps, [], counts, np.ones(1250), kind, "lira_online_fixed", True)
        assert np.isfinite(row["tpr_low_all"]), counts


def test_memoized_rankings_give_the_unmemoized_draws_bit_for_bit():
    """The samples-only rows reuse one sort of the unresampled scores (arm_draw's cache);
    every figure equals a draw computed from scratch, ties included, and a reweighting
    still moves the figures (the reuse is not a stale copy)."""
    kind = np.repeat([0, 1, 2], [160, 30, 10]).astype(np.int8)
    d = _arm(0.8, 3)
    d["phi"] = np.round(d["phi"], 1)  # many tied scores
    d["epoch_phi"] = np.round(d["epoch_phi"], 1)
    ps = PairSignals.build(d["phi"], d["keep"], d["model_ids"])
    eps = [PairSignals.build(d["epoch_phi"][:, k, :, None], d["keep"], d["model_ids"])
           for k in range(3)]
    counts, weights, seg = draw_designs(kind, 6, 6, np.random.default_rng(4),
                                        ("samples", "both"))
    cache: dict = {}
    for c, w in zip(counts, weights):
        memo = arm_draw(d, ps, eps, c, w, kind, "lira_online_fixed", True, cache)
        fresh = arm_draw(d, ps, eps, c, w, kind, "lira_online_fixed", True)
        for key, v in fresh.items():
            got = memo[key]
            if key == "epoch":
                for k in v:
                    np.testing.assert_array_equal(got[k], v[k])
            else:
                assert got == v or (np.isnan(got) and np.isnan(v)), key
    assert "final" in cache and cache["final"][1]  # the rankings were kept and reused
    a, b = (arm_draw(d, ps, eps, counts[i], weights[i], kind, "lira_online_fixed", True,
                     cache)["auc_all"] for i in (0, seg["samples"][0]))
    assert a != b


def test_tpr_at_1e4_in_the_draws_matches_the_plain_roc():
    """From 100 000 negative (model, sample) pairs on, every draw carries TPR at FPR 1e-4;
    draw 0's equals the plain ROC's (the stage's evaluate path), and a model+sample
    draw moves it."""
    m, n = 8, 26_000  # 4 x 26 000 = 104 000 negatives: 10.4 false positives at 1e-4
    kind = np.zeros(n, np.int8)
    rng = np.random.default_rng(5)
    keep = keep_matrix(m, n, 0)
    strong = rng.random(n) < 0.02  # a few samples leak a lot: TPR at 1e-4 well above 0
    phi = rng.normal(size=(m, n, 1)) + (keep * (0.2 + 5.0 * strong))[..., None]
    d = {"phi": phi, "keep": keep, "correct": phi[..., 0] > 0, "model_ids": np.arange(m)}
    ps = PairSignals.build(phi, keep, d["model_ids"])
    counts, weights, _ = draw_plan(kind, m // 2, 2, np.random.default_rng(2))
    rows = [arm_draw(d, ps, [], c, w, kind, "lira_online_fixed", True)
            for c, w in zip(counts, weights)]
    plain = loo_lira(phi, keep, d["model_ids"], variants=("lira_online_fixed",))
    ref = roc_summary(*roc_points(plain["lira_online_fixed"], keep))
    assert rows[0]["tpr_vlow_all"] == pytest.approx(float(ref["tpr_at_fpr_1e-4"]), abs=1e-12)
    assert 0.005 < rows[0]["tpr_vlow_all"] < rows[0]["tpr_low_all"]
    assert rows[1]["tpr_vlow_all"] != rows[0]["tpr_vlow_all"]
    # the null: the same logits with a fake keep mask (no model trained on it) give TPR
    # at 1e-4 near 1e-4, and far below the real one
    fake = keep_matrix(m, n, 99)
    d0 = {**d, "keep": fake}
    null = arm_draw(d0, PairSignals.build(phi, fake, d["model_ids"]), [], counts[0],
                    weights[0], kind, "lira_online_fixed", True)
    assert null["tpr_vlow_all"] < 5e-4 < 0.005 < rows[0]["tpr_vlow_all"]


def test_matched_epoch_is_read_on_the_recorded_epochs():
    """at_fit's fractional position maps to the epochs the curve was recorded at
    (shadow.track_at: checkpoints records 1, 2, 3, 4, 6, 8, 12): halfway between the 6th
    and 7th records is epoch 10, not 6.5; every-epoch records map to themselves."""
    from bnmem.attack.matched import at_fit, epoch_at
    rec = (1, 2, 3, 4, 6, 8, 12)
    fit = np.array([0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9])
    _, pos = at_fit(fit, fit, 0.85)
    assert pos == pytest.approx(6.5) and epoch_at(pos, rec) == pytest.approx(10.0)
    assert epoch_at(1.0, rec) == 1.0 and epoch_at(7.0, rec) == 12.0
    assert epoch_at(3.25, range(1, 13)) == pytest.approx(3.25)
    assert np.isnan(epoch_at(np.nan, rec))


def test_a_stored_study_resumes_to_the_uninterrupted_result(tmp_path):
    """coverage_table with a store (the resumable record of finished units a long study
    writes): a study cut short (its record truncated mid-line, as a kill leaves it) and run
    again gives exactly the uninterrupted study's table and truth; a record of another
    study is refused in one line."""
    import json
    kw = dict(n=300, draws=10, truth_runs=6, seed=3, arm_rho=0.3, procedures=("mixed", "both"))

    def same(a: dict, b: dict) -> bool:  # nan-aware (an unsupported TPR is nan in both)
        return (json.dumps([a["table"], a["truth"]], sort_keys=True)
                == json.dumps([b["table"], b["truth"]], sort_keys=True))
    plain = coverage_table(5, **kw)
    store = tmp_path / "units.jsonl"
    full = coverage_table(5, workers=2, store=store, **kw)
    assert same(full, plain)
    lines = store.read_text().splitlines()
    assert len(lines) == 1 + 6 + 5
    store.write_text("\n".join(lines[:7]) + "\n" + lines[7][:40])  # 6 truths, a cut run line
    again = coverage_table(5, workers=2, store=store, **kw)
    assert same(again, plain)
    # the rerun unit starts its own line: every unit is readable for the next resume
    units = []
    for line in store.read_text().splitlines()[1:]:
        try:
            units.append(json.loads(line))
        except ValueError:  # the cut line itself
            pass
    assert sorted((u["kind"], u["i"]) for u in units) == sorted(
        [("truth", i) for i in range(6)] + [("run", i) for i in range(5)])
    assert not same(again, coverage_table(5, **{**kw, "seed": 5}))  # the check can fail
    # read_store (the readouts' reader) gives the same units, the cut line skipped
    from bnmem.attack.coverage import read_store
    study, have = read_store(store)
    assert study == json.loads(lines[0])["study"]
    assert sorted(have) == sorted([("truth", i) for i in range(6)] + [("run", i) for i in range(5)])
    for u in units:
        got = have[u["kind"], u["i"]]
        want = u["value"] if u["kind"] == "truth" else u["value"]["both"]
        got = got if u["kind"] == "truth" else got["both"]
        assert np.array_equal(got, np.array(want, float), equal_nan=True)
    cut = tmp_path / "cut.jsonl"  # a store whose first line a kill cut: no study, no unit
    cut.write_text('{"stu')
    assert read_store(cut) == (None, {})
    with pytest.raises(ValueError, match="another study"):
        coverage_table(5, store=store, **{**kw, "seed": 4})


def test_tabulate_counts_each_tail_and_its_monte_carlo_range():
    """Two-sided coverage says nothing of one tail: tabulate counts the intervals wholly
    below and wholly above the truth, and gives the coverage's Wilson range."""
    from bnmem.attack.coverage import tabulate, wilson
    done = [{"p": np.array([[lo], [hi]])} for lo, hi in ((0, 1), (2, 3), (-2, -1), (0.4, 0.6))]
    row = tabulate(done, np.array([0.5]), ["x"], ["p"])["p"]["x"]
    assert row["coverage"] == 0.5 and row["runs"] == 4
    assert row["miss_below"] == 0.25 and row["miss_above"] == 0.25  # (-2, -1) and (2, 3)
    lo, hi = wilson(0.95, 500)
    assert 0.926 < lo < 0.928 and 0.965 < hi < 0.967  # about +-1.9 points at 500 runs
    assert wilson(0.5, 4)[0] == pytest.approx(0.1500, abs=1e-3)
