"""jacksum_s (bnmem.attack.intervals; bench/results/real_shadows_ninth_plan.md): jacksum's
variance V_j + V_s with Student's t on Satterthwaite's degrees of freedom. The pipeline's
interval is the study's (bench/real_shadow_ninth.py), and in simulation, where the truth is
known, it covers about 0.95 where the pairs' jackknife dominates and jacksum under-covers."""
import numpy as np
import pytest
from scipy import stats

from bnmem.attack.intervals import IntervalPlan
from conftest import ROOT, load_script

N = load_script("bench/real_shadow_ninth.py")


def test_the_studys_jacksum_s_is_the_pipelines():
    """From draws laid out as the attack stage lays them (8 jackknife rows, 100 samples-only
    rows), IntervalPlan('jacksum_s') is ± t_nu sqrt(V_j + V_s) with the study's nu (V_s on
    99 df); with the samples' rows' count unknown (a recorded result read back) V_s's df is
    taken as many; with one pair there is no interval."""
    rng = np.random.default_rng(9)
    for scale in (0.2, 1.0, 5.0):  # the samples' part small, alike, large
        draws = np.r_[0.3, 0.3 + rng.normal(0, 0.01, 8), 0.3 + rng.normal(0, 0.01 * scale, 100)]
        seg = {"jackknife": (1, 9), "samples": (9, 109)}
        plan = IntervalPlan("jacksum_s", 8, seg)
        v = plan.variances(draws)
        nu = N.nu(v["jackknife"], v["samples"])
        want = stats.t.ppf(0.975, nu) * np.sqrt(v["jackknife"] + v["samples"])
        lo, hi = plan.ci(0.3, draws, "fz_flipped/fit@common")
        assert hi - 0.3 == pytest.approx(want, rel=1e-10) and 0.3 - lo == pytest.approx(want, rel=1e-10)
        js = IntervalPlan("jacksum", 8, seg).ci(0.3, draws)
        assert hi - 0.3 > js[1] - 0.3  # wider than jacksum's 1.96
        many = IntervalPlan("jacksum_s", 8, {"jackknife": (1, 9)}).ci_from(0.3, v, "x")
        nu_inf = N.nu(v["jackknife"], v["samples"], draws=10 ** 12)
        assert many[1] - 0.3 == pytest.approx(stats.t.ppf(0.975, nu_inf) * np.sqrt(v["jackknife"] + v["samples"]),
                                               rel=1e-6)
    assert IntervalPlan("jacksum_s", 1, {"jackknife": (1, 2), "samples": (2, 102)}).ci_from(
        0.3, {"jackknife": 1e-4, "samples": 1e-4}, "x") == (None, None)


@pytest.mark.parametrize("share,lo_js,band", [(0.9, 0.90, (0.94, 0.962)), (0.1, 0.935, (0.94, 0.962))])
def test_satterthwaite_covers_where_jacksum_does_not(share, lo_js, band):
    """A run's error: the mean of 8 independent pairs' effects plus a normal samples' part,
    `share` of the variance the pairs'. V_j is the jackknife of the mean over the pairs
    (its s^2 / 8, 7 df), V_s a 100-draw bootstrap's variance of the samples' part (99 df).
    Where the pairs dominate, jacksum (± 1.96) covers about 0.91, below the target, and
    jacksum_s about 0.95; where the samples dominate both cover about 0.95."""
    rng = np.random.default_rng(2026)
    runs, var = 20_000, 1.0
    vp, vs = share * var, (1 - share) * var
    pairs = rng.normal(0, np.sqrt(8 * vp), (runs, 8))
    err = pairs.mean(axis=1) + rng.normal(0, np.sqrt(vs), runs)
    v_j = pairs.var(axis=1, ddof=1) / 8
    v_s = vs * rng.chisquare(99, runs) / 99
    plan = IntervalPlan("jacksum_s", 8, {"jackknife": (1, 9), "samples": (9, 109)})
    half_s = np.array([plan.ci_from(0.0, {"jackknife": a, "samples": b}, "x")[1] for a, b in zip(v_j, v_s)])
    cov_s = float(np.mean(np.abs(err) <= half_s))
    cov_js = float(np.mean(np.abs(err) <= 1.96 * np.sqrt(v_j + v_s)))
    assert band[0] <= cov_s <= band[1]
    if share > 0.5:
        assert cov_js < 0.93 and cov_js > lo_js  # the shortfall jacksum_s mends
    else:
        assert cov_js > lo_js


