"""both_sqrt, the rule for TPR at low FPR above 8 pairs (the seventh TPR plan's C4,
bench/results/tpr32_robust_plan.md): one arm on the square-root scale, a difference a - b by
MOVER from its arms. Checked against the confirmation's own implementation (bench/tpr_rules.py)
on the committed study, where the truth is known (coverage in simulation, and a variance
understated by half must fail it), and through the pipeline's records: a difference keeps its
arms, is read back from them, and reads no interval without them."""
import json
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, load_script
from bnmem.attack import intervals as I
from bnmem.attack.intervals import IntervalPlan, mover_ci, mover_rho, record_arms, sqrt_ci

STORE = ROOT / "results/tpr32_components_robust_normal_seed40.jsonl"


def test_one_arm_and_mover_equal_the_confirmed_c4_on_the_study():
    """Every run of the seed-40 confirmation store: the pipeline's sqrt_ci and mover_ci (at
    the study's quantile) give tpr_rules' C4 intervals to rounding, one arm and paired; rho
    read from V_b,a + V_b,b - V_b,d equals the study's covariance-based one."""
    T = load_script("bench/tpr_rules.py")
    _, rec, pairs = T.load(STORE)
    assert pairs == 32
    for f in ("tpr_low_all", "tpr_vlow_all"):
        ra, rb, rd = rec[f"{f}_a"], rec[f"{f}_b"], rec[f"{f}_d"]
        la, ha = T.one_arm(ra, "C4", pairs)
        lo, hi = T.difference(ra, rb, rd, "C4", pairs)
        ok = np.isfinite(lo) & np.isfinite(hi)
        assert ok.mean() > 0.99
        for i in np.flatnonzero(ok)[:200]:
            assert sqrt_ci(ra[i, 0], ra[i, 3], T.Z) == pytest.approx((la[i], ha[i]), rel=1e-12, abs=1e-15)
            got = mover_ci(rd[i, 0], rd[i, 3], ((ra[i, 0], ra[i, 3]), (rb[i, 0], rb[i, 3])), T.Z)
            assert got == pytest.approx((lo[i], hi[i]), rel=1e-9, abs=1e-12), (f, i)
            cov_rho = np.clip(rd[i, 7] / np.sqrt(ra[i, 3] * rb[i, 3]), -1, 1)
            assert mover_rho(ra[i, 3], rb[i, 3], rd[i, 3]) == pytest.approx(cov_rho, abs=1e-6)


def test_coverage_where_the_truth_is_known_and_a_halved_variance_fails():
    """Points p_hat ~ N(p, s^2), V_b an unbiased chi-square estimate of s^2 on 100 df, arms
    correlated 0.5: one arm and MOVER's difference cover p (a - b) in 0.93-0.97 of 4 000
    runs at p / s = 8; the same with V_b halved covers under 0.90 (the check can fail)."""
    rng = np.random.default_rng(42)
    n, s, pa, pb, rho = 4000, 0.002, 0.016, 0.010, 0.5
    z = rng.standard_normal((n, 2))
    a = pa + s * z[:, 0]
    b = pb + s * (rho * z[:, 0] + np.sqrt(1 - rho ** 2) * z[:, 1])
    chi = rng.chisquare(100, (n, 3)) / 100
    va, vb = s * s * chi[:, 0], s * s * chi[:, 1]
    vd = (2 - 2 * rho) * s * s * chi[:, 2]
    for shrink, lo_ok, hi_ok in ((1.0, 0.93, 0.97), (0.5, 0.0, 0.90)):
        one = np.array([sqrt_ci(a[i], shrink * va[i]) for i in range(n)])
        dif = np.array([mover_ci(a[i] - b[i], shrink * vd[i],
                                 ((a[i], shrink * va[i]), (b[i], shrink * vb[i])))
                        for i in range(n)])
        c1 = np.mean((one[:, 0] <= pa) & (pa <= one[:, 1]))
        c2 = np.mean((dif[:, 0] <= pa - pb) & (pa - pb <= dif[:, 1]))
        assert lo_ok <= c1 <= hi_ok and lo_ok <= c2 <= hi_ok, (shrink, c1, c2)


