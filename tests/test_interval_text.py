"""The coverage figures report.md states for its intervals come from the committed
coverage studies: the TPR rule's confirmation (bench/results/tpr_rules_plan.md), recomputed
from its store by the study's own analysis (bench/tpr_rules.py)."""
from bnmem.report.markdown import _procedure_text
from conftest import ROOT, load_script


def _rules():
    return load_script("bench/tpr_rules.py")


def test_report_quotes_the_tpr_rules_confirmation():
    rules = _rules()
    tab = rules.table(ROOT / "results" / "tpr_components_seed23.jsonl")["C6"]  # pairs_t
    one, diff = tab["one_arm"]["coverage"], tab["difference"]["coverage"]
    text = _procedure_text("mixed", 100, 8)
    assert f"{one:.3f} one arm, {diff:.3f} paired on its confirmation seed" in text
    misses = [tab[k]["miss_below"] for k in ("one_arm", "difference")]
    sel22 = rules.table(ROOT / "results" / "tpr_components_seed22.jsonl")["C6"]
    misses += [sel22[k]["miss_below"] for k in ("one_arm", "difference")]
    assert f"{100 * min(misses):.1f}-{100 * max(misses):.1f} % of runs" in text
    assert "2.36 sd" in text  # t on 7 df
    assert "2.04 sd" in _procedure_text("mixed", 20, 32)
    # the rule the plan selected on seed 22 is the one the pipeline runs
    sel, qualifies = rules.select(rules.table(ROOT / "results" / "tpr_components_seed22.jsonl"))
    assert (sel, qualifies) == ("C6", False)
    from bnmem.attack.intervals import mixed_procedure
    assert mixed_procedure("tpr_low_all") == "pairs_t"


def test_the_studys_pairs_t_is_the_pipelines():
    """C6 of bench/tpr_rules.py (from a stored variance) equals IntervalPlan('pairs_t') on the
    draws that variance came from, so the confirmed coverage is the production rule's."""
    import numpy as np
    from bnmem.attack.intervals import IntervalPlan
    rules = _rules()
    rng = np.random.default_rng(4)
    draws = np.r_[0.01, rng.gamma(4, 0.0025, 100)]
    plan = IntervalPlan("pairs_t", 8, {"pairs": (1, 101)})
    v = plan.variances(draws)["pairs"]
    rec = np.array([[0.01, v, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan]])
    lo, hi = rules.one_arm(rec, "C6", 8)
    assert np.allclose((lo[0], hi[0]), plan.ci(0.01, draws, "tpr_low_all"), rtol=1e-12, atol=0)
    mixed = IntervalPlan("mixed", 8, {"pairs": (1, 101), "jackknife": (1, 9), "samples": (1, 101)})
    assert mixed.ci(0.01, draws, "tpr_low_all") == plan.ci(0.01, draws, "tpr_low_all")
    # one pair: no spread to estimate, so no interval (not a zero-width one)
    assert IntervalPlan("pairs_t", 1, {"pairs": (1, 101)}).ci(0.01, draws, "tpr_low_all") == (None, None)