@pytest.mark.slow  # the nine pools' memorization stores (about 10 s)
def test_the_check_before_pool_i_follows_from_the_stores():
    """The as-of-H table regenerates byte for byte and its figures are the plan's."""
    pools, full = N.load("H")
    lines, t = N.table(pools, full)
    assert "\n".join(lines) + "\n" == (ROOT / "bench/results/real_shadows_ninth_as_of_H.md").read_text()
    f = t["figures"]
    plan = " ".join((ROOT / "bench/results/real_shadows_ninth_plan.md").read_text().split())
    k2 = f[N.K2]
    assert (f"| jacksum | {np.mean(k2['JS']):.3f} | {min(k2['JS']):.3f} | "
            f"{np.mean([np.mean(r['JS']) for r in f.values()]):.3f} | — |") in plan
    assert (f"| `jacksum_s` | {np.mean(k2['JSs']):.3f} | {min(k2['JSs']):.3f} | {t['decision']['class']:.3f} |") in plan
    need = 9 * N.POOLED_KEY_FLOOR - sum(k2["JSs"])
    assert f"K2 needs ≥ {need:.3f} on pool I" in plan


@pytest.mark.slow  # the nine pools' memorization stores (about 10 s)
def test_the_outcome_follows_from_the_stores_and_the_pipeline_follows_it():
    """The ninth table regenerates byte for byte; jacksum_s was adopted and `mixed` reads it
    for the Feldman-Zhang figures at the common point only, on the real shadows' recipe; the
    plan, README and report quote the table."""
    pools, full = N.load("I")
    lines, t = N.table(pools, full)
    assert "\n".join(lines) + "\n" == (ROOT / "bench/results/real_shadows_ninth.md").read_text()
    dec, f = t["decision"], t["figures"]
    assert dec["adopted"]
    from bnmem.attack import intervals as I
    assert I.MIXED_RULES[("mem", "common")] == "jacksum_s" and I.HALVES_FALLBACK[("mem", "common")] == "jacksum"
    for fig, want in (("fz_flipped/heldout@common", "jacksum_s"), ("fz_ood/fit@common", "jacksum_s"),
                      ("fz_flipped/loss@common", "jacksum"), ("in_acc_flipped/fit@common", "jacksum"),
                      ("fz_flipped/heldout@overlap", "jacksum"), ("fz_flipped@equal", "jacksum")):
        assert I.mixed_procedure(fig) == want, fig
    assert I.mixed_procedure("fz_flipped/heldout@common", 32) == "jacksum"
    assert I.rules_for(8, 50)[("mem", "common")] == "jacksum"
    k1, k2 = f[N.K1], f[N.K2]
    flat = lambda p: " ".join((ROOT / p).read_text().split())  # noqa: E731
    plan, readme, report = flat("bench/results/real_shadows_ninth_plan.md"), flat("README.md"), flat("report.md")
    assert (f"| `jacksum_s` | {k2['JSs'][-1]:.3f} / {k1['JSs'][-1]:.3f}: passes | {dec['lowest']:.3f} (K2) / "
            f"{dec['class']:.3f}: passes | **adopted** |") in plan
    assert f"| jacksum (reported) | {k2['JS'][-1]:.3f} / {k1['JS'][-1]:.3f} |" in plan
    # the report quotes jacksum's nine-pool K2 as the rule before; jacksum_s's figures are the
    # ten pools' since the tenth plan (tests/test_tenth.py)
    assert f"({np.mean(k2['JS']):.3f} over nine), the rule before it" in report
    ratios = [x for r in f.values() for x in r["ratio"]]
    assert f"{100 * (min(ratios) - 1):.0f}–{100 * (max(ratios) - 1):.0f} % wider" in plan
    assert (f"**`jacksum_s` adopted** (pool I: K2 {k2['JSs'][-1]:.3f}, K1 {k1['JSs'][-1]:.3f}; nine pools: "
            f"K2 {np.mean(k2['JSs']):.3f}, class {dec['class']:.3f})") in readme
    # after the review: V_j's effective df, single intervals' widths, what pool I could show
    df2 = k2["vj_df"]
    assert (f"about {np.mean(df2):.1f} df on K2 ({min(df2):.1f}–{max(df2):.1f} per pool) and under 1 on K1"
            in readme and max(k1["vj_df"]) < 1.2 and np.mean(k1["vj_df"]) < 1)
    w = [float(np.nanmax(N.widen(d, k))) for d in pools for k in f] + [float(np.nanmin(N.widen(d, k))) for d in pools for k in f]
    assert f"({min(w):.3f}–{max(w):.3f})" in plan and f"single intervals {100 * (min(w) - 1):.0f}–{100 * (max(w) - 1):.0f} %" in readme
    assert k2["JS"][-1] >= N.KEY_FLOOR_FRESH[N.K2] and k1["JS"][-1] >= N.KEY_FLOOR_FRESH[N.K1]  # jacksum passes gate 1 too
    assert f"jacksum itself would have passed gate 1 ({k2['JS'][-1]:.3f} / {k1['JS'][-1]:.3f})" in readme


