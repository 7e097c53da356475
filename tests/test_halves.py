"""The "halves" design (bnmem.attack.resample.halves_rows) and its covariance
(bnmem.attack.intervals.halves_covariance) where the truth is known: a figure that is the
weighted mean over pairs and samples of a + b + ab, so the samples' part of its variance
(b's alone) and the interaction's are known exactly."""
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from bnmem.attack.intervals import IntervalPlan, halves_covariance, halves_groups
from bnmem.attack.resample import draw_designs, halves_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import real_shadow_halves as rsh  # noqa: E402  (bench/real_shadow_halves.py)
from test_real_shadows import KEY, fake_study  # noqa: E402


def test_halves_rows_split_the_pairs_and_share_the_reweighting():
    kind = np.repeat([0, 1, 2], [50, 20, 10])
    rng = np.random.default_rng(0)
    for p in (4, 5, 8, 9):
        c, w = halves_rows(kind, p, 30, rng)
        assert c.shape == (60, p) and w.shape == (60, kind.size)
        a, b = c[0::2], c[1::2]
        assert not ((a > 0) & (b > 0)).any()            # no pair in both halves
        assert ((a > 0) | (b > 0)).all()                # every pair in one
        assert (a.sum(1) == p).all() and (b.sum(1) == p).all()
        assert ((a > 0).sum(1) == p // 2).all()
        assert np.array_equal(w[0::2], w[1::2])         # one reweighting per two rows
        assert not np.array_equal(w[0], w[2])
        for k in np.unique(kind):                       # stratified: every kind keeps its size
            assert (w[:, kind == k].sum(1) == (kind == k).sum()).all()
        groups = halves_groups(30)
        assert [g.size for g in groups] == [6] * 5
        for g in groups:                                # one split per group ...
            assert len({tuple(r) for r in (a[g] > 0)}) == 1
        assert len({tuple(a[g[0]] > 0) for g in groups}) > 1   # ... drawn anew per group


def test_draw_designs_lays_out_the_halves_segment_after_the_others():
    kind = np.zeros(40, int)
    counts, weights, seg = draw_designs(kind, 8, 20, np.random.default_rng(1),
                                        ("jackknife", "samples", "halves"))
    assert seg == {"jackknife": (1, 9), "samples": (9, 29), "halves": (29, 49)}
    assert counts.shape == (49, 8) and weights.shape == (49, 40)
    # drawing the halves last leaves the other designs' rows as they were without it
    c0, w0, _ = draw_designs(kind, 8, 20, np.random.default_rng(1), ("jackknife", "samples"))
    assert np.array_equal(counts[:29], c0) and np.array_equal(weights[:29], w0)


def _figure(x: np.ndarray, counts: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted mean of x [P, N] per row of (pair counts, sample weights)."""
    return np.einsum("rp,pn,rn->r", counts, x, weights) / (counts.sum(1) * weights.sum(1))


@pytest.mark.parametrize("sd_b,sd_ab", [(0.0, 3.0), (1.0, 3.0), (1.0, 0.0)])
def test_halves_covariance_estimates_the_samples_part_alone(sd_b, sd_ab):
    """Over 300 data sets of P = 8 pairs x N = 200 samples: the mean halves covariance is
    Var(b)/N within 4 Monte Carlo SEs (0 where b = 0, however large the interaction), while
    the samples-only bootstrap's V_s counts the interaction too (it fails the same null)."""
    p, n, kind = 8, 200, np.zeros(200, int)
    rng = np.random.default_rng(7)
    cov, v_s = [], []
    for _ in range(300):
        x = (rng.normal(0, 1, (p, 1)) + rng.normal(0, sd_b, (1, n))
             + rng.normal(0, sd_ab, (p, n)))
        counts, weights, seg = draw_designs(kind, p, 100, rng, ("samples", "halves"))
        var = IntervalPlan("both", p, seg).variances(_figure(x, counts, weights))
        cov.append(var["halves"])
        v_s.append(var["samples"])
    cov, v_s = np.array(cov), np.array(v_s)
    want = sd_b ** 2 / n * (n - 1) / n       # the bootstrap's variance of a mean of b
    se = cov.std(ddof=1) / np.sqrt(cov.size)
    assert abs(cov.mean() - want) < 4 * se + 1e-12
    inter = sd_ab ** 2 / (p * n)
    if inter > 0:  # V_s holds b's part and the interaction's: far from the halves' figure
        assert v_s.mean() > want + 0.5 * inter
        assert abs(v_s.mean() - want) > 10 * se


def test_halves_covariance_pools_within_splits_and_needs_enough_finite_twos():
    rng = np.random.default_rng(3)
    rows = rng.normal(size=40)
    x, y = rows[0::2], rows[1::2]
    want = sum(((x[g] - x[g].mean()) * (y[g] - y[g].mean())).sum() for g in halves_groups(20)) / 15
    assert halves_covariance(rows) == pytest.approx(want)
    # a shift per split (the halves' pairs change between splits) does not move it
    shift = np.repeat(rng.normal(0, 5, 5), 4)
    moved = rows.copy()
    moved[0::2] += shift
    moved[1::2] -= shift
    assert halves_covariance(moved) == pytest.approx(want)
    assert halves_groups(4) == [pytest.approx(np.array([0, 1])), pytest.approx(np.array([2, 3]))]
    rows[[0, 2, 4, 6, 8]] = np.nan                      # 5 of 20 twos lost: below 80 %
    assert halves_covariance(rows) is None
    assert halves_covariance(rows, min_share=0.5) is not None
    # a half of one pair has no leave-one-pair-out shadows: P < 4 gives no figure at all
    assert halves_covariance(np.full(10, np.nan)) is None


# --- the real-shadow analysis of the halves' rules (bench/real_shadow_halves.py) ---------



def fake_halves(seed: int, v_h_scale: float, v_h_sd: float = 0.0) -> dict:
    """fake_study's pool with halves records [point, V_h, V_j]: V_j the true T_p, V_h the
    true T_s x v_h_scale plus N(0, v_h_sd) noise (negative draws make the floor bind)."""
    d = fake_study(seed, 1.0)
    rng = np.random.default_rng([seed, 1])
    r = d["cov"][KEY]
    vh = r[:, 2] * v_h_scale + rng.normal(0, v_h_sd, len(r))
    d["hcov"] = {KEY: np.column_stack([r[:, 0], vh, r[:, 4]])}
    d["has_cov"] = True
    return d


@pytest.mark.parametrize("v_h_scale, lo, hi", [(1.0, 0.935, 0.965), (0.0, 0.86, 0.92),
                                               (4.0, 0.985, 1.0)])
def test_jackhalves_covers_by_its_samples_part(v_h_scale, lo, hi):
    """V_j + V_h with the true parts covers 0.95 over 40 pools; with V_h = 0 (the samples'
    3/7 of the variance dropped) it under-covers, with 4x V_h it over-covers."""
    covs = []
    for s in range(40):
        d = fake_halves(s, v_h_scale)
        comp = rsh.components(d, KEY)
        p, _, _, _ = rsh.per_subset(d, KEY, "H", comp)
        covs.append(p.mean())
    assert lo <= np.mean(covs) <= hi


def test_jackhalves_floor_and_quantiles():
    r = np.array([[0.0, -1.0, 4.0], [0.0, 5.0, 4.0]])
    assert np.allclose(rsh.variance(r), [4.0, 9.0])       # a negative V_h adds nothing
    z, t = rsh.half_width(r, "H"), rsh.half_width(r, "Ht")
    assert np.allclose(t / z, stats.t.ppf(0.975, 7) / 1.959963984540054)
    s = rsh.half_width(r, "Hs")
    # Satterthwaite: where V_h is 0 its df are the jackknife's (7); with V_h > 0, more
    assert s[0] == pytest.approx(t[0])
    nu = 81 / (16 / 7 + 25 / 45)
    assert s[1] == pytest.approx(stats.t.ppf(0.975, nu) * 3)
    assert z[1] < s[1] < t[1]


def test_floor_split_and_selection_criteria():
    d = fake_halves(0, 1.0, v_h_sd=3e-4)                  # V_h negative in ~16 % of subsets
    comp = {KEY: rsh.components(d, KEY)}
    c = rsh.cell(d, [KEY], comp, "H")
    assert 0.10 < c["share"] < 0.25
    assert c["bound"] < c["free"]                         # the floor costs the samples' part
    c["ts15"] = rsh.cell(d, [KEY], comp, "H", 1.5)
    c["emp"] = rsh.cell(d, [KEY], comp, "H", empirical=True)
    assert abs(c["emp"]["coverage"] - c["coverage"]) < 0.02   # normal s: both reads agree
    assert c["range"][0] < c["coverage"] < c["range"][1]
    ok, why = rsh.passes({**c, "bound": 0.90, "n_bound": 60}, (0.93, 0.97))
    assert not ok and "binds" in why
    ok, why = rsh.passes({**c, "n_bound": 49, "bound": 0.90}, (0.0, 1.0))
    assert "binds" not in why                             # under 50 records: not judged
    assert "V_h / B8" in rsh.passes(c, (0.0, 1.0), q2=0.7)[1]
    assert "empirical" in rsh.passes({**c, "emp": {**c["emp"], "coverage": 0.9}}, (0.93, 0.97))[1]


def test_block_covariance_removes_the_interaction():
    """16 blocks sharing a samples' part s (Var 1e-4) plus each its own interaction noise
    (Var 1.6e-3) over 200 reweightings: B8 recovers Var(s); T_s (the variance of the blocks'
    mean) holds the interaction / 16 on top (2e-4)."""
    rng = np.random.default_rng(5)
    b8, ts = [], []
    for _ in range(30):
        s = rng.normal(0, 1e-2, 200)
        blk = s[None, :] + rng.normal(0, 4e-2, (16, 200))
        b8.append(rsh.block_covariance(blk))
        ts.append(blk.mean(0).var(ddof=1))
    assert np.mean(b8) == pytest.approx(1e-4, rel=0.15)
    assert np.mean(ts) == pytest.approx(2e-4, rel=0.1)


def test_the_pipelines_halves_rules_equal_the_analysis():
    """IntervalPlan's jackhalves / _t / _s (the procedures `mixed` can name) give the
    half-widths bench/real_shadow_halves.py scores, from the same variances; the halves rows
    come last, so the other designs' draws (and intervals) are unchanged by them."""
    from bnmem.attack.intervals import designs, signed_sd, variance_from_sd
    seg = {"jackknife": (1, 9), "halves": (9, 109)}
    for vh in (-2e-5, 0.0, 3e-5):
        rec = np.array([[0.01, vh, 4e-5]])
        for proc, rule in (("jackhalves", "H"), ("jackhalves_t", "Ht"), ("jackhalves_s", "Hs")):
            assert designs(proc) == ("jackknife", "halves")
            lo, hi = IntervalPlan(proc, 8, seg).ci_from(0.01, {"jackknife": 4e-5, "halves": vh})
            want = rsh.half_width(rec, rule)[0] * (1.96 / rsh.Z if rule == "H" else 1.0)
            assert (hi - lo) / 2 == pytest.approx(want, rel=1e-9)  # the pipeline's z is 1.96
        assert variance_from_sd(signed_sd(vh)) == pytest.approx(vh, abs=1e-20)
    assert signed_sd(-4.0) == -2.0 and variance_from_sd(None) is None


def test_mixed_falls_back_where_the_halves_rule_cannot_be_read(monkeypatch):
    """With a halves' rule adopted for (mem, common): its V_h undefined, too few shared
    reweightings, another pair count, or an IN-accuracy read (not studied) give the rule it
    replaced; otherwise the halves' rule."""
    from bnmem.attack import intervals as I
    monkeypatch.setitem(I.MIXED_RULES, ("mem", "common"), "jackhalves_t")
    monkeypatch.setitem(I.HALVES_FALLBACK, ("mem", "common"), "jacksum")
    var = {"jackknife": 4e-4, "samples": 3e-4, "halves": 1e-4}
    fig = "fz_flipped@common"
    ok = I.IntervalPlan("mixed", 8, {"halves": (9, 109)})
    t = float(stats.t.ppf(0.975, 7))
    lo, hi = ok.ci_from(0.0, var, fig)
    assert hi == pytest.approx(t * np.sqrt(5e-4))
    jacksum = 1.96 * np.sqrt(7e-4)
    assert ok.ci_from(0.0, {**var, "halves": None}, fig)[1] == pytest.approx(jacksum)
    assert I.IntervalPlan("mixed", 8, {"halves": (9, 49)}).ci_from(0.0, var, fig)[1] == pytest.approx(jacksum)
    assert I.IntervalPlan("mixed", 16, {"halves": (9, 109)}).ci_from(0.0, var, fig)[1] == pytest.approx(jacksum)
    assert ok.ci_from(0.0, var, "in_acc_flipped@common")[1] == pytest.approx(jacksum)
    assert "halves" in I._mixed_designs()


def test_the_pairs_jackknife_counts_a_target_by_shadow_term_2p_minus_2_over_p_minus_2():
    """The pipeline's delete-one jackknife (IntervalPlan's, on draw_designs' rows) against
    theory: a figure that is a mean of per-pair terms (memorization: each model's own IN -
    OUT accuracy) gets its variance; a term per (target, shadow) pair, as an attack's
    figures hold, is counted 2(P - 1)/(P - 2) = 2.33x at 8 pairs (Efron-Stein). On real
    shadows the attack's V_j / T_p is 1.5-4.3 per read: above that ceiling for most reads,
    so this term alone does not explain it (README, real_shadows_halves_plan.md's outcome)."""
    p, reps = 8, 3000
    kind = np.zeros(4, int)
    counts, _, seg = draw_designs(kind, p, 0, np.random.default_rng(0), ("jackknife",))
    plan = IntervalPlan("jackknife", p, seg)
    w = counts[:, :, None] * counts[:, None, :] * ~np.eye(p, dtype=bool)  # targets i != shadows j
    rng = np.random.default_rng(11)
    v1, v2, pts = [], [], []
    for _ in range(reps):
        a, b = rng.normal(size=p), rng.normal(size=(p, p))
        first = counts @ a / counts.sum(1)              # rows: the point, then each pair left out
        second = (w * b).sum((1, 2)) / w.sum((1, 2))
        v1.append(plan.variances(first)["jackknife"])
        v2.append(plan.variances(second)["jackknife"])
        pts.append(second[0])
    assert np.mean(v1) == pytest.approx(1.0 / p, rel=0.06)  # a mean of 8 unit-variance terms
    assert np.mean(v2) / np.var(pts) == pytest.approx(2 * (p - 1) / (p - 2), rel=0.06)


def test_a_halves_rule_needs_its_fallback():
    from bnmem.attack.intervals import check_halves_rules
    check_halves_rules({("mem", "common"): "jacksum"}, {})
    check_halves_rules({("mem", "common"): "jackhalves_t"}, {("mem", "common"): "jacksum"})
    with pytest.raises(RuntimeError, match="without a HALVES_FALLBACK"):
        check_halves_rules({("mem", "common"): "jackhalves_t"}, {})


ROOT = Path(__file__).resolve().parents[1]


def test_readme_quotes_the_halves_outcome():
    """README's diagnosis table and the halves' selection, recomputed from the committed
    stores (pools A, B, C) by the study's analysis; nothing adopted."""
    from bnmem.attack import intervals as I
    import real_shadow_rules as rsr
    a = rsh.load(ROOT / "results/real_shadows_seed0.jsonl", ROOT / "results/real_shadows_halves_seed0.jsonl")
    b = rsr.load(ROOT / "results/real_shadows_seed1.jsonl", 200)
    c = rsh.load(ROOT / "results/real_shadows_seed2.jsonl", ROOT / "results/real_shadows_halves_seed2.jsonl")
    readme = (ROOT / "README.md").read_text()
    for row in rsh.diagnose_rows({"A": a, "B": b, "C": c}):
        assert row in readme, row
    tab = rsh.table(a)
    assert {cls: rsh.select(tab, cls)[0] for cls in rsr.CLASSES} == {
        cls: today for cls, (_, today) in rsr.CLASSES.items()}     # nothing qualifies
    flat = " ".join(readme.split())
    for cls, rule in (("A", "H"), ("C", "Ht"), ("F", "Ht")):
        assert f"{tab[cls]['rules'][rule]['coverage']:.3f}" in flat
    # the exploratory sentences: the excess split, reads above the 2.33 ceiling, V_p below V_j
    diag = {p: rsh.diagnose(d) for p, d in (("A", a), ("B", b))}
    split = [f"{diag[p]['A']['vj_tp'] - 1:.2f}" for p in "AB"]
    assert f"V_j − T_p = {split[0]} / {split[1]} T_p" in flat
    vs = [f"{diag[p]['A']['vs_tp'] - diag[p]['A']['b8_tp']:.2f}" for p in "AB"]
    assert f"B8 = {vs[0]} / {vs[1]} T_p" in flat
    attack = "ABDEG"
    above = [sum(v[0] > 2 * 7 / 6 for (cls, _), v in rsh.per_read(d).items() if cls in attack)
             for d in (a, b, c)]
    assert f"{min(above)}–{max(above)} of 39 reads per pool above 2.33" in flat
    below = [sum(v[1] < v[0] for (cls, _), v in rsh.per_read(d).items() if cls in attack)
             for d in (a, b)]
    assert f"V_p is below V_j in {min(below)}–{max(below)} of 39 reads" in flat
    import real_shadow_pairs_curve as rpc
    cv = rpc.curve(ROOT / "results/real_shadows_curve_seed0.jsonl")
    auc = [v for cls in "ABE" for v in cv[cls].values()]
    assert f"n T_p(n) / 8 T_p(8) {min(auc):.2f}–{max(auc):.2f}" in flat
    assert not any(p in I.HALVES_PROCEDURES for p in I.MIXED_RULES.values())
    # each fallback is the rule in use, or what the real-shadow rule in use replaced
    assert all(I.MIXED_RULES[k] in (*I.REAL_SHADOW_PROCEDURES, v) for k, v in I.HALVES_FALLBACK.items())
