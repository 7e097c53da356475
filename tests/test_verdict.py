"""Every branch of the verdict rule (bnmem.report.verdict) and the claims table built on it."""
import numpy as np
import pytest

from bnmem.report.summary import claims
from bnmem.report.verdict import (
    DISAGREE, EQUAL_ONLY, EQUAL_UNMATCHED, INCONCLUSIVE, NOT_MEASURED, NOT_REPRODUCED,
    NOT_TESTABLE, REPRODUCED, REVERSED, REVERSED_UTILITY, Evidence, holm, holm_adjust, judge,
    judge_criteria, judge_share, p_values,
)


def ev(lo, hi, training=True):
    return Evidence((lo + hi) / 2, lo, hi, training)


def est3(v, lo, hi, training=True):
    return Evidence(v, lo, hi, training)


@pytest.mark.parametrize("equal,matched,direction,threshold,expected", [
    (ev(0.1, 0.2), ev(0.05, 0.1), 1, 0.0, REPRODUCED),          # matched interval above 0
    (ev(0.1, 0.2), ev(-0.01, 0.06), 1, 0.0, EQUAL_ONLY),        # matched < half of 0.15
    (ev(0.1, 0.2), ev(-0.01, 0.1), 1, 0.0, INCONCLUSIVE),       # matched reaches past half
    (ev(0.1, 0.2), ev(-0.1, -0.02), 1, 0.0, REVERSED),          # matched contradicts: not "equal only"
    (ev(0.1, 0.2), None, 1, 0.0, EQUAL_UNMATCHED),              # matched not measured
    (ev(-0.1, 0.2), ev(-0.1, -0.02), 1, 0.0, REVERSED),         # matched below 0
    (ev(-0.3, -0.2), None, 1, 0.0, NOT_REPRODUCED),             # equal epochs decides alone
    (ev(-0.1, 0.2), ev(-0.1, 0.1), 1, 0.0, INCONCLUSIVE),       # both straddle
    (ev(0.05, 0.2), ev(0.02, 0.06), 1, 0.04, EQUAL_ONLY),       # threshold 4 points: half-way 0.0825
    (ev(0.05, 0.2), ev(0.045, 0.1), 1, 0.04, REPRODUCED),
    (ev(0.0, 0.2), ev(0.0, 0.035), 1, 0.04, NOT_REPRODUCED),    # whole interval < 4 points, not < 0
    (ev(-0.2, -0.1), ev(-0.2, -0.05), -1, 0.0, REPRODUCED),     # claimed decrease
    (ev(-0.2, -0.1), ev(-0.06, 0.02), -1, 0.0, EQUAL_ONLY),
    (ev(-0.2, -0.1), ev(0.01, 0.05), -1, 0.0, REVERSED),
    (ev(0.1, 0.2), ev(0.1, 0.2, training=False), 1, 0.0, EQUAL_UNMATCHED),  # samples-only
    (ev(0.1, 0.2), Evidence(0.03, None, None, True), 1, 0.0, EQUAL_UNMATCHED),  # no interval
    (ev(0.1, 0.2, False), ev(0.1, 0.2, False), 1, 0.0, INCONCLUSIVE),  # samples only: never
    (ev(-0.3, -0.2, False), None, 1, 0.0, INCONCLUSIVE),
    (Evidence(0.1, None, None, True), None, 1, 0.0, INCONCLUSIVE),  # no interval
    (None, None, 1, 0.0, NOT_MEASURED),
    # the cases of the frontiers review (7fd2ad8), points as fractions:
    # full-scale OOD memorization: equal epochs above 0, matched fit entirely below
    (est3(0.20, 0.10, 0.30), est3(-0.0186, -0.0317, -0.0056), 1, 0.0, REVERSED),
    # default OOD memorization +55 [+37.3, +72.7] vs matched +11.7 [-4.8, +28.3]: too wide
    (est3(0.55, 0.3729, 0.7271), est3(0.1174, -0.0481, 0.2830), 1, 0.0, INCONCLUSIVE),
    # default AUC >= 4 points: matched -1.97 [-4.08, +0.14] lies below 4 points
    (est3(0.1762, 0.1512, 0.2012), est3(-0.0197, -0.0408, 0.0014), 1, 0.04, NOT_REPRODUCED),
])
def test_judge(equal, matched, direction, threshold, expected):
    assert judge(equal, matched, direction, threshold) == expected