def test_zero_and_tiny_points():
    """At a point of 0 the interval is [0, 1.96 sd] (the confirmed rule's choice); a tiny
    point with a large sd gets an upper end near (1.96 sd)^2 / (4 p), far wider; the lower
    end is never below 0; an undefined variance or point gives no interval."""
    v = 1e-6
    assert sqrt_ci(0.0, v) == pytest.approx((0.0, 1.96e-3))
    lo, hi = sqrt_ci(1e-6, v)
    assert lo == 0.0 and hi == pytest.approx((1e-3 + 1.96 * 1e-3 / (2 * 1e-3)) ** 2, rel=1e-12)
    assert hi > 0.9 > 100 * 1.96e-3
    assert sqrt_ci(0.04, 1e-6) == pytest.approx(((0.2 - 0.0049) ** 2, (0.2 + 0.0049) ** 2))
    assert sqrt_ci(None, v) == (None, None) == sqrt_ci(0.1, None) == sqrt_ci(np.nan, v)
    assert mover_ci(0.01, 1e-6, None) == (None, None)
    assert mover_ci(0.01, 1e-6, ((0.02, None), (0.01, 1e-6))) == (None, None)
    # independent arms (rho 0) with zero variance on one side: the other arm's side alone
    lo, hi = mover_ci(0.01, 1e-6, ((0.02, 1e-6), (0.01, 0.0)))
    la, ua = sqrt_ci(0.02, 1e-6)
    assert (lo, hi) == pytest.approx((0.01 - (0.02 - la), 0.01 + (ua - 0.02)))


def _draws(rng, n=41):
    """Two arms' draws of TPR and AUC (row 0 the point, rows 1.. joint draws), correlated."""
    z = rng.standard_normal((n, 2))
    a = [{"tpr_low_all": 0.02 + 0.003 * z[i, 0], "auc_all": 0.6 + 0.01 * z[i, 0], "units": 32}
         for i in range(n)]
    b = [{"tpr_low_all": 0.012 + 0.003 * (0.4 * z[i, 0] + z[i, 1]),
          "auc_all": 0.55 + 0.01 * z[i, 1], "units": 32} for i in range(n)]
    return a, b


def test_the_pipelines_difference_records_keep_their_arms_and_read_back():
    """resample.compare at 32 pairs under `mixed`: the TPR difference is both_sqrt, its record
    keeps each arm's point and V_b, and re-reading it from the record (record_arms, ci_from)
    gives the interval back exactly; the AUC difference is untouched (no "arms"); at 8 pairs
    TPR keeps pairs_t, with no "arms" either; a difference read without arms has none."""
    from bnmem.attack.resample import compare
    a, b = _draws(np.random.default_rng(7))
    plan = IntervalPlan("mixed", 32, {"pairs": (1, 21), "both": (21, 41)})
    out = compare(a, b, plan=plan)["equal_epochs"]
    rec = out["tpr_low_all"]
    assert rec["rule"] == "both_sqrt" and "arms" not in out["auc_all"]
    assert [x["value"] for x in rec["arms"]] == [a[0]["tpr_low_all"], b[0]["tpr_low_all"]]
    arm = IntervalPlan("both", 32, {"both": (21, 41)}).variances([d["tpr_low_all"] for d in a])
    assert I.variance_from_sd(rec["arms"][0]["sd"]["both"]) == pytest.approx(arm["both"], rel=1e-12)
    var = {k: I.variance_from_sd(v) for k, v in rec["sd"].items()}
    again = IntervalPlan("both_sqrt", 32, {}).ci_from(rec["value"], var, "tpr@equal",
                                                      arms=record_arms(rec))
    assert again == (rec["lo"], rec["hi"])
    assert rec["hi"] - rec["value"] != pytest.approx(rec["value"] - rec["lo"], rel=1e-3)  # asymmetric
    vals = np.array([x["tpr_low_all"] - y["tpr_low_all"] for x, y in zip(a, b)])
    bare = plan.summary(vals, "tpr_low_all@equal")
    assert bare["lo"] is None and bare["rule"] is None
    one = plan.summary(np.array([x["tpr_low_all"] for x in a]), "tpr_low_all")
    assert (one["lo"], one["hi"]) == sqrt_ci(a[0]["tpr_low_all"], arm["both"]) and "arms" not in one
    plan8 = IntervalPlan("mixed", 8, {"pairs": (1, 21), "both": (21, 41)})
    rec8 = compare(a, b, plan=plan8)["equal_epochs"]["tpr_low_all"]
    assert rec8["rule"] == "pairs_t" and "arms" not in rec8