def test_the_default_runs_memorization_reads_jacksum_s():
    """On the committed default run (results/membership.json): every comparison's
    Feldman-Zhang difference at the common point of matched held-out accuracy and of matched
    fit records jacksum_s and is ± t_nu sqrt(V_j + V_s) from its recorded SDs, nu with V_s
    on the samples' draws less one; the other memorization reads there record jacksum."""
    import json
    from bnmem.attack.intervals import variance_from_sd
    m = json.loads((ROOT / "results/membership.json").read_text())
    assert m["rules"]["mem@common"] == "jacksum_s"
    seg = m["segments"]["samples"]
    n = 0
    for comp, x in m["frontier"]["compare"].items():
        for crit, c in x["criteria"].items():
            for f, fig in c["figures"].items():
                at = fig["at_common"]
                if not (f.startswith("fz_") or f.startswith("in_acc")) or at.get("hi") is None:
                    continue
                v = {k: variance_from_sd(s) for k, s in at["sd"].items()}
                if f in ("fz_flipped", "fz_ood") and crit in ("heldout", "fit"):
                    assert at["rule"] == "jacksum_s", (comp, crit, f)
                    nu = N.nu(v["jackknife"], v["samples"], draws=seg[1] - seg[0])
                    want = stats.t.ppf(0.975, nu) * np.sqrt(v["jackknife"] + v["samples"])
                    n += 1
                else:
                    assert at["rule"] == "jacksum", (comp, crit, f)
                    want = 1.96 * np.sqrt(v["jackknife"] + v["samples"])
                assert at["hi"] - at["value"] == pytest.approx(want, rel=1e-9), (comp, crit, f)
    assert n == 4 * len(m["frontier"]["compare"])


@pytest.mark.parametrize("n_pairs,n_boot,recipe,want", [
    (8, 100, True, "jacksum_s"), (8, 100, False, "jacksum"), (8, 40, True, "jacksum"),
    (8, 98, True, "jacksum"), (16, 100, True, "jacksum")])
