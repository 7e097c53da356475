"""Privacy-utility frontiers between annealed endpoints (bnmem.attack.frontier), where the truth is
known: arms on one leakage-utility curve (BN only fits faster) differ at equal budgets and
not at matched utility; an arm that overtrains is judged by its best run, and flagged."""
import numpy as np
import pytest

from bnmem.core.config import ConfigError, load_config
from bnmem.core.recipes import budget_epochs, budget_recipe
from bnmem.attack.frontier import (
    compare, draw_compare, overtraining, pareto_at, pareto_grid, train_loss,
)
from bnmem.attack.intervals import IntervalPlan


def test_pareto_at_is_the_least_leakage_at_or_above_a_utility():
    u, y = [0.70, 0.80, 0.80], [0.55, 0.60, 0.70]
    assert pareto_at(u, y, 0.75) == pytest.approx(0.575)  # crossing of the first segment
    assert pareto_at(u, y, 0.80) == pytest.approx(0.60)   # the longer run adds leakage only
    assert pareto_at(u, y, 0.60) == pytest.approx(0.55)   # below the range: the best point
    assert np.isnan(pareto_at(u, y, 0.85))                # never reached: no extrapolation
    # a non-monotone curve: utility falls at the last budget, leakage keeps rising
    assert pareto_at([0.6, 0.8, 0.7], [0.5, 0.6, 0.9], 0.75) == pytest.approx(0.575)


def test_pareto_grid_equals_pareto_at():
    rng = np.random.default_rng(1)
    for _ in range(50):
        n = rng.integers(1, 6)
        u, y = rng.random(n), rng.random(n)
        levels = np.concatenate([rng.random(20) * 1.2 - 0.1, u, [np.nan]])
        ref = np.array([pareto_at(u, y, g) for g in levels])
        np.testing.assert_allclose(pareto_grid(u, y, levels), ref, rtol=0, atol=1e-12)


def ends(u, y, fit=None, loss=None):
    """Endpoints of one arm (budget order) with leakage y at held-out accuracy u."""
    fit = fit if fit is not None else [v + 0.05 for v in u]
    loss = loss if loss is not None else [1.0 - v for v in u]
    return [{"out_acc_clean": a, "in_acc_clean": f, "train_loss": lo, "gen_gap": f - a,
             "auc_all": b, "auc_clean": b, "tpr_low_all": b / 10, "fz_flipped": b - 0.5,
             "fz_ood": b - 0.5, "in_acc_flipped": b, "in_acc_ood": b}
            for a, b, f, lo in zip(u, y, fit, loss)]


def curve(u):
    return [0.5 + 2.0 * (v - 0.6) for v in u]  # one leakage-utility law for both arms


def test_fit_speed_alone_differs_at_equal_budgets_not_at_matched_utility():
    """The null 'BN just fits faster': both arms obey one leakage-utility law; BN reaches
    more utility per budget. Equal budgets show a large difference, matched held-out
    accuracy shows none, at the common point and over the overlap."""
    bn_u, none_u = [0.70, 0.74, 0.78, 0.80], [0.62, 0.66, 0.70, 0.76]
    bn, none = ends(bn_u, curve(bn_u)), ends(none_u, curve(none_u))
    assert all(b["auc_all"] - n["auc_all"] > 0.05 for b, n in zip(bn, none))
    r = draw_compare(bn, none, "heldout")
    assert r["level"] == pytest.approx(0.76)
    assert r["auc_all"] == pytest.approx(0.0, abs=1e-12)
    assert r["auc_all_overlap"] == pytest.approx(0.0, abs=1e-12)
    # a real effect: BN leaks 3 points more at every utility -> found at matched utility
    bn_leaky = ends(bn_u, [v + 0.03 for v in curve(bn_u)])
    r = draw_compare(bn_leaky, none, "heldout")
    assert r["auc_all"] == pytest.approx(0.03) and r["auc_all_overlap"] == pytest.approx(0.03)


def test_an_overtraining_arm_is_judged_by_its_best_run_and_flagged():
    """`none` gains no held-out accuracy from 6 to 12 epochs while its AUC rises 4 points:
    its frontier at its top utility is the 6-epoch run, and overtraining() names the step."""
    none = ends([0.70, 0.76, 0.762], [0.55, 0.58, 0.62])
    bn = ends([0.72, 0.78, 0.79], [0.57, 0.60, 0.66])
    r = draw_compare(bn, none, "heldout")
    # common point 0.762: none's least leakage at >= 0.762 is its last run (0.62) or the
    # segment 6 -> 12 at 0.762 (= 0.62): no lower point reaches 0.762
    assert r["level"] == pytest.approx(0.762)
    bn_at = 0.57 + (0.762 - 0.72) / 0.06 * 0.03
    assert r["auc_all"] == pytest.approx(bn_at - 0.62)
    assert overtraining(none, [3, 6, 12]) == [
        {"from": 6, "to": 12, "heldout_gain": pytest.approx(0.002), "auc_gain": pytest.approx(0.04)}]
    assert overtraining(bn, [3, 6, 12]) == [  # +6 AUC points for +1 point of accuracy
        {"from": 6, "to": 12, "heldout_gain": pytest.approx(0.01), "auc_gain": pytest.approx(0.06)}]
    steady = ends([0.60, 0.70, 0.76], [0.52, 0.55, 0.58])  # utility grows with leakage
    assert overtraining(steady, [3, 6, 12]) == []


