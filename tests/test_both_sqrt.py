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

STORES = [ROOT / f"results/tpr32_components_robust_{r}.jsonl" for r in ("normal_seed40", "t3_seed41")]


def _ours(ra, rb, rd, z):
    """The pipeline's one-arm (a, b) and MOVER (d) intervals for a components store's runs."""
    n = len(ra)
    one = [np.array([sqrt_ci(r[i, 0], r[i, 3], z) for i in range(n)], float) for r in (ra, rb)]
    d = np.array([mover_ci(rd[i, 0], rd[i, 3], ((ra[i, 0], ra[i, 3]), (rb[i, 0], rb[i, 3])), z)
                  for i in range(n)], float)
    return {"a": one[0], "b": one[1], "d": d}


def test_the_pipelines_rule_is_c4_outside_the_low_region_on_both_confirmation_stores():
    """Every run of both confirmation stores (seed 40 normal, seed 41 t3), both FPRs: where an
    arm's point is at least z sd / 2 the pipeline's sqrt_ci is tpr_rules' C4, and where both
    arms are, its MOVER difference too; rho read from V_b,a + V_b,b - V_b,d is the study's
    covariance-based one. The low region (p < z sd / 2, sqrt_ci's own rule) holds no normal
    run, and under t3 at 1e-4 the runs and coverage shifts README and sqrt_ci quote."""
    T = load_script("bench/tpr_rules.py")
    shifts, inside = {}, {}
    for store in STORES:
        truth, rec, pairs = T.load(store)
        assert pairs == 32
        for f in ("tpr_low_all", "tpr_vlow_all"):
            ra, rb, rd = rec[f"{f}_a"], rec[f"{f}_b"], rec[f"{f}_d"]
            c4 = {"a": T.one_arm(ra, "C4", pairs), "b": T.one_arm(rb, "C4", pairs),
                  "d": T.difference(ra, rb, rd, "C4", pairs)}
            ours = _ours(ra, rb, rd, T.Z)
            low = {k: r[:, 0] < T.Z * np.sqrt(r[:, 3]) / 2 for k, r in (("a", ra), ("b", rb))}
            low["d"] = low["a"] | low["b"]
            for k in "abd":
                keep = ~low[k]
                if low[k].any():  # coverage among the runs in the region, C4 and ours
                    t = truth[f"{f}_{k}"]
                    inside[store.stem.split("_")[-2], f, k] = [
                        float(np.mean((lo[low[k]] <= t) & (t <= hi[low[k]])))
                        for lo, hi in (c4[k], ours[k].T)]
                assert np.allclose(ours[k][keep, 0], c4[k][0][keep], rtol=1e-9, atol=1e-12)
                assert np.allclose(ours[k][keep, 1], c4[k][1][keep], rtol=1e-9, atol=1e-12)
                assert (ours[k][:, 0] >= -1).all() and (ours[k][:, 1] <= 1).all()
                cov = [T.score(*c, truth[f"{f}_{k}"])["coverage"] for c in (c4[k], ours[k].T)]
                shifts[store.stem.split("_")[-2], f, k] = (int(low[k].sum()), *cov)
            with np.errstate(invalid="ignore"):
                cov_rho = np.clip(rd[:, 7] / np.sqrt(ra[:, 3] * rb[:, 3]), -1, 1)
            ok = np.isfinite(cov_rho)
            got = [mover_rho(ra[i, 3], rb[i, 3], rd[i, 3]) for i in np.flatnonzero(ok)]
            assert np.allclose(got, cov_rho[ok], atol=1e-6)
    assert all(v[0] == 0 and v[1] == v[2] for k, v in shifts.items() if k[0] == "normal")
    t3 = {k: shifts["t3", "tpr_vlow_all", k] for k in "abd"}
    assert (t3["a"][0], t3["b"][0]) == (86, 128)
    assert all(shifts["t3", "tpr_low_all", k][1] == shifts["t3", "tpr_low_all", k][2] for k in "abd")
    quoted = (f"{t3['a'][1]:.3f} -> {t3['a'][2]:.3f} (arm a), {t3['b'][1]:.3f} -> {t3['b'][2]:.3f} "
              f"(arm b) and {t3['d'][1]:.3f} -> {t3['d'][2]:.3f} (paired)")
    assert quoted in " ".join(I.sqrt_ci.__doc__.split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"{t3['a'][1]:.3f} to {t3['a'][2]:.3f} one arm, {t3['b'][1]:.3f} to {t3['b'][2]:.3f} "
            f"on arm b, {t3['d'][1]:.3f} to {t3['d'][2]:.3f} paired") in readme
    assert min(t3["a"][2], t3["d"][2]) >= 0.93
    assert shifts["t3", "tpr_low_all", "a"][0] == 1 and shifts["t3", "tpr_low_all", "b"][0] == 0
    w = {k: inside["t3", "tpr_vlow_all", k] for k in "abd"}
    assert (f"{w['a'][0]:.3f} to {w['a'][1]:.3f} one arm, {w['b'][0]:.3f} to {w['b'][1]:.3f} on arm b, "
            f"{w['d'][0]:.3f} to {w['d'][1]:.3f} paired") in readme
    assert all(x[1] < x[0] for x in w.values())


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
    """At a point of 0 the interval is [0, 1.96 sd] (C4's); below p = 1.96 sd / 2, where C4's
    lower end would pass 0 and its upper end grows without bound, [0, 1.96 sd + 2 p],
    continuous with C4 at that edge (2 x 1.96 sd, C4's least upper end) and rising with p;
    every end within [0, 1], a difference's within [-1, 1]; an undefined variance or point
    gives no interval."""
    sd = 1e-3
    z = 1.96
    assert sqrt_ci(0.0, sd * sd) == pytest.approx((0.0, z * sd))
    assert sqrt_ci(1e-6, sd * sd) == pytest.approx((0.0, z * sd + 2e-6))
    edge = z * sd / 2
    assert I.in_low_region(edge * (1 - 1e-9), sd * sd) and not I.in_low_region(edge, sd * sd)
    assert I.in_low_region(-0.5, 0.0) and not I.in_low_region(0.5, -1.0)  # both clipped at 0
    assert sqrt_ci(0.0, 0.0) == (0.0, 0.0)  # no spread at 0: [0, 0], not 0 / 0
    assert I.in_low_region(np.array([0.0, edge, 1.0]), sd * sd).tolist() == [True, False, False]
    below, at = sqrt_ci(edge * (1 - 1e-9), sd * sd), sqrt_ci(edge, sd * sd)
    assert below == pytest.approx(at, abs=1e-9) and at[1] == pytest.approx(2 * z * sd)
    his = [sqrt_ci(p, sd * sd)[1] for p in np.linspace(0, edge, 50)]
    assert all(np.diff(his) > 0)  # rising to the edge, not falling from infinity
    above = sqrt_ci(0.04, sd * sd)
    assert above == pytest.approx(((0.2 - z * sd / 0.4) ** 2, (0.2 + z * sd / 0.4) ** 2))
    assert sqrt_ci(0.9, 0.01) [1] == 1.0 and sqrt_ci(0.2, 1.0) == (0.0, 1.0)
    assert sqrt_ci(None, sd) == (None, None) == sqrt_ci(0.1, None) == sqrt_ci(np.nan, sd)
    assert mover_ci(0.01, 1e-6, None) == (None, None)
    assert mover_ci(0.01, 1e-6, ((0.02, None), (0.01, 1e-6))) == (None, None)
    # a near-zero arm no longer blows the difference up (C4 gave [-960, 0.022] at b = 1e-9)
    lo, hi = mover_ci(0.02 - 1e-9, 2e-6, ((0.02, 1e-6), (1e-9, 1e-6)))
    assert -0.01 < lo < hi < 0.03
    rng = np.random.default_rng(5)  # within [-1, 1] however wide: at most u_a - l_b above d's...
    for a, b, va, vb, vd in zip(*rng.uniform(0, 1, (2, 200)), *rng.uniform(0, 0.5, (3, 200))):
        lo, hi = mover_ci(a - b, vd, ((a, va), (b, vb)))
        (la, ua), (lb, ub) = sqrt_ci(a, va), sqrt_ci(b, vb)
        assert la - ub - 1e-12 <= lo <= hi <= ua - lb + 1e-12 and -1 <= lo and hi <= 1
    # independent arms (rho 0) with zero variance on one side: the other arm's side alone
    lo, hi = mover_ci(0.01, 1e-6, ((0.02, 1e-6), (0.01, 0.0)))
    la, ua = sqrt_ci(0.02, 1e-6)
    assert (lo, hi) == pytest.approx((0.01 - (0.02 - la), 0.01 + (ua - 0.02)))