def test_frontier_reads_arms_at_the_common_point_the_overlap_and_equal_budgets():
    """frontier.compare at 32 pairs: every TPR difference (at each criterion's common point,
    over its overlap where there is one, at each equal budget) is both_sqrt with its arms, whose
    points are draw 0's per-arm values (arms_at_common at the common point; the means over the
    overlap grid for the overlap); the AUC differences carry none."""
    from bnmem.attack import frontier
    rng = np.random.default_rng(3)
    n = 41

    def arm(base, slope):
        out = []
        for _ in range(n):
            e = rng.normal(0, 0.004, 3)
            out.append([{"out_acc_clean": base + 0.05 * k + e[k], "train_loss": 1.0 - 0.2 * k + e[k],
                         "gen_gap": 0.01 * k + 0.001 * e[k], "in_acc_clean": base + 0.06 * k + e[k],
                         **{f: slope * (k + 1) + 0.1 + e[k] for f in frontier.FIGURES},
                         "tpr_low_all": 0.01 * (k + 1) * slope * 10 + 0.3 * e[k]}
                        for k in range(3)])
        return out
    a, b = arm(0.70, 0.03), arm(0.72, 0.02)
    plan = IntervalPlan("mixed", 32, {"pairs": (1, 21), "both": (21, 41)})
    out = frontier.compare(a, b, plan)
    seen = 0
    for crit, c in out["criteria"].items():
        f = c["figures"]["tpr_low_all"]
        for read in ("at_common", "overlap"):
            r = f[read]
            if r["value"] is None:
                continue
            assert r["rule"] == "both_sqrt" and len(r["arms"]) == 2, (crit, read)
            assert r["arms"][0]["value"] - r["arms"][1]["value"] == pytest.approx(r["value"], abs=1e-12)
            seen += 1
        if f["at_common"]["value"] is not None:
            assert [x["value"] for x in f["at_common"]["arms"]] == f["arms_at_common"]
        assert "arms" not in c["figures"]["auc_all"]["at_common"]
    assert seen >= 4
    for row in out["equal_budget"]:
        assert row["tpr_low_all"]["rule"] == "both_sqrt" and "arms" in row["tpr_low_all"]
        assert "arms" not in row["auc_all"]


def test_p_values_read_the_side_toward_the_threshold():
    """An asymmetric interval's p-value (verdict.p_values) reads the half on the threshold's
    side: a sqrt interval [0.01, 0.05] around 0.025 tested against 0 uses 0.015 as 1.96 sd,
    against 0.06 the upper 0.025; a symmetric record reads as before."""
    from scipy.special import ndtr
    from bnmem.report.verdict import Evidence, p_values
    e = Evidence.of({"value": 0.025, "lo": 0.01, "hi": 0.05, "rule": "both_sqrt", "df": None}, True)
    assert e.sided
    assert p_values(e, 1, 0.0)[0] == pytest.approx(ndtr(-0.025 / (0.015 / 1.959964)), rel=1e-12)
    assert p_values(e, -1, 0.06)[0] == pytest.approx(ndtr(-0.035 / (0.025 / 1.959964)), rel=1e-12)
    sym = Evidence.of({"value": 0.025, "lo": 0.01, "hi": 0.05, "rule": "twoway", "df": None}, True)
    assert not sym.sided
    assert p_values(sym, 1, 0.0)[0] == pytest.approx(ndtr(-0.025 / (0.02 / 1.959964)), rel=1e-12)
    at_zero = Evidence.of({"value": 0.0, "lo": 0.0, "hi": 0.004, "rule": "both_sqrt", "df": None}, True)
    assert p_values(at_zero, 1, 0.0) == (1.0, 1.0)


def test_rules_and_rerule(tmp_path):
    """rules_for gives both_sqrt for every TPR read above 8 pairs (pairs_t at 8), drawing no
    new design; tools/rerule.py reads a one-arm record back under it and refuses, in one line,
    a difference record without its arms."""
    assert {I.rules_for(32)[("tpr", r)] for r in I.READS} == {"both_sqrt"}
    assert {I.rules_for(8)[("tpr", r)] for r in I.READS} == {"pairs_t"}
    assert "both" in I.designs("mixed") and I.designs("both_sqrt") == ("both",)
    one = {"value": 0.02, "lo": None, "hi": None, "rule": "both_sqrt", "df": None,
           "sd": {"both": 0.003, "pairs": 0.002, "samples": 0.001}}
    one["lo"], one["hi"] = sqrt_ci(0.02, 0.003 ** 2)
    diff = {**one, "value": 0.005, "lo": -0.01, "hi": 0.02}
    m = {"pairs": 32, "arms": {"none": {"tpr_low_all": one}},
         "compare": {"a_minus_b": {"equal_epochs": {"tpr_low_all": diff}}}}
    rerule = load_script("tools/rerule.py")
    (row,) = rerule.rerule({**m, "compare": {}}, "both_sqrt")
    assert row["after"] == [one["lo"], one["hi"]]
    path = tmp_path / "membership.json"
    path.write_text(json.dumps(m))
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "rerule.py"), str(path)],
                         capture_output=True, text=True)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1
    assert "does not keep" in res.stderr and "/compare/a_minus_b/equal_epochs/tpr_low_all" in res.stderr