def test_secondary_criteria_loss_and_gap():
    u = [0.70, 0.74, 0.78]
    a = ends(u, curve(u), fit=[0.72, 0.80, 0.90], loss=[0.9, 0.6, 0.3])
    b = ends(u, curve(u), fit=[0.71, 0.75, 0.80], loss=[1.0, 0.8, 0.6])
    # train loss: a reaches b's best loss (0.6) at its second run, where it leaks less
    r = draw_compare(a, b, "loss")
    assert r["level"] == pytest.approx(0.6)
    assert r["auc_all"] == pytest.approx(curve([0.74])[0] - curve([0.78])[0])
    # gap (fit - held-out): common gap min(0.12, 0.02) = 0.02, interpolated in budget order
    g = draw_compare(a, b, "gap")
    assert g["level"] == pytest.approx(0.02)
    assert g["auc_all"] == pytest.approx(curve([0.70])[0] - curve([0.78])[0])
    assert np.isnan(g["auc_all_overlap"])


def test_compare_intervals_cover_and_name_every_criterion():
    rng = np.random.default_rng(3)
    bn_u, none_u = np.array([0.70, 0.74, 0.78, 0.80]), np.array([0.62, 0.66, 0.70, 0.76])
    draws_a, draws_b = [], []
    for r in range(41):  # row 0 = the point, then bootstrap-like draws
        jit, ea, eb = (0, 0, 0) if r == 0 else rng.normal(0, 0.005, 3)
        draws_a.append(ends(bn_u + jit, [v + ea for v in curve(bn_u + jit)]))
        draws_b.append(ends(none_u - jit, [v + eb for v in curve(none_u - jit)]))
    plan = IntervalPlan("both", 8, {"both": (1, 41)})
    out = compare(draws_a, draws_b, plan)
    assert set(out["criteria"]) == {"heldout", "fit", "loss", "gap"}
    h = out["criteria"]["heldout"]["figures"]["auc_all"]["at_common"]
    assert h["value"] == pytest.approx(0.0, abs=1e-12) and h["lo"] < 0 < h["hi"]
    assert len(out["equal_budget"]) == 4 and out["equal_budget"][0]["auc_all"]["value"] > 0.1
    assert len(out["curve"]["heldout"]) == 21


def test_train_loss_is_cross_entropy():
    logits = np.array([[[[2.0, 0.0, -1.0]]], [[[0.0, 0.0, 0.0]]]])  # [m=2, N=1, Q=1, C=3]
    loss = train_loss(logits, np.array([0]))
    ref = -np.log(np.exp(2.0) / (np.exp(2.0) + 1 + np.exp(-1.0)))
    np.testing.assert_allclose(loss[:, 0], [ref, np.log(3.0)])


def test_budgets_in_params(tmp_path):
    import yaml
    from conftest import ROOT
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["train"].update(epochs=4, warmup_epochs=2, checkpoints=[1])
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(params))
    cfg = load_config(path)
    assert budget_epochs(cfg) == (1, 2)  # 4 >= train.epochs: the 4-epoch run itself
    short = budget_recipe(cfg, 2)
    assert (short.train.epochs, short.train.warmup_epochs, short.train.checkpoints) == (2, 1, ())
    assert short.train.lr == cfg.train.lr and short.shadow == cfg.shadow
    params["shadow"]["budgets"] = [4, 2]
    path.write_text(yaml.safe_dump(params))
    with pytest.raises(ConfigError, match="shadow.budgets"):
        load_config(path)