def _draws(rng, n=41):
    """Two arms' draws of TPR and AUC (row 0 the point; rows 1-20 a "pairs" segment at a
    quarter of the spread, rows 21-40 the joint "both" draws), the arms correlated."""
    z = rng.standard_normal((n, 2))
    z[1:21] *= 0.25  # a row from the wrong segment changes an arm's V_b
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
    arm_b = IntervalPlan("both", 32, {"both": (21, 41)}).variances([d["tpr_low_all"] for d in b])
    assert I.variance_from_sd(rec["arms"][0]["sd"]["both"]) == pytest.approx(arm["both"], rel=1e-12)
    assert I.variance_from_sd(rec["arms"][1]["sd"]["both"]) == pytest.approx(arm_b["both"], rel=1e-12)
    # the correlation MOVER reads from the record is the arms' over the joint draws
    xa = np.array([d["tpr_low_all"] for d in a[21:]])
    xb = np.array([d["tpr_low_all"] for d in b[21:]])
    rho = mover_rho(*(I.variance_from_sd(x["sd"]["both"]) for x in rec["arms"]),
                    I.variance_from_sd(rec["sd"]["both"]))
    assert rho == pytest.approx(np.corrcoef(xa, xb)[0, 1], rel=1e-9)
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
    for i, row in enumerate(out["equal_budget"]):
        r = row["tpr_low_all"]
        assert r["rule"] == "both_sqrt" and "arms" not in row["auc_all"]
        # this budget's arms, a first and b second, at the same draws as the difference
        assert [x["value"] for x in r["arms"]] == [a[0][i]["tpr_low_all"], b[0][i]["tpr_low_all"]]
        for x, draws in zip(r["arms"], (a, b)):
            v = IntervalPlan("both", 32, {"both": (21, 41)}).variances(
                [d[i]["tpr_low_all"] for d in draws])["both"]
            assert I.variance_from_sd(x["sd"]["both"]) == pytest.approx(v, rel=1e-12)
    # support: a nulled record keeps no arms to read back
    frontier.compare_support(out, [{"supported": False}] * 3, [{"supported": True}] * 3)
    assert out["equal_budget"][0]["tpr_low_all"]["value"] is None
    assert all("arms" not in row["tpr_low_all"] for row in out["equal_budget"])


