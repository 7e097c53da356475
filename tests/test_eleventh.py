"""The eleventh plan (bench/results/real_shadows_eleventh_plan.md): D4 with a Satterthwaite
quantile (`delete4_halves_s`, D4s) for the AUC difference at the common point, judged on an
eleventh, fresh pool (K). The pipeline's interval is the study's, it covers about 0.95 where
the truth is known and D4's 1.96 does not, and the check made before pool K reproduces the
tenth plan's figures."""
import argparse
import tempfile
from pathlib import Path

import numpy as np
import pytest

from bnmem.attack.intervals import DELETED_PROCEDURES, IntervalPlan, designs
from conftest import ROOT, load_script

E11 = load_script("bench/real_shadow_eleventh.py")
flat = lambda p: " ".join((ROOT / p).read_text().split())  # noqa: E731
HEADLINE = "batchnorm_minus_none/auc_matched"


def _pool_a():
    return E11.PO.load_pool(0, 200)


def test_the_studys_d4s_is_the_pipelines():
    """On pool A's stored variances (V_4, V_h per coverage subset) of every class A key,
    IntervalPlan('delete4_halves_s') gives the study's half-width, t on (V_4 + V_h+)² /
    (V_4² / 7), to 1e-12; it is wider than delete4_halves' 1.96 by that quantile; and with
    one pair there is no interval."""
    d = _pool_a()
    plan = IntervalPlan("delete4_halves_s", 8, {"delete4": (1, 29), "halves": (29, 229)})
    d4 = IntervalPlan("delete4_halves", 8, {"delete4": (1, 29), "halves": (29, 229)})
    assert "delete4_halves_s" in DELETED_PROCEDURES and designs("delete4_halves_s") == ("delete4", "halves")
    n = 0
    for key in E11.H.class_keys(d, "A"):
        study = E11.D.half_width(d, key, "D4s", "A")
        for i in np.flatnonzero(np.isfinite(study))[:40]:
            var = {"delete4": float(d["dcov"][key][i, 3]), "halves": float(d["hcov"][key][i, 1])}
            lo, hi = plan.ci_from(0.1, var, "auc_all/heldout@common")
            assert hi - 0.1 == pytest.approx(study[i], rel=1e-12) and 0.1 - lo == pytest.approx(study[i], rel=1e-12)
            lo4, hi4 = d4.ci_from(0.1, var, "auc_all/heldout@common")
            assert hi - 0.1 > hi4 - 0.1
            n += 1
    assert n == 6 * 40
    assert plan.ci_from(0.1, {"delete4": 0.0, "halves": 1e-4}, "x")[1] - 0.1 == pytest.approx(1.96 * 1e-2, rel=1e-3)
    assert IntervalPlan("delete4_halves_s", 1, {"delete4": (1, 29), "halves": (29, 229)}).ci_from(
        0.1, {"delete4": 1e-4, "halves": 1e-4}, "x") == (None, None)


@pytest.mark.parametrize("share", [0.9, 0.3])
def test_d4s_covers_where_the_truth_is_known(share):
    """A run's error: the mean of 8 independent pairs' effects plus a normal samples' part
    (`share` of the variance the pairs'). V_4 is the delete-4 jackknife over the 14
    complementary splits (intervals.deleted_variance, about 7 df for a mean), V_h the samples'
    variance known (many df). D4s covers 0.94-0.96; where the pairs dominate D4 (1.96)
    covers under 0.935, the shortfall D4s mends."""
    from itertools import combinations

    from bnmem.attack.intervals import deleted_variance
    rng = np.random.default_rng(2027)
    runs = 6000
    vp, vs = share, 1 - share
    splits = [s for s in combinations(range(8), 4) if 0 in s]
    comp = [tuple(sorted(set(range(8)) - set(s))) for s in splits]
    pairs = rng.normal(0, np.sqrt(8 * vp), (runs, 8))
    err = pairs.mean(axis=1) + rng.normal(0, np.sqrt(vs), runs)
    plan = IntervalPlan("delete4_halves_s", 8, {"delete4": (1, 29), "halves": (29, 229)})
    hit_s = hit_4 = 0
    for r in range(runs):
        rows = np.array([pairs[r, list(s)].mean() for s in splits] + [pairs[r, list(c)].mean() for c in comp])
        v4 = deleted_variance(rows, 8, 4)
        half = plan.ci_from(0.0, {"delete4": v4, "halves": vs}, "x")[1]
        hit_s += abs(err[r]) <= half
        hit_4 += abs(err[r]) <= 1.96 * np.sqrt(v4 + vs)
    assert 0.94 <= hit_s / runs <= 0.96
    if share > 0.5:
        assert hit_4 / runs < 0.935