def test_pareto_source_names_where_the_minimum_comes_from():
    """pareto_source points at the endpoint (i) or segment crossing (i + 0.5) whose value
    pareto_at returns; two endpoints of near-equal utility and very different leakage
    flip the source when the level moves a little (the instability the report flags)."""
    from bnmem.attack.frontier import pareto_at, pareto_source
    rng = np.random.default_rng(3)
    for _ in range(200):
        u, y = np.sort(rng.random(4)), rng.random(4)
        lv = float(rng.uniform(u.min(), u.max()))
        src = pareto_source(u, y, lv)
        i = int(src)
        val = y[i] if src == i else y[i] + (lv - u[i]) / (u[i + 1] - u[i]) * (y[i + 1] - y[i])
        assert val == pytest.approx(pareto_at(u, y, lv), abs=1e-12)
    u, y = np.array([0.815, 0.859, 0.858]), np.array([0.53, 0.59, 0.66])  # memreg's none
    assert pareto_source(u, y, 0.859) == 1.0   # the 10-epoch endpoint itself
    assert pareto_source(u, y, 0.8585) == 0.5  # just below it: the 4 -> 10 crossing
    u2 = np.array([0.815, 0.857, 0.859])  # the 10-epoch model's utility drawn a bit lower
    assert pareto_source(u2, y, 0.858) == 1.5  # now the 10 -> 20 segment's crossing
    assert np.isnan(pareto_source(u, y, 0.9))


def test_diverged_budget_run_is_named_not_blamed_on_a_crash(tmp_path):
    """A shard whose budget run diverged (nan logits): one line naming the model and the
    budget, saying a rerun repeats it (training is seeded) and what to change."""
    from bnmem.core.io import InputError
    from bnmem.attack.frontier import load_budget_logits
    m, n = 4, 6
    bl = np.zeros((m, 2, n, 1, 3), np.float32)
    bl[2, 0, 1, 0, 0] = np.nan  # model id 12 at the first budget
    path = tmp_path / "shard_0.npz"
    np.savez(path, keep=np.zeros((m, n), bool), model_ids=np.arange(10, 14),
             budget_logits=bl, budgets=np.array([1, 2]))
    with pytest.raises(InputError) as err:
        load_budget_logits([path], n, (1, 2))
    msg = str(err.value)
    assert "model 12 at 1 epochs" in msg and "diverge" in msg and "\n" not in msg
    assert "model 13" not in msg and "at 2 epochs" not in msg
    bl[2, 0, 1, 0, 0] = 0.0
    np.savez(path, keep=np.zeros((m, n), bool), model_ids=np.arange(10, 14),
             budget_logits=bl, budgets=np.array([1, 2]))
    assert load_budget_logits([path], n, (1, 2)).shape == (m, 2, n, 1, 3)


def test_frontier_compares_on_forked_workers_equal_one_loop():
    """The attack stage's frontier comparisons on forked processes (stage._forked) give the
    serial loop's results exactly, in the pairs' order."""
    from bnmem.attack.stage import _forked, _frontier_compare
    rng = np.random.default_rng(5)
    u = {"a": np.array([0.70, 0.74, 0.78]), "b": np.array([0.62, 0.68, 0.75]),
         "c": np.array([0.60, 0.71, 0.77])}
    draws = {k: [ends(v + rng.normal(0, 0.004), curve(v) + rng.normal(0, 0.01, 3))
                 for _ in range(21)] for k, v in u.items()}
    plan = IntervalPlan("both", 8, {"both": (1, 21)})
    pairs = [("a", "b"), ("c", "b"), ("c", "a")]
    serial = _forked(_frontier_compare, pairs, (draws, plan), 1)
    assert _forked(_frontier_compare, pairs, (draws, plan), 2) == serial
    assert serial[0] == compare(draws["a"], draws["b"], plan) != serial[1]