def test_p_values_read_the_side_toward_the_threshold():
    """An asymmetric interval's p-value (verdict.p_values) reads the half on the threshold's
    side: a sqrt interval [0.01, 0.05] around 0.025 tested against 0 uses 0.015 as 1.96 sd,
    against 0.06 the upper 0.025; a symmetric record reads as before. An end clipped at a
    bound, or an interval read in sqrt_ci's low region (a one-arm record's, or an arm's of a
    difference), gives none."""
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
    # a lower end clipped at 0 is no 1.96 sd: no p-value from it (the upper side still reads)
    clipped = Evidence.of({"value": 5e-4, "lo": 0.0, "hi": 0.0044, "rule": "both_sqrt", "df": None}, True)
    assert p_values(clipped, 1, 0.0) == (1.0, 1.0)
    assert p_values(clipped, -1, 0.01)[0] == pytest.approx(ndtr(-0.0095 / (0.0039 / 1.959964)), rel=1e-9)
    # a difference built from an arm in sqrt_ci's low region (p < 1.96 sd / 2): none either
    diff = {"value": 0.02, "lo": 0.01, "hi": 0.03, "rule": "both_sqrt", "df": None,
            "arms": [{"value": 0.021, "sd": {"both": 0.002}}, {"value": 0.001, "sd": {"both": 0.002}}]}
    assert Evidence.of(diff, True).low_arm and p_values(Evidence.of(diff, True), 1, 0.0) == (1.0, 1.0)
    diff["arms"][1]["value"] = 0.003  # 0.003 >= 1.96 x 0.002 / 2: read
    assert not Evidence.of(diff, True).low_arm and p_values(Evidence.of(diff, True), 1, 0.0)[0] < 0.025
    # ... nor a one-arm record read in the region (its own value and `both` SD), on either side
    one = {"value": 0.001, "rule": "both_sqrt", "df": None, "sd": {"both": 0.002}}
    one["lo"], one["hi"] = sqrt_ci(0.001, 0.002 ** 2)
    assert Evidence.of(one, True).low_arm and p_values(Evidence.of(one, True), -1, 0.01) == (1.0, 1.0)
    one["value"] = 0.003
    one["lo"], one["hi"] = sqrt_ci(0.003, 0.002 ** 2)
    assert not Evidence.of(one, True).low_arm and 0 < p_values(Evidence.of(one, True), -1, 0.01)[0] < 1


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
    # (sqrt p -+ z sd / (2 sqrt p))^2 = p -+ z sd + (z sd)^2 / (4 p), p = 0.02, z sd = 0.00588
    assert row["after"] == pytest.approx([0.02 - 0.00588 + 0.00588 ** 2 / 0.08,
                                          0.02 + 0.00588 + 0.00588 ** 2 / 0.08], rel=1e-9)
    path = tmp_path / "membership.json"
    path.write_text(json.dumps(m))
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "rerule.py"), str(path)],
                         capture_output=True, text=True)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1
    assert "does not keep" in res.stderr and "/compare/a_minus_b/equal_epochs/tpr_low_all" in res.stderr