def test_decision_rule_on_hand_made_cells():
    """The plan's rule: both gates pass on their lower side -> adopt; a lower-side failure
    on pool K alone or over the pools -> jacksum stays; an upper-side failure alone adopts
    and is named."""
    def cell(cov, low=None, ts15=None):
        c = {"coverage": cov, "min": low if low is not None else cov - 0.01, "max": cov + 0.01,
             "free": cov, "bound": cov, "n_bound": 400, "range": [cov - 0.01, cov + 0.01],
             "width_calibrated": 1.2, "share": 0.4}
        c["ts15"] = {**c, "min": ts15 if ts15 is not None else c["min"] - 0.01}
        c["emp"], c["b8"] = dict(c), dict(c)
        return c
    ok = E11.decide({"K": cell(0.96)}, cell(0.965), "K")
    assert ok["adopt"] and ok["action"] == "adopt D4s for class A"
    hi = E11.decide({"K": cell(0.975)}, cell(0.973), "K")
    assert hi["adopt"] and "over-covers" in hi["action"]
    low = E11.decide({"K": cell(0.95, low=0.905)}, cell(0.965), "K")
    assert not low["adopt"] and low["action"].startswith("jacksum stays") and "lowest key 0.905" in low["action"]
    ts = E11.decide({"K": cell(0.95)}, cell(0.95, ts15=0.915), "K")
    assert not ts["adopt"] and "lowest key at T_s x 1.5 0.915" in ts["action"]
    assert E11.decide({"K": cell(0.95)}, cell(0.925), "K")["adopt"] is False


@pytest.mark.slow  # ten pools' AUC and memorization stores (about 12 s)
def test_the_check_before_pool_k_reproduces_the_tenths_figures():
    """`table --as-of J` regenerates byte for byte, and its per-key D4s figures (mean over
    the ten pools, lowest pool) are the tenth table's reported ones: the headline key 0.963
    (0.942), as the plan quotes."""
    out = ROOT / "bench/results/real_shadows_eleventh_as_of_J.md"
    with tempfile.TemporaryDirectory() as tmp:
        got = Path(tmp) / "j.md"
        E11.table_main(argparse.Namespace(as_of="J", out=got))
        text = got.read_text()
    assert text == out.read_text()
    tenth = (ROOT / "bench/results/real_shadows_tenth.md").read_text()
    after = tenth.split("D4 with Satterthwaite's quantile (V_4 on 7 df)", 1)[1]
    line = next(ln for ln in after.splitlines() if ln.startswith("- A: "))
    part = text.split("## Class A under D4s", 1)[1].split("The cells the gates read", 1)[0]
    rows = [ln for ln in part.splitlines() if ln.startswith("| `")]
    assert len(rows) == 6
    for row in rows:
        key = row.split("`")[1]
        assert f"`{key}` {row.split('|')[-2].strip()}" in line
    assert f"| `{HEADLINE}` (headline) |" in text and "| 0.963 (0.942) |" in text
    assert "0.963 (lowest pool 0.942)" in flat("bench/results/real_shadows_eleventh_plan.md")


def _outcome():
    return E11.table_text(E11.POOLS, E11.auc_part, E11.mem_load("K"), E11.mem_part)


