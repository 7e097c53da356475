"""`mixed` picks its interval rule per figure family and read (bnmem.attack.intervals.
MIXED_RULES): the study that chose the rules (bench/matched_rules.py) computes each
candidate exactly as the pipeline does, and every read of a frontier comparison gets the
rule its read names."""
import numpy as np
import pytest

from bnmem.attack.intervals import (STUDIED_ONLY, DELETED_STUDIED, HALVES_FALLBACK,
                                    MIXED_RULES, READS, IntervalPlan, designs, family,
                                    mixed_procedure)
from conftest import load_script

SEGMENTS = {"jackknife": (1, 9), "samples": (9, 109), "pairs": (109, 209), "both": (209, 309)}


def _draws(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.r_[0.02, 0.02 + rng.normal(0, 0.004, 308)]


@pytest.mark.parametrize("rule", ["C0", "C1", "C3", "C6", "C8", "CJ", "CJt"])
def test_the_studys_candidates_are_the_pipelines_procedures(rule):
    study = load_script("bench/matched_rules.py")
    draws = _draws(7)
    proc = study.NAMES[rule]
    plan = IntervalPlan(proc, 8, {d: SEGMENTS[d] for d in designs(proc)})
    var = IntervalPlan("both", 8, SEGMENTS).variances(draws)
    rec = np.array([[draws[0], var["pairs"], var["samples"], var["both"], var["jackknife"],
                     np.nan, np.nan, np.nan]])
    lo, hi = study.interval(rec, rule, 8)
    # half-widths: the study's normal quantile is 1.959964, the pipeline's 1.96 (2e-5 apart)
    ref = plan.ci(float(draws[0]), draws, "x")
    assert hi[0] - draws[0] == pytest.approx(ref[1] - draws[0], rel=1e-4)
    assert draws[0] - lo[0] == pytest.approx(draws[0] - ref[0], rel=1e-4)
    other = IntervalPlan("samples", 8, SEGMENTS).ci(float(draws[0]), draws, "x")
    assert hi[0] - draws[0] != pytest.approx(other[1] - draws[0], rel=1e-4)  # it can fail


@pytest.mark.parametrize("named", [None, "delete4_halves"])
def test_mixed_reads_every_family_and_read_from_its_rule(monkeypatch, named):
    """Each (family, read) reads its rule; the real-shadow rules read only where studied (the
    delete-d rule: the AUC difference at the common point, over the overlap and at equal
    budgets; jacksum_s: memorization at the common point) are read by the figures they were
    studied on and their fallbacks by the others; the common point's AUC rule is
    delete4_halves_s since the eleventh plan, and named delete4_halves (its rule before the
    tenth) the mechanism is read there too."""
    from bnmem.attack import intervals
    if named:
        monkeypatch.setitem(intervals.MIXED_RULES, ("auc", "common"), named)
    draws = np.r_[_draws(8), 0.02 + np.random.default_rng(18).normal(0, 0.004, 128)]
    SEGMENTS = {**globals()["SEGMENTS"], "halves": (309, 409), "delete4": (409, 437)}
    mixed = IntervalPlan("mixed", 8, {d: SEGMENTS[d] for d in designs("mixed")})
    seen = set()
    for fig, fam in (("auc_all", "auc"), ("auc_clean", "auc"), ("auc_all/heldout", "auc"),
                     ("fz_ood", "mem"), ("fz_ood/fit", "mem"),
                     ("in_acc_flipped", "mem"), ("tpr_low_all", "tpr"), ("tpr_vlow_all", "tpr"),
                     ("out_acc_clean", "other"), ("gen_gap", "other")):
        assert family(fig) == fam
        for read in READS:
            proc = MIXED_RULES[(fam, read)]
            if proc in STUDIED_ONLY and fig not in DELETED_STUDIED.get((fam, read), ()):
                proc = HALVES_FALLBACK[(fam, read)]
            tagged = fig if read == "one" else f"{fig}@{read}"
            assert mixed_procedure(tagged) == proc
            seen.add(proc)
            ref = IntervalPlan(proc, 8, {d: SEGMENTS[d] for d in designs(proc)})
            assert mixed.ci(0.02, draws, tagged) == ref.ci(0.02, draws, "x")
    # the delete-d rule is read where it was studied (and only there: the loop above)
    assert "delete4_halves" in seen and mixed_procedure("auc_all@equal") == "delete4_halves"
    assert mixed_procedure("auc_all/heldout@common") == (named or "delete4_halves_s")  # the eleventh plan's
    assert named or "delete4_halves_s" in seen
    assert mixed_procedure("auc_all@common") == HALVES_FALLBACK[("auc", "common")] == "jacksum"
    assert "jacksum_s" in seen and mixed_procedure("fz_ood/fit@common") == "jacksum_s"  # the ninth plan's
    with pytest.raises(ValueError, match="auc_all@matched"):
        mixed_procedure("auc_all@matched")


def test_frontier_reads_are_tagged_with_their_read():
    """frontier.compare's common-point, overlap and equal-budget intervals are those of the
    rule for that read: a rule table whose reads differ shows it (each read its own
    procedure, so a read tagged wrongly gets another's interval)."""
    from bnmem.attack import frontier, intervals
    rng = np.random.default_rng(3)

    def arm(shift):
        return [[{"out_acc_clean": u + d * 0.01, "in_acc_clean": u + 0.05, "train_loss": 1 - u,
                  "gen_gap": 0.05, **{f: 0.5 + u / 4 + shift + rng.normal(0, 0.01)
                                      for f in frontier.FIGURES}}
                 for u in (0.6, 0.7, 0.8)] for d in range(21)]
    a, b = arm(0.02), arm(0.0)
    plan = IntervalPlan("mixed", 4, {"jackknife": (1, 5), "samples": (5, 13),
                                     "pairs": (13, 21)})
    old = dict(intervals.MIXED_RULES)
    try:
        for fam in ("auc", "mem", "tpr", "other"):
            intervals.MIXED_RULES.update({(fam, "one"): "jacksum", (fam, "equal"): "samples",
                                          (fam, "common"): "jackknife", (fam, "overlap"): "pairs"})
        out = frontier.compare(a, b, plan)
    finally:
        intervals.MIXED_RULES.clear()
        intervals.MIXED_RULES.update(old)
    rows = [frontier.draw_compare(x, y, "heldout") for x, y in zip(a, b)]
    for read, proc, vals in (("common", "jackknife", [r["auc_all"] for r in rows]),
                             ("overlap", "pairs", [r["auc_all_overlap"] for r in rows])):
        ref = IntervalPlan(proc, 4, {proc: plan.segments[proc]}).summary(vals, "x")
        got = out["criteria"]["heldout"]["figures"]["auc_all"]["at_common" if read == "common"
                                                               else "overlap"]
        assert (got["lo"], got["hi"]) == pytest.approx((ref["lo"], ref["hi"]), rel=1e-12)
        assert got["rule"] == proc                            # the record names its rule
    eq = [x[1]["fz_ood"] - y[1]["fz_ood"] for x, y in zip(a, b)]
    ref = IntervalPlan("samples", 4, {"samples": plan.segments["samples"]}).summary(eq, "x")
    got = out["equal_budget"][1]["fz_ood"]
    assert (got["lo"], got["hi"]) == pytest.approx((ref["lo"], ref["hi"]), rel=1e-12)


REAL = {"halves": "lean", "delete4": "lean"}  # delete4_halves reads all samples' AUC alone


D4 = {("auc", "common"): "delete4_halves"}  # the real-shadow rule (in use since the seventh pool)
NO_D4 = {("auc", "common"): "jacksum", ("auc", "equal"): "jacksum",
         ("auc", "overlap"): "both"}  # the rules before it (the overlap's before the eighth pool)


@pytest.mark.parametrize("change, level", [
    ({}, {"jackknife": "full", "samples": "full", "pairs": "lean", "both": "endpoints", **REAL}),
    (NO_D4, {"jackknife": "full", "samples": "full", "pairs": "lean", "both": "endpoints"}),
    ({**NO_D4, ("auc", "common"): "pairs_t"},  # pairs: TPR and a two-run AUC read; no delete-4 rule
     {"jackknife": "full", "samples": "full", "pairs": "endpoints", "both": "endpoints"}),
    ({("auc", "equal"): "both", **D4},  # auc_identity@equal is the per-epoch curve's last epoch
     {"jackknife": "full", "samples": "full", "pairs": "lean", "both": "full", **REAL}),
    ({("mem", "one"): "both", **D4},  # the per-epoch curve reads it
     {"jackknife": "full", "samples": "full", "pairs": "lean", "both": "full", **REAL}),
    # TPR alone: no curve; the per-subset AUCs only for the overlap's fallback, `both`
    ({("tpr", "one"): "both", ("auc", "overlap"): "jacksum", **D4},
     {"jackknife": "full", "samples": "full", "pairs": "lean", "both": "endpoints", **REAL}),
    # no halves or delete-4 rule: the joint draws only for the overlap's fallback
    ({**NO_D4, ("auc", "overlap"): "jacksum"},
     {"jackknife": "full", "samples": "full", "pairs": "lean", "both": "endpoints"}),
])
def test_row_levels_follow_what_each_design_is_read_for(change, level):
    """A design's rows skip the per-epoch figures (endpoints) only if no rule that reads the
    curve uses them (one-run rules but TPR's, AUC at equal epochs), and the per-subset AUCs
    too (lean) only if no AUC rule of any read does. Expected levels written out by hand."""
    from bnmem.attack import intervals
    old = dict(intervals.MIXED_RULES)
    try:
        intervals.MIXED_RULES.update(change)
        assert intervals.design_levels() == level
        assert intervals.lean_designs() == tuple(d for d, lv in level.items() if lv == "lean")
    finally:
        intervals.MIXED_RULES.clear()
        intervals.MIXED_RULES.update(old)


@pytest.mark.parametrize("change", [
    {},  # today's rules: joint rows at endpoints level, pairs rows lean
    {("auc", "common"): "pairs_t"},  # pairs rows at endpoints level
    {("auc", "equal"): "both", ("auc", "overlap"): "jacksum"},  # joint rows read by the curve
    {("tpr", "common"): "both", ("auc", "overlap"): "jacksum",
     ("auc", "common"): "jacksum"},  # pairs rows lean (TPR only); joint rows the fallback's
])
def test_the_stages_row_levels_leave_every_interval_as_full_rows_give_it(change):
    """The attack stage's bootstrap with each design at its level (design_levels) gives every
    interval exactly as with every row computed in full: a level only drops figures no rule
    of that design reads (today's rules and two others that put designs at other levels)."""
    from bnmem.attack import intervals
    from bnmem.attack import stage
    from bnmem.core.config import config_from_dict
    from bnmem.core.keep import keep_matrix
    rng = np.random.default_rng(12)
    m, n, e = 16, 400, 3
    kind = np.zeros(n, np.int8)
    kind[:15], kind[15:21] = 1, 2
    keep = keep_matrix(m, n, 0)
    cfg = config_from_dict({"arms": ["none", "batchnorm"], "pool_size": n,
                            "shadow": {"n_models": m, "budgets": [1, 2], "workers": 1},
                            "attack": {"model_bootstrap": 20}})
    data = {}
    for j, arm in enumerate(cfg.arms):
        def arm_data(shift):
            phi = rng.normal(size=(m, n, 1)) + shift * keep[..., None]
            return {"phi": phi, "keep": keep, "correct": phi[..., 0] > 0.3 - 0.1 * shift,
                    "model_ids": np.arange(m), "loss": rng.random((m, n))}
        d = arm_data(0.8 + 0.4 * j)
        ep = rng.normal(size=(m, e, n)) + (0.5 + 0.3 * j) * keep[:, None]
        d.update({"epoch_phi": ep, "epoch_correct": ep > 0.2, "epochs": np.arange(1, e + 1),
                  "budgets": [dict(arm_data(s), epoch_phi=None, epoch_correct=None)
                              for s in (0.3 + 0.2 * j, 0.5 + 0.3 * j)]})
        data[arm] = d
    old = dict(intervals.MIXED_RULES)
    try:
        intervals.MIXED_RULES.update(change)
        levels = stage.design_levels()
        assert set(levels.values()) - {"full"}, "some design is read below full"
        got = stage._resampled(cfg, data, kind, "lira_online_fixed")
        stage.design_levels = lambda: {d: "full" for d in levels}
        ref = stage._resampled(cfg, data, kind, "lira_online_fixed")
    finally:
        stage.design_levels = intervals.design_levels
        intervals.MIXED_RULES.clear()
        intervals.MIXED_RULES.update(old)

    def bounds(x, path=""):
        if isinstance(x, dict):
            if "lo" in x and "hi" in x:
                yield path, (x.get("value"), x["lo"], x["hi"])
            for k, v in x.items():
                if k != "sd":
                    yield from bounds(v, f"{path}/{k}")
        elif isinstance(x, list):
            for i, v in enumerate(x):
                yield from bounds(v, f"{path}[{i}]")
    mine, full = dict(bounds(got)), dict(bounds(ref))
    assert mine.keys() == full.keys() and len(mine) > 50
    # the reads the lower levels serve have intervals here (so a level that dropped them fails)
    served = [k for k in mine if "/heldout/" in k and k.endswith(
        ("auc_clean/at_common", "auc_clean/overlap"))]
    served += [k for k in mine if k.endswith("equal_epochs/auc_identity")]
    assert served and all(mine[k][1] is not None for k in served)
    assert mine == full


def test_equal_epoch_differences_of_the_stage_are_read_at_equal():
    """The attack stage's paired differences at equal epochs (resample.compare) take the
    "equal" rule, not one arm's."""
    from bnmem.attack import intervals
    from bnmem.attack.resample import compare
    rng = np.random.default_rng(5)
    a = [{"auc_all": 0.6 + rng.normal(0, 0.01), "fz_ood": 0.3 + rng.normal(0, 0.02)}
         for _ in range(21)]
    b = [{"auc_all": 0.55 + rng.normal(0, 0.01), "fz_ood": 0.2 + rng.normal(0, 0.02)}
         for _ in range(21)]
    plan = IntervalPlan("mixed", 4, {"jackknife": (1, 5), "samples": (5, 13), "pairs": (13, 21)})
    old = dict(intervals.MIXED_RULES)
    try:
        intervals.MIXED_RULES.update({("auc", "one"): "jacksum", ("auc", "equal"): "pairs",
                                      ("mem", "one"): "jacksum", ("mem", "equal"): "samples"})
        out = compare(a, b, plan=plan)["equal_epochs"]
    finally:
        intervals.MIXED_RULES.clear()
        intervals.MIXED_RULES.update(old)
    for key, proc in (("auc_all", "pairs"), ("fz_ood", "samples")):
        vals = [x[key] - y[key] for x, y in zip(a, b)]
        ref = IntervalPlan(proc, 4, {proc: plan.segments[proc]}).summary(vals, "x")
        assert (out[key]["lo"], out[key]["hi"]) == pytest.approx((ref["lo"], ref["hi"]), rel=1e-12)
        assert out[key]["rule"] == proc
        one = IntervalPlan("jacksum", 4, plan.segments).summary(vals, "x")
        assert (out[key]["lo"], out[key]["hi"]) != pytest.approx((one["lo"], one["hi"]), rel=1e-6)


@pytest.mark.parametrize("rule", ["sum", "jacksum", "twoway", "both"])
def test_tpr_rule_above_the_simulated_pair_count(monkeypatch, rule):
    """TPR takes TPR_RULE_MANY_PAIRS only above 8 pairs (bench/results/tpr32_rules_plan.md);
    every other family keeps its rule, and an interval at 32 pairs is that rule's."""
    from bnmem.attack import intervals
    monkeypatch.setattr(intervals, "TPR_RULE_MANY_PAIRS", rule)
    # a real-shadow rule named (none is today) so that its 8-pairs-only reading can fail
    monkeypatch.setitem(intervals.MIXED_RULES, ("auc", "common"), "delete4_halves")
    assert intervals.mixed_procedure("auc_all/heldout@common", 8) == "delete4_halves"
    assert intervals.mixed_procedure("tpr_low_all", 8) == MIXED_RULES[("tpr", "one")]
    assert intervals.mixed_procedure("tpr_low_all") == MIXED_RULES[("tpr", "one")]
    for read in READS:
        assert intervals.mixed_procedure(f"tpr_vlow_all@{read}", 32) == rule
        assert intervals.mixed_procedure(f"auc_all/heldout@{read}", 32) == (
            intervals.HALVES_FALLBACK.get(("auc", read), MIXED_RULES[("auc", read)])
            )  # the real-shadow rules: 8 pairs only
    var = {"pairs": 4.0, "samples": 1.0, "both": 3.0, "jackknife": 5.0}
    seg = {d: (0, 1) for d in designs(rule)}
    got = IntervalPlan("mixed", 32, seg).ci_from(0.5, var, "tpr_low_all")
    want = IntervalPlan(rule, 32, seg).ci_from(0.5, var, "tpr_low_all")
    assert got == want and got != IntervalPlan("pairs_t", 32, seg).ci_from(0.5, var)