def test_equal_epoch_tpr_differences_need_both_arms_supported():
    """attack.stage.equal_epoch_support: a TPR difference at equal epochs keeps its value only
    where both arms' TPR at that FPR is supported (no value, interval or arms otherwise; its
    SDs stay), and an arm without a support record has none there; the AUC differences are
    left alone; a comparison key naming no two arms is refused."""
    from bnmem.attack.stage import equal_epoch_support
    rec = {"value": 0.01, "lo": 0.0, "hi": 0.02, "sd": {"both": 0.005}, "rule": "both_sqrt",
           "df": None, "arms": [{"value": 0.03, "sd": {"both": 0.004}}, {"value": 0.02, "sd": {"both": 0.003}}]}
    m = {"arms": {"none": {"tpr_low_support": {"supported": True}},
                  "batchnorm_reg": {"tpr_low_support": {"supported": False}},
                  "batchnorm": {"tpr_low_support": {"supported": True}}},
         "compare": {k: {"equal_epochs": {"tpr_low_all": dict(rec), "tpr_vlow_all": dict(rec),
                                          "auc_all": dict(rec)}}
                     for k in ("batchnorm_minus_none", "batchnorm_reg_minus_none",
                               "none_minus_batchnorm_reg")}}
    equal_epoch_support(m)
    kept, cut = (m["compare"][k]["equal_epochs"] for k in ("batchnorm_minus_none", "batchnorm_reg_minus_none"))
    # the unsupported arm second: cut as well (both arms are read, not the first alone)
    assert m["compare"]["none_minus_batchnorm_reg"]["equal_epochs"]["tpr_low_all"]["value"] is None
    assert kept["tpr_low_all"] == rec and kept["auc_all"] == rec == cut["auc_all"]
    assert cut["tpr_low_all"]["value"] is None and cut["tpr_low_all"]["lo"] is None
    assert "arms" not in cut["tpr_low_all"] and cut["tpr_low_all"]["sd"] == rec["sd"]
    # arms without a support record at 1e-4 have no TPR there: nor has their difference
    assert kept["tpr_vlow_all"]["value"] is None is cut["tpr_vlow_all"]["value"]
    m["compare"]["batchnorm_minus_dp"] = {"equal_epochs": {}}
    with pytest.raises(RuntimeError, match="compare/batchnorm_minus_dp: names no two arms"):
        equal_epoch_support(m)


def test_the_frontier_gate_reads_both_arms_and_a_missing_source():
    """frontier.compare_support: the common point's difference has no value where an arm has
    no source there (no endpoint it rests on) or its source's endpoint is unsupported, in
    arm a or in arm b; the overlap none where any endpoint of either arm is; an equal budget
    none where either arm's endpoint at that budget is."""
    from bnmem.attack import frontier
    rec = {"value": 0.01, "lo": 0.0, "hi": 0.02, "sd": {"both": 0.005}, "rule": "both_sqrt",
           "df": None, "arms": [{"value": 0.03, "sd": {"both": 0.004}}, {"value": 0.02, "sd": {"both": 0.003}}]}

    def gated(sources, sup_a, sup_b):
        cmp = {"criteria": {"heldout": {"figures": {"tpr_low_all": {
            "source_at_common": sources, "at_common": dict(rec), "overlap": dict(rec)}}}},
            "equal_budget": [{"tpr_low_all": dict(rec)} for _ in range(3)]}
        frontier.compare_support(cmp, [{"supported": s} for s in sup_a],
                                 [{"supported": s} for s in sup_b])
        f = cmp["criteria"]["heldout"]["figures"]["tpr_low_all"]
        return (f["at_common"]["value"], f["overlap"]["value"],
                [r["tpr_low_all"]["value"] for r in cmp["equal_budget"]])

    every = [True] * 3
    assert gated((0.0, 1.5), every, every) == (0.01, 0.01, [0.01] * 3)
    assert gated((None, 1.5), every, every)[0] is None  # arm a has no source there
    assert gated((0.0, None), every, every)[0] is None  # ... or arm b
    assert gated((0.0, 1.5), every, [True, True, False]) == (None, None, [0.01, 0.01, None])
    assert gated((0.0, 1.5), every, [True, False, True]) == (None, None, [0.01, None, 0.01])
    assert gated((0.0, 0.0), every, [True, False, True]) == (0.01, None, [0.01, None, 0.01])
    assert gated((2.0, 0.0), [True, False, True], every) == (0.01, None, [0.01, None, 0.01])