def test_ratio_claims_reverse_around_one():
    """A ratio claim (threshold = null = 1): below 1 at matched fit is the opposite effect."""
    assert judge(ev(1.5, 2.0), ev(0.7, 0.9), 1, 1.0, null=1.0) == REVERSED
    assert judge(ev(1.5, 2.0), ev(0.9, 1.15), 1, 1.2, null=1.0) == NOT_REPRODUCED


def test_judge_share():
    assert judge_share(3, 4, n_models=3) == REPRODUCED
    assert judge_share(1, 4, n_models=3) == NOT_REPRODUCED
    assert judge_share(2, 4, n_models=3) == INCONCLUSIVE  # a tie
    assert judge_share(3, 4) == INCONCLUSIVE  # one model: a description, no training randomness
    assert judge_share(0, 0) == NOT_MEASURED


def test_holm_adjusts_the_family():
    """Holm-Bonferroni: adjusted p is monotone in the sorted order and (m - rank) x p;
    a verdict resting on an interval that only clears alone becomes inconclusive."""
    np.testing.assert_allclose(holm_adjust([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02])
    strong = p_values(ev(0.10, 0.20), 1, 0.0)   # z ~ 5.9: survives any small family
    weak = p_values(ev(0.001, 0.2), 1, 0.0)     # just clears alone (p ~ 0.024)
    assert strong[0] < 1e-6 and 0.02 < weak[0] < 0.025
    out = holm([REPRODUCED, REPRODUCED, INCONCLUSIVE], [strong[0], weak[0], 0.5],
               [strong[1], weak[1], 0.5])
    assert out == [REPRODUCED, INCONCLUSIVE, INCONCLUSIVE]
    assert holm([REPRODUCED], [weak[0]], [weak[1]]) == [REPRODUCED]  # a family of one


def test_claims_follow_the_evidence():
    """A run where BN leaks more only at equal epochs reads 'at equal epochs only'."""
    def est(v, lo, hi):
        return {"value": v, "lo": lo, "hi": hi}
    bn = {"equal_epochs": {"auc_identity": est(0.17, 0.14, 0.19), "auc_clean": est(0.16, 0.13, 0.18),
                           "fz_flipped": est(0.6, 0.5, 0.7), "fz_ood": est(0.5, 0.3, 0.7)},
          "matched_fit": {"auc_identity": est(-0.02, -0.04, 0.005),
                          "fz_flipped": est(0.03, 0.01, 0.06), "fz_ood": est(0.1, -0.03, 0.27)}}
    reg = {"equal_epochs": {"fz_flipped": est(-0.5, -0.6, -0.4), "out_acc_clean": est(0.0, -0.02, 0.02)},
           "matched_fit": {"fz_flipped": est(-0.02, -0.05, 0.01)}}
    membership = {"variant": "lira_online_fixed",
                  "compare": {"batchnorm_minus_none": bn, "batchnorm_reg_minus_batchnorm": reg}}
    grads = {"batchnorm_minus_none_flipped": {"equal_epochs": est(1.9, 1.5, 2.4),
                                              "matched_fit": est(1.2, 0.9, 1.5)}}
    gamma = {"n_layers_majority_above_1": 2, "n_layers": 4}
    rows = {r["claim"][:30]: r for r in claims(membership, grads, gamma, None, 0.05, 0.01)}
    verdicts = [r["verdict"] for r in rows.values()]
    assert verdicts == [REPRODUCED,        # flipped memorization: matched interval > 0
                        INCONCLUSIVE,      # OOD: matched straddles, reaches past half of 0.5
                        NOT_REPRODUCED,    # AUC >= 4 points: matched interval below 4 points
                        EQUAL_UNMATCHED,   # clean AUC: no matched figure
                        INCONCLUSIVE,      # gradients: samples-only intervals
                        NOT_MEASURED,      # OOD gradients absent
                        INCONCLUSIVE,      # gamma: 2 of 4 layers of one model
                        EQUAL_ONLY,        # regularizer: memorization cut at equal epochs only
                        INCONCLUSIVE]      # accuracy within 1 point: interval reaches -2
    assert [r["verdict_holm"] for r in rows.values()][:3] == [INCONCLUSIVE, INCONCLUSIVE,
                                                              NOT_REPRODUCED]
    first = next(iter(rows.values()))
    assert first["matched_fit"]["interval"] == "models+samples" and first["judged_at"] == "matched fit (within-run epochs)"


def test_an_arm_that_did_not_fit_makes_its_comparisons_not_evidence():
    """The fit rule in every report: `none` at clean-train accuracy 0.147 (a user's audit
    where two arms never trained) turns every BN - none claim into 'not evidence', in both
    verdict columns, while the regularizer's claims against BN keep their verdicts."""
    def est(v, lo, hi):
        return {"value": v, "lo": lo, "hi": hi}
    bn = {"equal_epochs": {"fz_flipped": est(0.6, 0.5, 0.7)},
          "matched_fit": {"fz_flipped": est(0.3, 0.2, 0.4)}}
    reg = {"equal_epochs": {"fz_flipped": est(-0.5, -0.6, -0.4)},
           "matched_fit": {"fz_flipped": est(-0.3, -0.4, -0.2)}}
    membership = {"variant": "lira_online_fixed",
                  "compare": {"batchnorm_minus_none": bn, "batchnorm_reg_minus_batchnorm": reg}}
    fit = {"none": 0.147, "batchnorm": 1.0, "batchnorm_reg": 0.99}
    rows = claims(membership, {}, None, None, 0.05, 0.01, fit, 0.8)
    by = {r["claim"][:20]: r for r in rows}
    flipped = by["BN memorizes flipped"]
    assert flipped["verdict"].startswith("not evidence (arm none did not fit: clean-train accuracy 0.147")
    assert flipped["verdict_holm"] == flipped["verdict"]
    assert by["The gamma/sigma regu"]["verdict"] == REPRODUCED
    ok = {r["claim"][:20]: r for r in claims(membership, {}, None, None, 0.05, 0.01,
                                             {**fit, "none": 0.9}, 0.8)}
    assert ok["BN memorizes flipped"]["verdict"] == REPRODUCED


@pytest.mark.parametrize("primary,others,expected,disagree", [
    # the primary alone decides when the others agree or cover the threshold
    (ev(0.01, 0.05), {"fit": ev(0.02, 0.04), "gap": ev(-0.01, 0.03)}, REPRODUCED, []),
    # another criterion entirely on the other side: inconclusive, not the favourable word
    (ev(0.01, 0.05), {"fit": ev(-0.05, -0.01), "gap": ev(-0.01, 0.03)}, DISAGREE,
     ["fit", "primary"]),
    # two secondary criteria contradict each other while the primary covers 0
    (ev(-0.01, 0.05), {"fit": ev(0.01, 0.04), "loss": ev(-0.04, -0.01)}, DISAGREE,
     ["fit", "loss"]),
    # the full-scale OOD case: equal epochs above 0, matched held-out accuracy below
    (est3(-0.0186, -0.0317, -0.0056), {"fit": ev(-0.03, -0.01)}, REVERSED_UTILITY, []),
    # "at equal epochs only" while another matched criterion says beyond: disagree
    (ev(-0.01, 0.06), {"fit": ev(0.02, 0.2)}, DISAGREE, ["fit", "primary"]),
    (ev(-0.01, 0.06), {"fit": ev(-0.01, 0.2)}, EQUAL_ONLY, []),
    # no primary interval: the equal-epoch rule as before, others cannot make it definite
    (None, {"fit": ev(0.02, 0.04)}, EQUAL_UNMATCHED, []),
    # samples-only secondary evidence never counts
    (ev(0.01, 0.05), {"fit": ev(-0.05, -0.01, training=False)}, REPRODUCED, []),
])
def test_judge_criteria(primary, others, expected, disagree):
    verdict, names = judge_criteria(ev(0.1, 0.2), primary, others, 1, 0.0)
    assert verdict == expected and names == disagree


def test_holm_keeps_a_reversal_at_matched_utility_only_if_supported():
    strong, weak = est3(-0.05, -0.07, -0.03), est3(-0.01, -0.02, -0.0001)
    _, s1 = p_values(strong, 1, 0.0)
    _, s2 = p_values(weak, 1, 0.0)
    assert s2 < 0.025  # alone, the weak reversal would stand; in a family of three it cannot
    assert holm([REVERSED_UTILITY, REVERSED_UTILITY, INCONCLUSIVE], [1, 1, 1], [s1, s2, 1]) == [
        REVERSED_UTILITY, INCONCLUSIVE, INCONCLUSIVE]


def test_claims_use_the_frontier_as_primary():
    """With annealed endpoints, claims are judged at matched held-out accuracy; the
    within-run matched fit (which said 'reproduced' here) is a secondary view only."""
    def est(v, lo, hi):
        return {"value": v, "lo": lo, "hi": hi}

    def fr(primary, fit):
        figs = lambda p: {f: {"at_common": p, "overlap": p} for f in
                          ("auc_all", "auc_clean", "fz_flipped", "fz_ood", "tpr_low_all")}
        return {"criteria": {"heldout": {"level": 0.76, "figures": figs(primary)},
                             "fit": {"level": 0.8, "figures": figs(fit)},
                             "loss": {"level": 0.6, "figures": figs(est(None, None, None))},
                             "gap": {"level": 0.05, "figures": figs(primary)}}}
    bn = {"equal_epochs": {"auc_all": est(0.17, 0.14, 0.19), "auc_clean": est(0.16, 0.13, 0.18),
                           "fz_flipped": est(0.6, 0.5, 0.7), "fz_ood": est(0.5, 0.3, 0.7)},
          "matched_fit": {"auc_identity": est(0.08, 0.06, 0.1), "fz_flipped": est(0.03, 0.01, 0.06),
                          "fz_ood": est(0.1, 0.05, 0.27)}}
    membership = {"variant": "lira_online_fixed", "compare": {"batchnorm_minus_none": bn},
                  "frontier": {"compare": {"batchnorm_minus_none": fr(est(-0.02, -0.04, -0.005),
                                                                       est(-0.01, -0.03, 0.01))}}}
    rows = claims(membership, {}, None, None, 0.05, 0.01)
    first = rows[0]
    assert first["judged_at"].startswith("matched held-out accuracy")
    assert first["verdict"] == REVERSED_UTILITY  # FZ flipped lower for BN at matched utility
    assert rows[2]["verdict"] == REVERSED_UTILITY  # AUC: entirely below 0, not only below 4 points
    assert first["criteria"]["fit"]["interval"] == "models+samples"
    # the fit criterion lying above 0 contradicts the primary: inconclusive
    membership["frontier"]["compare"]["batchnorm_minus_none"] = fr(est(-0.02, -0.04, -0.005),
                                                                   est(0.02, 0.01, 0.03))
    rows = claims(membership, {}, None, None, 0.05, 0.01)
    assert rows[0]["verdict"] == DISAGREE
    assert rows[0]["disagree"] == ["fit", "fit_overlap", "heldout_overlap", "primary"]
    # train loss and gap are descriptive: contradicting the primary changes nothing
    crit = membership["frontier"]["compare"]["batchnorm_minus_none"]["criteria"]
    crit["fit"] = fr(est(-0.02, -0.04, -0.005), est(-0.02, -0.04, -0.005))["criteria"]["fit"]
    crit["gap"] = fr(est(0.02, 0.01, 0.03), est(0.0, 0.0, 0.0))["criteria"]["heldout"]
    crit["loss"] = crit["gap"]
    assert claims(membership, {}, None, None, 0.05, 0.01)[0]["verdict"] == REVERSED_UTILITY
    # the floor rule: where neither arm memorizes at the common point, no memorization
    # claim can be tested there, whatever its interval
    for f in crit["heldout"]["figures"].values():
        f["arms_at_common"] = [0.02, 0.016]
    rows = claims(membership, {}, None, None, 0.05, 0.01)
    assert rows[0]["verdict"].startswith(NOT_TESTABLE + " (both arms' Feldman-Zhang on flipped "
                                         "samples < 5 points there: 2.0, 1.6)")
    assert rows[0]["p_beyond"] == rows[0]["p_short"] == 1.0
    assert rows[2]["verdict"] == REVERSED_UTILITY  # AUC is no memorization score: no floor


def test_ratio_p_values_read_on_the_log_scale():
    """A ratio's interval is symmetric on the log scale (t-interval over models): its p
    comes from there, not from a normal read on the ratio scale."""
    e = est3(2.08, 1.11, 3.90)
    p_lin, _ = p_values(e, 1, 1.0)
    p_log, _ = p_values(e, 1, 1.0, log=True)
    assert p_log < 0.025 < p_lin


def test_p_values_read_a_t_interval_with_its_degrees_of_freedom():
    """An interval built as t with 2 df (the grid's 3 replicates) read as normal: its sd
    comes out 2.2x too large, but the normal tail is so much thinner than t(2)'s that
    far from the threshold the p is hundreds of times too small (and Holm passes what a
    t(2) interval cannot support)."""
    from scipy.stats import t as student
    sd = 0.01
    half = float(student.ppf(0.975, 2)) * sd
    e = Evidence(value=0.10, lo=0.10 - half, hi=0.10 + half, training=True)  # 10 sd out
    p_t, q_t = p_values(e, 1, 0.0, df=2)
    p_z, _ = p_values(e, 1, 0.0)
    assert p_t == pytest.approx(float(student.sf(10.0, 2)), rel=1e-9)  # 0.0049
    assert q_t == pytest.approx(1 - p_t)
    assert p_z < p_t / 100
    # near the threshold the two readings cross: 2 sd out, t(2) gives the smaller p
    near = Evidence(value=0.02, lo=0.02 - half, hi=0.02 + half, training=True)
    assert p_values(near, 1, 0.0, df=2)[0] < p_values(near, 1, 0.0)[0]


def test_a_t_rule_without_df_is_refused_not_read_as_normal():
    """A record under a Student-t rule from before records carried "df" would read as
    normal, understating its p; Evidence.of refuses it with one line, reads it with df, and
    a normal rule's record (or an interval-less one) needs none. T_PROCEDURES is exactly the
    set whose rule_df is not None."""
    import numpy as np
    from bnmem.attack.intervals import RULE_VARIANCES, T_PROCEDURES, IntervalPlan
    from bnmem.core.io import InputError
    from bnmem.report.verdict import Evidence
    rec = {"value": 0.02, "lo": 0.001, "hi": 0.039, "rule": "delete4_halves_s"}
    with pytest.raises(InputError, match="delete4_halves_s.*'df'.*dvc repro attack"):
        Evidence.of(rec, training=True)
    assert Evidence.of({**rec, "df": 9.0}, training=True).df == 9.0
    assert Evidence.of({**rec, "df": None}, training=True).df is None  # Satterthwaite's infinite df: normal
    assert Evidence.of({**rec, "rule": "jacksum"}, training=True).df is None
    assert Evidence.of({**rec, "lo": None, "hi": None}, training=True).lo is None
    var = {k: 1e-4 for k in ("both", "pairs", "samples", "jackknife", "halves", "delete3", "delete4")}
    plan = IntervalPlan("mixed", 8, {})
    t_rules = {p for p in RULE_VARIANCES if plan.rule_df(p, var) is not None}
    assert t_rules == set(T_PROCEDURES)
    assert all(np.isfinite(plan.rule_df(p, var)) for p in T_PROCEDURES)


def test_the_headline_metrics_carry_the_df_their_interval_was_built_with():
    """metrics/deltas.json (what dvc metrics diff and tools/grid.py read) carries the df of a
    t-based interval: the headline, BN - none at matched held-out accuracy under
    delete4_halves_s, reads the same df as results/membership.json's record, and
    headline_deltas leaves df out where the rule is normal."""
    import json
    from pathlib import Path
    from bnmem.attack.stage import headline_deltas
    root = Path(__file__).resolve().parents[1]
    mem = json.loads((root / "results/membership.json").read_text())
    deltas = json.loads((root / "metrics/deltas.json").read_text())
    rec = mem["frontier"]["compare"]["batchnorm_minus_none"]["criteria"]["heldout"]["figures"]["auc_all"]["at_common"]
    assert rec["rule"] == "delete4_halves_s" and rec["df"] > 1
    assert deltas["batchnorm_minus_none"]["auc_all_matched_heldout"]["df"] == rec["df"]
    assert headline_deltas(mem) == deltas
    eq = deltas["batchnorm_minus_none"]["auc_identity_equal_epochs"]
    assert "df" not in eq and set(eq) == {"value", "lo", "hi"}


def test_a_membership_file_whose_intervals_carry_no_df_is_refused_by_the_report():
    """Archived membership.json files (the committed full-scale run's among them) predate
    the "df" key: the report refuses them with one line naming the file and the interval,
    rather than read every t interval as normal; the pipeline's own file passes, and one
    interval without df anywhere in it is found."""
    import copy
    import json

    from bnmem.core.io import InputError
    from bnmem.report.verdict import require_df
    from conftest import ROOT
    ours = json.loads((ROOT / "results" / "membership.json").read_text())
    require_df(ours, "results/membership.json")
    old = ROOT / "results" / "fullscale_908761f" / "results" / "membership.json"
    with pytest.raises(InputError, match=r"fullscale_908761f/results/membership.json: the interval at "
                       r"/arms/batchnorm/auc_all has no 'df'.*dvc repro attack"):
        require_df(json.loads(old.read_text()), str(old))
    bad = copy.deepcopy(ours)
    rec = bad["compare"]["batchnorm_minus_none"]["equal_epochs"]["auc_all"]
    del rec["df"]
    with pytest.raises(InputError, match="/compare/batchnorm_minus_none/equal_epochs/auc_all "):
        require_df(bad, "m.json")
    rec["lo"] = None  # no interval: nothing to read a quantile for
    require_df(bad, "m.json")