def test_frontier_tpr_carries_distinct_sample_support_and_lacks_a_value_without_it():
    """TPR at 1e-3 on the frontier counts distinct samples as the headline does: each
    endpoint gets its support (operating_support on its scores), a common-point difference
    names the endpoints it rests on, and an endpoint whose false positives come from < 10
    distinct samples leaves every TPR that reads it without a value."""
    from bnmem.attack.frontier import apply_support, compare_support, endpoint_support
    from bnmem.attack.roc import operating_support
    rng = np.random.default_rng(7)
    m, n = 16, 2000
    keep = rng.random((m, n)) < 0.5
    fine = rng.normal(size=(m, n)) + 1.5 * keep
    # one sample scores top in every model it is OUT of: its false positives are 1 sample
    lumpy = fine.copy()
    lumpy[:, 0] = np.where(keep[:, 0], -9.0, 9.0)
    lumpy[:, 1:] = np.where(keep[:, 1:], lumpy[:, 1:], -9.0)
    sup = endpoint_support([fine, lumpy], keep)
    ref = operating_support(fine, keep, {"1e-3": 1e-3})["1e-3"]
    assert sup[0]["supported"] and sup[0]["tp_samples"] == ref["tp_samples"] > 0
    assert sup[0]["fp_samples"] == ref["fp_samples"] >= 10
    assert not sup[1]["supported"] and sup[1]["fp_samples"] == 1
    # three endpoints per arm, draw 0's common point between endpoints 1 and 2 of arm a;
    # the resamples move (a's utilities shift), only draw 0 names the endpoints
    bn_u, none_u = [0.70, 0.74, 0.78], [0.62, 0.66, 0.76]
    shift = [0.0] + list(np.linspace(-0.03, 0.03, 10))
    draws_a = [ends([u + d for u in bn_u], curve(bn_u)) for d in shift]
    draws_b = [ends(none_u, curve(none_u)) for _ in shift]
    plan = IntervalPlan("both", 8, {"both": (1, 11)})
    good = [sup[0]] * 3
    out = compare(draws_a, draws_b, plan)
    f = out["criteria"]["heldout"]["figures"]["tpr_low_all"]
    assert f["source_at_common"] == [pytest.approx(1.5), 2.0]
    compare_support(out, good, good)
    assert [[x["endpoint"] for x in r] for r in f["support_at_common"]] == [[1, 2], [2]]
    assert f["at_common"]["value"] is not None and f["overlap"]["value"] is not None
    # the gap criterion names its interpolation position (both arms' gap is 0.05 at every
    # endpoint, so the common gap is read at each arm's first), and is no Pareto choice:
    # no flips
    g = out["criteria"]["gap"]["figures"]["tpr_low_all"]
    assert g["source_at_common"] == [0.0, 0.0]
    assert [[x["endpoint"] for x in r] for r in g["support_at_common"]] == [[0], [0]]
    assert g["pareto_flips"] == [None, None]
    # the report cell: TP samples per arm, or why there is no value
    from bnmem.report.cells import _tp_at_common
    assert _tp_at_common(f["support_at_common"]) == f" (TP: {sup[0]['tp_samples']} / {sup[0]['tp_samples']} samples)"
    # arm a's endpoint 2 unsupported: the common point, the overlap and budget 3 lose TPR
    out = compare(draws_a, draws_b, plan)
    compare_support(out, [sup[0], sup[0], sup[1]], good)
    f = out["criteria"]["heldout"]["figures"]["tpr_low_all"]
    assert f["at_common"]["value"] is None and f["overlap"]["value"] is None
    assert out["criteria"]["heldout"]["figures"]["auc_all"]["at_common"]["value"] is not None
    assert [e["tpr_low_all"]["value"] is None for e in out["equal_budget"]] == [False, False, True]
    assert _tp_at_common(f["support_at_common"]) == " (unsupported: FP from 1 samples)"
    # an unsupported endpoint the common point does not read still empties the overlap
    out = compare(draws_a, draws_b, plan)
    compare_support(out, [sup[1], sup[0], sup[0]], good)
    f = out["criteria"]["heldout"]["figures"]["tpr_low_all"]
    assert f["at_common"]["value"] is not None and f["overlap"]["value"] is None
    # an unsupported arm endpoint's own TPR row
    rows = [{"tpr_low_all": {"value": 0.01, "lo": 0.0, "hi": 0.02}} for _ in range(2)]
    apply_support(rows, [sup[0], sup[1]])
    assert rows[0]["tpr_low_all"]["value"] == 0.01 and rows[1]["tpr_low_all"]["value"] is None
    assert rows[1]["tpr_low_support"]["fp_samples"] == 1


def test_the_flip_note_lists_every_figure_whose_pareto_choice_jumps():
    """The report's note under the frontier table lists, per comparison, the arms whose least
    value at the primary common point comes from another endpoint in >= 10 % of the draws,
    for AUC and both memorization figures (a memorization key with such jumps under-covers on
    real shadows: bench/results/real_shadows_anova.md); 9 % is not listed."""
    import copy
    import json
    from pathlib import Path
    from bnmem.report.sections import _frontier_section
    m = json.loads((Path(__file__).resolve().parents[1] / "results" / "membership.json").read_text())
    m = copy.deepcopy(m)
    for cmp in m["frontier"]["compare"].values():
        for crit in cmp["criteria"].values():
            for f in crit["figures"].values():
                f["pareto_flips"] = [0.0, 0.0]
    figs = m["frontier"]["compare"]["batchnorm_minus_none"]["criteria"]["heldout"]["figures"]
    figs["fz_ood"]["pareto_flips"] = [0.25, 0.09]
    figs["auc_all"]["pareto_flips"] = [0.0, 0.10]
    m["frontier"]["compare"]["batchnorm_minus_none"]["criteria"]["fit"]["figures"]["fz_flipped"][
        "pareto_flips"] = [0.5, 0.5]  # another criterion: not the note's
    note = next(x for x in _frontier_section(m, {}) if x.startswith("Pareto choice"))
    listed = note.rsplit("):", 1)[1]
    assert listed.strip(" .").split("; ") == ["batchnorm - none, AUC all: `none` in 10 %",
                                            "batchnorm - none, FZ OOD: `batchnorm` in 25 %"]