def test_the_coverage_harness_reads_both_sqrt_differences():
    """bnmem.attack.coverage's runs hand a difference its arms: under `mixed` at 32 pairs the
    paired TPR difference has a finite interval (both_sqrt's MOVER), not none."""
    from bnmem.attack import coverage
    kind = coverage.sample_kinds(600, 0.1)
    out = coverage._run((64, 600, (0.6, 0.3), kind, 20, 3, ("mixed",), 1.0, ("tpr_low_all",)))
    lo, hi = out["mixed"]
    assert np.isfinite(lo).all() and np.isfinite(hi).all() and (lo < hi).all()


def test_how_well_the_rules_sd_is_known_as_readme_quotes():
    """README's run-to-run variation of a TPR interval's SD under both_sqrt (sqrt V_b over the
    runs of a 32-pair store, SD over mean, TPR at 1e-3 and 1e-4, one arm and paired)."""
    T = load_script("bench/tpr_rules.py")

    def span(stores):
        r = []
        for st in stores:
            _, rec, _ = T.load(ROOT / "results" / f"tpr32_components_{st}.jsonl")
            for k in ("tpr_low_all_a", "tpr_low_all_d", "tpr_vlow_all_a", "tpr_vlow_all_d"):
                sd = np.sqrt(rec[k][:, 3])
                r.append(sd.std(ddof=1) / sd.mean())
        return f"{min(r):.2f}–{max(r):.2f}"
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"by {span(['20draws_seed35', 'robust_normal_seed40'])} of itself at 20 draws per design "
            f"under normal noise (seeds 35 and 40; {span(['robust_t3_seed41'])} under t3, seed 41) "
            f"and {span(['seed34'])} at 100") in readme


def test_the_full_scale_rerun_moved_only_tpr_intervals_as_readme_says():
    """results/fullscale (both_sqrt) against results/fullscale_6018af7 (twoway, an Intel
    run): every interval record's point and every non-TPR interval identical; the TPR width
    ratios and the differences whose 0-exclusion changed, as README's full-scale section
    quotes them."""
    from bnmem.attack.intervals import interval_records
    res = ROOT / "results"
    old, new = (dict(interval_records(json.loads((res / d / "results/membership.json").read_text())))
                for d in ("fullscale_6018af7", "fullscale"))
    assert set(old) == set(new) and len(old) == 458
    assert all(old[p]["value"] == new[p]["value"] for p in old)
    other = [p for p in old if "/tpr_" not in p]
    assert len(other) == 400 and all((old[p]["lo"], old[p]["hi"]) == (new[p]["lo"], new[p]["hi"]) for p in other)
    tpr = [p for p in old if "/tpr_" in p and new[p]["lo"] is not None]
    assert len(tpr) == 55 and {new[p]["rule"] for p in tpr} == {"both_sqrt"}

    def diff(p):
        return "/compare/" in p or "mitigations" in p
    readme = " ".join((ROOT / "README.md").read_text().split())
    for sel, n, width in (([p for p in tpr if not diff(p)], 15, "`twoway`'s width"),
                          ([p for p in tpr if diff(p)], 40, "its width")):
        r = np.array([(new[p]["hi"] - new[p]["lo"]) / (old[p]["hi"] - old[p]["lo"]) for p in sel])
        assert len(sel) == n
        assert f"{r.min():.2f}–{r.max():.2f} times {width} (median {np.median(r):.2f}, {n} intervals)" in readme
    excl = {p: [(d[p]["lo"] > 0 or d[p]["hi"] < 0) for d in (old, new)] for p in tpr if diff(p)}
    assert sum(a and not b for a, b in excl.values()) == 6 and not any(b and not a for a, b in excl.values())
    assert "**6 differences that excluded 0 now cover it**, none the other way" in readme
    assert cmp_bytes(res / "fullscale/results/attack.json", res / "fullscale_6018af7/results/attack.json")