def test_the_attack_stages_plan_keeps_jacksum_s_to_its_scope(n_pairs, n_boot, recipe, want):
    """The plan the attack stage draws (resample.draw_plan) reads jacksum_s for memorization at
    the common point only on the real shadows' recipe at 8 pairs with at least 100 draws, as
    rules_for says (jacksum_s reads rows every run draws, so the rows' absence cannot turn it
    off as it does the halves and delete-d rules); each record's rule is then the run's."""
    from bnmem.attack import intervals as I
    from bnmem.attack.resample import draw_plan
    kind = np.where(np.arange(200) < 20, 1, 0).astype(np.int8)
    _, _, plan = draw_plan(kind, n_pairs, n_boot, np.random.default_rng(0), "mixed", recipe)
    var = {"jackknife": 4e-4, "samples": 3e-4, "pairs": 2e-4, "both": 5e-4}
    assert plan.rule_for("fz_flipped/heldout@common", var) == want
    assert I.rules_for(n_pairs, n_boot, recipe)[("mem", "common")] == want
    assert I.for_arms(plan, "groupnorm", "batchnorm").rule_for("fz_flipped/heldout@common", var) == "jacksum"


def test_simulated_runs_read_jacksum_at_the_common_point():
    """A simulated run of `mixed` (coverage_matched: simulated logits, not the real shadows'
    recipe) reads jacksum for memorization at the common point, not jacksum_s."""
    from bnmem.attack import coverage_matched as cov
    kind = np.where(np.arange(300) < 30, 1, 0).astype(np.int8)
    out = cov._run((16, 300, kind, 100, 3, ("mixed", "jacksum", "jacksum_s"), {}))
    j = [f for f, _, _ in cov.FIGURES].index("fz_flipped_matched")
    assert np.array_equal(out["mixed"][:, j], out["jacksum"][:, j], equal_nan=True)
    assert not np.array_equal(out["jacksum_s"][:, j], out["jacksum"][:, j], equal_nan=True)


def _record(value, half, rule="jacksum_s", **sd):
    return {"value": value, "lo": value - half, "hi": value + half, "rule": rule, "sd": sd}


def test_the_report_names_narrow_matched_reads():
    """marginal_reads lists a primary matched read whose interval excludes 0 by less than a
    quarter of its half-width, with |value| / sd under its rule and the recorded
    alternatives; one that excludes 0 widely, or covers it, is not listed. On the default
    run: the regularizer's memorization read, and the report says so."""
    import json
    from bnmem.report.markdown import _marginal_text, marginal_reads
    figs = {"fz_flipped": {"at_common": _record(0.03, 0.028, jackknife=0.01, samples=0.005,
                                                delete4=0.015, halves=-0.002, pairs=0.03)},
            "fz_ood": {"at_common": _record(0.03, 0.01, jackknife=0.004, samples=0.003)},
            "auc_all": {"at_common": _record(0.01, 0.02, rule="delete4_halves", delete4=0.01, halves=0.0)}}
    m = {"frontier": {"compare": {"a_minus_b": {"criteria": {"heldout": {"figures": figs}}}}}}
    got = marginal_reads(m)
    assert [g["figure"] for g in got] == ["fz_flipped"]
    g = got[0]
    assert g["margin"] == pytest.approx(0.002) and g["z"] == pytest.approx(0.03 / np.hypot(0.01, 0.005))
    assert g["alternatives"]["delete-4 with the halves' samples' part"] == pytest.approx(2.0)  # halves floored at 0
    assert g["alternatives"]["the pairs' bootstrap"] == pytest.approx(1.0)
    real = json.loads((ROOT / "results/membership.json").read_text())
    rows = marginal_reads(real)
    assert [(r["comparison"], r["figure"]) for r in rows] == [("batchnorm_reg_minus_batchnorm", "fz_flipped")]
    report = (ROOT / "report.md").read_text()
    assert all(line in report for line in _marginal_text(real))
    assert f"excludes 0 by {100 * rows[0]['margin']:.2f} points, |value| / sd {rows[0]['z']:.2f}" in report