@pytest.mark.slow  # eleven pools' AUC and memorization stores (about 15 s)
def test_the_outcome_follows_from_the_stores_and_the_pipeline_reads_it():
    """The eleventh table regenerates byte for byte from the committed stores and pool K's
    full read; D4s passed both gates on their lower side, so `mixed` reads delete4_halves_s
    for the two studied figures at the common point (jacksum its fallback); README and the
    report quote the outcome's figures, and README the default run's widths against
    jacksum's, recomputed from results/membership.json's recorded SDs."""
    import json

    from bnmem.attack import intervals as I
    from bnmem.report.markdown import _procedure_text
    text, got, m = _outcome()
    assert text == (ROOT / "bench/results/real_shadows_eleventh.md").read_text()
    dec = got["decision"]
    assert dec["adopt"] and dec["action"].startswith("adopt D4s for class A")
    assert I.MIXED_RULES[("auc", "common")] == "delete4_halves_s" and I.HALVES_FALLBACK[("auc", "common")] == "jacksum"
    assert I.DELETED_STUDIED[("auc", "common")] == ("auc_all/heldout", "auc_all/fit")
    k, pooled, cov = got["per_pool"]["K"], got["pooled"], got["per_key"]
    head = cov[HEADLINE]
    readme = flat("README.md")
    report = " ".join(_procedure_text("mixed", 100, 8).split())
    lo_hi = f"{min(pooled['per_key']):.3f}–{max(pooled['per_key']):.3f}"
    assert k["min"] == min(c[-1] for c in cov.values()) == head[-1]  # the headline key is pool K's lowest
    for t in (f"on pool K the class covers {k['coverage']:.3f} (lowest key {k['min']:.3f}, the headline key; "
              f"{k['ts15']['min']:.3f} at T_s × 1.5)",
              f"over the eleven pools {pooled['coverage']:.3f}, every key {lo_hi} (the headline key "
              f"{np.mean(head):.3f}, lowest pool {min(head):.3f}), at {pooled['width_calibrated']:.2f} times a "
              f"calibrated width where D4 is {got['context']['all']['width_calibrated']:.2f} and covers "
              f"{got['context']['all']['coverage']:.3f} (the headline key "
              f"{E11.key_coverage(got['pools']['K'], HEADLINE, 'D4'):.3f} on K)",
              f"| `delete4_halves_s` | {k['coverage']:.3f} on the fresh pool K (lowest key {k['min']:.3f}); "
              f"{pooled['coverage']:.3f} over eleven pools, {lo_hi} per key, at {pooled['width_calibrated']:.2f}× "
              "a calibrated width",
              f"covered the class {k['coverage']:.3f} on an eleventh, fresh pool (lowest key {k['min']:.3f}, the "
              f"headline key) and {lo_hi} per key over eleven pools, at {pooled['width_calibrated']:.2f} times"):
        assert t in readme, t
    f = m["figures"]
    K1, K2 = E11.T.K1, E11.T.K2
    assert (f"(`jacksum_s`: K2 {f[K2]['JSs'][-1]:.3f}, K1 {f[K1]['JSs'][-1]:.3f}; over eleven pools K2 "
            f"{np.mean(f[K2]['JSs']):.3f}, the class {m['decision']['class']:.3f})") in readme
    assert (f"adopted `delete4_halves_s` on that fresh pool: {k['coverage']:.3f} there (lowest key {k['min']:.3f}, "
            f"the headline key), {lo_hi.replace('–', '-')} per key over eleven pools (the headline key "
            f"{np.mean(head):.3f}, lowest pool {min(head):.3f}), at {pooled['width_calibrated']:.2f} times") in report
    # the default run: D4s's intervals over jacksum's, from the recorded SDs
    mem = json.loads((ROOT / "results/membership.json").read_text())["frontier"]["compare"]
    ratios, recs = [], {}
    for comp, v in mem.items():
        for crit in ("heldout", "fit"):
            r = v["criteria"][crit]["figures"]["auc_all"]["at_common"]
            assert r["rule"] == "delete4_halves_s"
            var = {d: I.variance_from_sd(x) for d, x in r["sd"].items()}
            js = I.IntervalPlan("jacksum", 8, {}).ci_from(r["value"], var)
            ratios.append((r["hi"] - r["lo"]) / (js[1] - js[0]))
            recs[(comp, crit)] = (r, js)
    assert f"are {min(ratios):.2f}–{max(ratios):.2f} times jacksum's width" in readme
    r, js = recs[("batchnorm_minus_none", "heldout")]
    pct = lambda x: f"{100 * x:+.2f}"  # noqa: E731
    assert (f"-1.38 [{pct(js[0])}, {pct(js[1])}] to [{pct(r['lo'])}, {pct(r['hi'])}], "
            f"{(r['hi'] - r['lo']) / (js[1] - js[0]):.2f} times as wide") in readme