def cmp_bytes(a, b) -> bool:
    return a.read_bytes() == b.read_bytes()


def test_the_eighth_plans_readout_refuses_another_study_and_reads_c4_beside():
    """bench/tpr_lowregion.py (tpr32_lowregion_plan.md): the planned command's fingerprint is
    the one the plan fixed; another study's store (seed 41's) is refused in one line; on it
    the readout's rule column is the pipeline's (the low region's moves README quotes) and
    its C4 column C4 as confirmed."""
    L = load_script("bench/tpr_lowregion.py")
    R = load_script("bench/tpr_robust.py")
    plan = (ROOT / "bench/results/tpr32_lowregion_plan.md").read_text()
    assert R.study_fingerprint(L.PLANNED) == L.FINGERPRINT and f"`{L.FINGERPRINT}`" in plan
    assert " ".join(L.PLANNED.split()[1:]) in " ".join(plan.replace("\\\n", " ").split())
    s41 = ROOT / "results/tpr32_components_robust_t3_seed41.jsonl"
    res = subprocess.run([sys.executable, str(ROOT / "bench/tpr_lowregion.py"), str(s41)],
                         capture_output=True, text=True)
    assert res.returncode != 0 and len(res.stderr.strip().splitlines()) == 1
    assert "not the planned one" in res.stderr
    T = load_script("bench/tpr_rules.py")
    truth, rec, _ = T.load(s41)
    f = "tpr_vlow_all"
    ours = L.pipeline(rec[f"{f}_a"], rec[f"{f}_b"], rec[f"{f}_d"])
    old = L.c4_clipped(rec[f"{f}_a"], rec[f"{f}_b"], rec[f"{f}_d"])
    cov = {k: [T.score(*x[k], truth[f"{f}_{k}"])["coverage"] for x in (old, ours)] for k in "abd"}
    assert [round(c, 3) for k in "abd" for c in cov[k]] == [0.968, 0.958, 0.950, 0.940, 0.972, 0.964]


def test_the_eighth_plans_outcome_follows_from_its_store():
    """The seed-42 store (tpr32_lowregion_plan.md): the readout regenerates byte for byte, the
    rule confirms, the fallback is not needed, and README and the plan quote its figures."""
    L = load_script("bench/tpr_lowregion.py")
    R = load_script("bench/tpr_robust.py")
    rel = "results/tpr32_components_lowregion_t3_seed42.jsonl"
    res = L.confirm(ROOT / rel)
    assert res["confirms"] and res["decision_cells"] and not res["fallback"]
    assert L.markdown(res, rel) == (ROOT / "bench/results/tpr32_lowregion_seed42.md").read_text()
    c = {k: x["coverage"] for k, x in res["cells"].items()}
    readme = " ".join((ROOT / "README.md").read_text().split())
    plan = " ".join((ROOT / "bench/results/tpr32_lowregion_plan.md").read_text().split())
    lo, vl = "tpr_low_all", "tpr_vlow_all"
    assert (f"arm a {c[lo, 'a']:.3f} / {c[vl, 'a']:.3f} at FPR 1e-3 / 1e-4, paired "
            f"{c[lo, 'd']:.3f} / {c[vl, 'd']:.3f}") in readme
    tails = max(max(x["miss_below"], x["miss_above"]) for (f, k), x in res["cells"].items() if k != "b")
    assert f"tails at most {tails:.3f}" in readme and f"tails at most {tails:.3f}" in plan
    assert (f"arm b {c[lo, 'b']:.3f} / {c[vl, 'b']:.3f} (short of 0.93 at 1e-3, above `twoway`'s "
            f"{res['c1_b'][lo, 'b']['coverage']:.3f} / {res['c1_b'][vl, 'b']['coverage']:.3f})") in readme
    low = res["low"]
    assert (f"bound in {low[vl, 'a']['runs']} and {low[vl, 'b']['runs']} of 500 runs at 1e-4 (arms a "
            f"and b) and there covered {low[vl, 'a']['rule']['coverage']:.3f} one arm, "
            f"{low[vl, 'b']['rule']['coverage']:.3f} arm b, {low[vl, 'd']['rule']['coverage']:.3f} paired") in readme
    assert f"among those runs it covered {low[vl, 'a']['rule']['coverage']:.3f} one arm" in plan
    assert all(R.qualifies(res["cells"][f, k], 500) for f in (lo, vl) for k in "ad")