def test_a_p_value_reads_the_interval_with_the_quantile_it_was_made_with():
    """An interval made with Student's t records its df (IntervalPlan.summary), and the
    claims' one-sided p reads it with that t (verdict.p_values): on the default run's
    headline record (delete4_halves_s) the stored p_short is the t reading, not the normal
    one, which would be about 1e-10. Read as normal, a t(8) interval's p of 0.0028 (Holm's
    0.025 / 9) would read under 0.001: anticonservative."""
    import json

    from scipy import stats

    from bnmem.report.verdict import Evidence, p_values
    m = json.loads((ROOT / "results/membership.json").read_text())
    rec = m["frontier"]["compare"]["batchnorm_minus_none"]["criteria"]["heldout"]["figures"]["auc_all"]["at_common"]
    assert rec["rule"] == "delete4_halves_s" and 7 <= rec["df"] < 1e6
    e = Evidence.of(rec, training=True)
    assert e.df == rec["df"]
    sd = (rec["hi"] - rec["lo"]) / (2 * stats.t.ppf(0.975, rec["df"]))
    z = -(rec["value"] - 0.04) / sd  # the claim: BN raises AUC by >= 4 points (direction +1)
    beyond, short = p_values(e, 1, 0.04)
    assert short == pytest.approx(stats.t.sf(z, rec["df"]), rel=1e-9)
    assert beyond == pytest.approx(stats.t.cdf(z, rec["df"]), rel=1e-9)
    summary = json.loads((ROOT / "results/summary.json").read_text())
    claim = next(c for c in summary["claims"] if c["claim"].startswith("BN raises LiRA AUC by >= 4 points"))
    assert claim["p_short"] == pytest.approx(short, rel=1e-9) and claim["p_short"] > 1e-7
    normal = p_values(Evidence(e.value, e.lo, e.hi, True), 1, 0.04)[1]
    assert normal < 1e-8
    # the anticonservative case: a t(8) interval at the Holm boundary
    q8 = stats.t.ppf(0.975, 8)
    t_at = stats.t.isf(0.0028, 8)  # value / sd where the t reading gives p = 0.0028
    ev = Evidence(t_at, t_at - q8, t_at + q8, True, 8.0)
    assert p_values(ev, 1, 0.0)[0] == pytest.approx(0.0028, rel=1e-9)  # p of not beyond 0
    assert p_values(Evidence(ev.value, ev.lo, ev.hi, True), 1, 0.0)[0] < 0.001


def test_a_marginal_reads_sd_is_its_rules_and_a_rule_without_variance_falls_back():
    """markdown.marginal_reads' |value| / sd divides by the sd the rule's quantile multiplies
    (for delete4_halves_s sqrt(V_4 + max(V_h, 0)), not half-width / 1.96); and under `mixed` a
    real-shadow rule whose variance is not positive (V_4 = 0 and V_h <= 0) reads its
    fallback, jacksum, rather than publish a zero-width interval."""
    from bnmem.attack.intervals import IntervalPlan, rule_variance, signed_sd
    from bnmem.report.markdown import marginal_reads
    var = {"jackknife": 1.2e-4, "samples": 0.6e-4, "delete4": 1.0e-4, "halves": 0.2e-4, "pairs": 1e-4,
           "both": 2e-4}
    seg = {"halves": (1, 101), "delete4": (101, 129), "jackknife": (129, 137), "samples": (137, 237)}
    plan = IntervalPlan("mixed", 8, seg)
    v = 0.025
    lo, hi = plan.ci_from(v, var, "auc_all/heldout@common")
    assert plan.rule_for("auc_all/heldout@common", var) == "delete4_halves_s" and lo > 0
    rec = {"value": v, "lo": lo, "hi": hi, "rule": "delete4_halves_s", "sd": {k: signed_sd(x) for k, x in var.items()}}
    mem = {"frontier": {"compare": {"batchnorm_minus_none": {"criteria": {"heldout": {"figures": {
        "auc_all": {"at_common": rec}}}}}}}}
    (got,) = marginal_reads(mem, ratio=10.0)
    assert got["z"] == pytest.approx(v / np.sqrt(1.2e-4), rel=1e-9)
    assert got["z"] > v / ((hi - lo) / 2 / 1.96) * 1.05  # the old reading understated it
    nu = 1.2e-4 ** 2 / (1.0e-4 ** 2 / 7)
    from scipy import stats
    assert got["quantile"] == pytest.approx(stats.t.ppf(0.975, nu), rel=1e-9)
    assert "delete-4 with the halves' samples' part" not in got["alternatives"]  # its own variance
    assert set(got["alternatives"]) == {"the pairs' bootstrap", "pairs and samples drawn together"}
    old = {k: x for k, x in rec.items() if k != "rule"}  # a record older than the rule's record
    mem["frontier"]["compare"]["batchnorm_minus_none"]["criteria"]["heldout"]["figures"]["auc_all"]["at_common"] = old
    (got,) = marginal_reads(mem, ratio=10.0)
    assert got["rule"] is None and got["z"] == pytest.approx(v / ((hi - lo) / 2 / 1.96))
    flat = {**var, "delete4": 0.0, "halves": -1e-5}
    assert rule_variance("delete4_halves_s", flat) == 0.0
    assert plan.rule_for("auc_all/heldout@common", flat) == "jacksum"
    lo, hi = plan.ci_from(v, flat, "auc_all/heldout@common")
    assert hi - v == pytest.approx(1.96 * np.sqrt(1.8e-4))
