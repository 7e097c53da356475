"""The analysis of bench/results/real_shadows_keypooled_plan.md where the truth is known: the
first version's binomial figures (exact sums, checked against SciPy and a simulation; the
amendment retracts them as a model of the gates), the amended decision rule on hand-made
cells with each gate able to fail, the gates at the earlier floors against the earlier
`passes` on real cells, equal weights on one pool against that pool's cell, and the
calibrated rule the operating characteristics use."""
import copy
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import real_shadow_keypooled as K  # noqa: E402  (bench/real_shadow_keypooled.py)


@pytest.mark.parametrize("n,p", [(100, 0.95), (200, 0.94), (900, 0.91), (200, 0.5)])
def test_key_pass_is_the_binomial_tail(n, p):
    # P(X >= ceil(0.92 n)), X ~ Bin(n, p)
    want = stats.binom.sf(np.ceil(0.92 * n) - 1, n, p)
    assert K.key_pass(n, p) == pytest.approx(want, rel=1e-9, abs=1e-15)


def test_the_plans_figures():
    ch = K.chances()
    assert round(ch["four_pools"], 3) == 0.028 and round(ch["five_pools"], 3) == 0.014
    assert round(ch["pool_200"], 2) == 0.48 and round(ch["pool_100"], 2) == 0.26
    assert round(ch["pooled"], 2) == 0.96 and ch["subsets_pooled"] == 900
    assert round(ch["short_091_pooled"], 2) == 0.16 and round(ch["short_091_one_pool"], 2) == 0.37
    assert round(ch["short_090_pooled"], 2) == 0.02
    # the plan quotes the chance a short key fails: 1 - pass
    assert round(1 - ch["short_091_pooled"], 2) == 0.84 and round(1 - ch["short_090_pooled"], 2) == 0.98
    plan = (ROOT / "bench/results/real_shadows_keypooled_plan.md").read_text()
    for quote in ("is 0.48 (0.26 at 100", "(A, C, B, D) is **0.028**", "it is 0.014",
                  "probability **0.96**", "probability 0.84 (0.90:", "0.98), where one pool of 200 lets it pass with probability 0.37"):
        assert quote in " ".join(plan.split()), quote


def test_the_per_pool_floors_reject_a_calibrated_rule_in_simulation():
    """The first version's binomial figure (a model the amendment retracts) against a
    simulation of that model's gate: six independent keys,
    each subset covering with probability 0.95 (0.94 at T_s x 1.5), pools of 200 / 200 /
    100 / 200 subsets; all four pools pass both floors about 3 % of the time, the same keys
    pooled per key about 96 %."""
    rng = np.random.default_rng(5)
    sims = 4000
    sizes = [200, 200, 100, 200]

    def floors_pass(n, shape):
        hit = rng.random((*shape, n)) < 0.95
        hit15 = rng.random((*shape, n)) < 0.94
        return hit, hit15

    per_pool, pooled = [], []
    for _ in range(sims // 100):
        hs = [floors_pass(n, (100, K.KEYS_PER_CLASS)) for n in sizes]
        ok = np.ones(100, bool)
        for h, h15 in hs:
            ok &= (h.mean(-1) >= 0.92).all(-1) & (h15.mean(-1) >= 0.92).all(-1)
        per_pool.append(ok)
        cat = np.concatenate([h for h, _ in hs], -1), np.concatenate([h15 for _, h15 in hs], -1)
        pooled.append((cat[0].mean(-1) >= 0.92).all(-1) & (cat[1].mean(-1) >= 0.92).all(-1))
    four = np.concatenate(per_pool).mean()
    # the pooled simulation has 700 subsets a key (four pools), the plan's figure 900
    want = (K.key_pass(700, 0.95) * K.key_pass(700, 0.94)) ** K.KEYS_PER_CLASS
    assert abs(four - K.chances()["four_pools"]) < 0.01
    assert abs(np.concatenate(pooled).mean() - want) < 0.02


def _cell(cov=0.95, low=0.935, free=0.955, bound=0.945, n_bound=400, low15=0.925, b8=0.95,
          emp=0.95):
    return {"coverage": cov, "min": low, "max": 0.97, "free": free, "bound": bound,
            "n_bound": n_bound, "ts15": {"min": low15, "coverage": cov - 0.01},
            "b8": {"coverage": b8}, "emp": {"coverage": emp}}


def _tables(fresh=None, **cov):
    pools = {p: cov.get(p, 0.95) for p in ("A", "C", "B", "D", "E")}
    out = {p: {c: {"rules": {"D4": _cell(cov=x)}} for c in ("A", "B", "E")}
           for p, x in pools.items()}
    if fresh:
        out["E"]["A"]["rules"]["D4"] = _cell(**fresh)
    return out


def test_the_decision_adopts_only_when_every_gate_passes():
    """The amended rule on hand-made cells: gate 1 (pool E alone, every confirmation gate,
    key floors 0.91 / 0.90), gate 2 (each pool's class coverage), gate 3 (pooled, key floors
    0.93 / 0.92); class E judged alike, reverting to jacksum."""
    per = _tables()
    pooled = {c: _cell() for c in (*K.CANDIDATES, K.IN_USE)}
    dec = K.decide(per, pooled)
    assert dec["A"]["adopt"] and dec["B"]["adopt"] and dec["A"]["action"] == "adopt D4"
    assert dec["E"]["action"].startswith("D4 (in use) stays")
    # gate 1: the fresh pool's class coverage, its sub-populations, its key floors
    for fresh, why in (({"cov": 0.975}, "pooled 0.975"), ({"free": 0.972}, "free 0.972"),
                       ({"low": 0.905}, "lowest key 0.905"),
                       ({"low15": 0.895}, "lowest key at T_s x 1.5 0.895"),
                       ({"emp": 0.925}, "empirical samples' part 0.925")):
        d = K.decide(_tables(fresh=fresh), pooled)
        assert not d["A"]["adopt"] and f"gate 1 (pool E): " in d["A"]["action"], fresh
        assert why in d["A"]["action"], fresh
        assert d["B"]["adopt"]
    # the fresh pool's floors are 0.91 / 0.90, not the earlier 0.92
    assert K.decide(_tables(fresh={"low": 0.915, "low15": 0.905}), pooled)["A"]["adopt"]
    d = K.decide(_tables(E=0.975), pooled)
    assert "reverts to jacksum" in d["E"]["action"] and "gate 2: pool E 0.975" in d["E"]["action"]
    # gate 2: an earlier pool out of the band
    d = K.decide(_tables(C=0.925), pooled)
    assert not d["B"]["adopt"] and "gate 2: pool C 0.925" in d["B"]["action"]
    # gate 3: each of the pooled cell's gates, the key floor at 0.93
    for change, why in (({"low": 0.929}, "lowest key 0.929"),
                        ({"low15": 0.918}, "lowest key at T_s x 1.5 0.918"),
                        ({"free": 0.972}, "where the floor is free 0.972"),
                        ({"bound": 0.925}, "where the floor binds 0.925"),
                        ({"emp": 0.928}, "empirical samples' part 0.928"),
                        ({"b8": 0.971}, "V_h at B8 0.971"),
                        ({"cov": 0.975}, "pooled 0.975")):
        p = copy.deepcopy(pooled)
        p["A"] = _cell(**change)
        d = K.decide(per, p)
        assert not d["A"]["adopt"] and "(gate 3: " in d["A"]["action"], change
        assert why in d["A"]["action"] and d["B"]["adopt"], change
    # the floor-binds gate needs 50 records
    p = copy.deepcopy(pooled)
    p["A"] = _cell(bound=0.90, n_bound=49)
    assert K.decide(per, p)["A"]["adopt"]


@pytest.fixture(scope="module")
def pool_d():
    import real_shadow_pooled as P
    return P.load_pool(3, 200)


def test_the_key_floors_are_the_gates_only_change(pool_d):
    """passes' default floors are the earlier plans' (0.92, 0.92) and the amendment's floors
    change only gates (ii) and (iv) (pool D, every class and rule): a cell passes at the
    lower fresh-pool floors whenever it passed at 0.92, and every other reason stays."""
    import real_shadow_deleted as D
    tab = D.table(pool_d)
    n = 0
    for t in tab.values():
        for rule, c in t["rules"].items():
            if rule in D.RULES:
                ok, why = D.passes(c, K.BAND)
                assert (ok, why) == K.gates(c, K.BAND, (0.92, 0.92))
                ok2, why2 = K.gates(c, K.BAND, K.FRESH_FLOORS)
                assert ok2 >= ok
                assert [w for w in why.split("; ") if w and "lowest key" not in w] == \
                    [w for w in why2.split("; ") if w and "lowest key" not in w]
                n += 1
    assert n >= 30
    assert not K.gates(tab["A"]["rules"]["D4"], K.BAND, (0.92, 0.92))[0]  # D's lowest key 0.918
    assert K.gates(tab["A"]["rules"]["D4"], K.BAND, K.FRESH_FLOORS)[0]


def test_equal_weights_on_one_pool_are_that_pools_cell(pool_d):
    """equal_cell over one pool is real_shadow_deleted.cell (coverage, keys, sub-populations,
    width), so the pooled gate's weighting is the only thing it changes."""
    import real_shadow_deleted as D
    import real_shadow_halves as H
    for cls in ("A", "B", "E"):
        keys = H.class_keys(pool_d, cls)
        ref = D.cell(pool_d, cls, keys, {k: H.components(pool_d, k) for k in keys}, "D4")
        got = K.equal_cell([pool_d], cls)
        for f in ("coverage", "min", "max", "free", "bound", "n_bound", "width_calibrated"):
            assert got[f] == pytest.approx(ref[f], rel=1e-12, abs=1e-12), (cls, f)
    # two copies of a pool weigh as one; concatenation would too, a 2 : 1 mix would not
    two = K.equal_cell([pool_d, pool_d], "A")
    assert two["coverage"] == pytest.approx(K.equal_cell([pool_d], "A")["coverage"], rel=1e-12)


def test_the_calibrated_rule_covers_its_target_on_every_key(pool_d):
    cal = K.calibrated(pool_d, "A")
    assert np.allclose(np.nanmean(cal["cov"], 1), 0.95, atol=1e-6)
    assert (np.nanmean(cal["cov15"], 1) < 0.95).all()  # a wider samples' part covers less
    short = K.calibrated(pool_d, "A", 0.91)
    assert np.allclose(np.nanmean(short["cov"], 1), 0.91, atol=1e-6)
    # the floors pass a calibrated rule more often than one with a key at 0.91
    s = {f: cal[f].copy() for f in cal}
    s["cov"][0], s["cov15"][0] = short["cov"][0], short["cov15"][0]
    assert K.floors_pass(cal, K.FRESH_FLOORS, boot=400) > K.floors_pass(s, K.FRESH_FLOORS, boot=400) + 0.2


@pytest.fixture(scope="module")
def five():
    import real_shadow_pooled as P
    return {name: P.load_pool(seed, n) for name, seed, n in K.POOLS}


def _d4_tables(pools: dict) -> dict:
    """D.table's D4 cells (with their sensitivity reads) for the classes the plan decides."""
    import real_shadow_deleted as D
    import real_shadow_halves as H
    out = {}
    for p, d in pools.items():
        out[p] = {}
        for cls in (*K.CANDIDATES, K.IN_USE):
            keys = H.class_keys(d, cls)
            comps = {k: H.components(d, k) for k in keys}
            c = D.cell(d, cls, keys, comps, "D4")
            c["ts15"] = D.cell(d, cls, keys, comps, "D4", 1.5)
            c["emp"] = D.cell(d, cls, keys, comps, "D4", empirical=True)
            c["b8"] = D.cell(d, cls, keys, comps, "D4", to_b8=True)
            out[p][cls] = {"rules": {"D4": c}}
    return out


@pytest.mark.slow  # the five pools' stores and the pooled cells (about 30 s)
def test_the_outcome_follows_from_the_stores_and_the_pipeline_adopts_it(five, pool_d):
    """The amended rule on the committed stores: A adopted, B not (pool E's lowest key), E
    reverted (pool E's lowest keys); the committed table holds these cells and decisions,
    README quotes them, and `mixed` uses what was decided."""
    from bnmem.attack import intervals as I
    per = _d4_tables(five)
    pooled = {cls: K.pooled_cell(list(five.values()), cls) for cls in (*K.CANDIDATES, K.IN_USE)}
    dec = K.decide(per, pooled)
    assert [c for c in "ABE" if dec[c]["adopt"]] == ["A"]
    assert "gate 1 (pool E): lowest key 0.907" in dec["B"]["action"]
    assert dec["E"]["action"] == ("D4 reverts to jacksum (gate 1 (pool E): lowest key 0.906; "
                                  "lowest key at T_s x 1.5 0.899)")
    table = (ROOT / "bench/results/real_shadows_keypooled.md").read_text()
    for cls in (*K.CANDIDATES, K.IN_USE):
        assert K._row(f"{cls}: {K.R.LABEL[cls]}", pooled[cls]) in table
        assert f"**{dec[cls]['action']}**" in table
        assert (f"| {cls}: {K.R.LABEL[cls]} | " + " | ".join(
            f"{per[p][cls]['rules']['D4']['coverage']:.3f}" for p in per) + " |") in table
    # the operating characteristics: pool D's row recomputed
    oc = K.operating({"D": pool_d})
    assert all(f"{oc[c]['D']['earlier']:.2f} / {oc[c]['D']['fresh']:.2f} / "
               f"{oc[c]['D']['short_fresh']:.2f} |" in table for c in oc)
    # README quotes the outcome
    flat = " ".join((ROOT / "README.md").read_text().split())
    a, e, b = (per["E"][c]["rules"]["D4"] for c in "AEB")
    assert (f"{a['coverage']:.3f} on pool E (lowest key {a['min']:.3f}, {a['ts15']['min']:.3f} with "
            "T_s × 1.5)") in flat
    assert (f"{pooled['A']['coverage']:.3f} over the five per key (lowest key "
            f"{pooled['A']['min']:.3f}), at {pooled['A']['width_calibrated']:.2f}×") in flat
    assert f"pool E's lowest key {b['min']:.3f} < 0.91" in flat
    assert f"key {e['min']:.3f} < 0.91, {e['ts15']['min']:.3f} < 0.90 with T_s × 1.5" in flat
    assert f"D4 still covers {e['coverage']:.3f} on pool E and {pooled['E']['coverage']:.3f} over the five" in flat
    assert f"D4 {a['coverage']:.3f} / {b['coverage']:.3f} / {e['coverage']:.3f} for A / B / E" in flat
    assert "0.43 (class A), 0.53 (B) and 0.18 (E)" in flat and "| 0.43 / 0.95 / — |" in table
    assert "| 0.53 / 0.91 / — |" in table and "| 0.18 / 0.74 / — |" in table
    # what the pipeline uses: A's D4 was reverted by a sixth pool (real_shadows_sixth_plan.md),
    # and A's and E's adopted after a seventh (real_shadows_seventh_plan.md)
    # and A's reverted again by a tenth (real_shadows_tenth_plan.md), its Satterthwaite form
    # adopted by an eleventh (real_shadows_eleventh_plan.md)
    assert I.MIXED_RULES[("auc", "equal")] == "delete4_halves"
    assert I.MIXED_RULES[("auc", "common")] == "delete4_halves_s"
    # and B's after an eighth (real_shadows_eighth_plan.md)
    assert I.MIXED_RULES[("auc", "overlap")] == "delete4_halves"


@pytest.fixture
def d4(monkeypatch):
    """delete4_halves named for the common point (the rule in use since the seventh pool; the
    fixture keeps the mechanism's tests on it whatever the rules become)."""
    from bnmem.attack import intervals as I
    monkeypatch.setitem(I.MIXED_RULES, ("auc", "common"), "delete4_halves")


@pytest.mark.parametrize("module", ["coverage_matched", "coverage"])
def test_simulated_runs_read_mixed_off_the_real_shadow_recipe(module, d4):
    """Simulated logits are not the recipe the real-shadow rules were calibrated on: as the
    attack stage off that recipe, a simulated run of `mixed` draws no halves or delete-d rows
    and its intervals are jacksum's where a real-shadow rule would apply (the common point's
    all-sample AUC; equal epochs), while the rule named alone is still drawn and read."""
    import importlib
    from bnmem.attack import intervals as I
    cov = importlib.import_module(f"bnmem.attack.{module}")
    n_models, n, draws, seed = 16, 300, 100, 3
    kind = np.where(np.arange(n) < 30, 1, 0).astype(np.int8)
    procs = ("mixed", "jacksum", "delete4_halves")
    if module == "coverage_matched":
        out = cov._run((n_models, n, kind, draws, seed, procs, {}))
        j = [f for f, _, _ in cov.FIGURES].index("auc_matched")
    else:
        out = cov._run((n_models, n, cov.EFFECTS if hasattr(cov, "EFFECTS") else (0.5, 0.3), kind,
                        draws, seed, procs, 0.3, ("auc_all",)))
        j = out["mixed"].shape[1] - 1  # the paired difference of the one figure
    assert I.rules_for(8, draws)[("auc", "common")] == "delete4_halves"  # what the pipeline reads
    assert np.array_equal(out["mixed"][:, j], out["jacksum"][:, j])
    assert not np.array_equal(out["delete4_halves"][:, j], out["jacksum"][:, j])


def test_a_comparison_outside_the_studied_arms_reads_the_fallback(d4):
    """The real-shadow pools hold none, BN and the regularized BN: a comparison with another
    arm (GroupNorm, LayerNorm, DP-SGD) reads the fallback at the common point, a studied one
    the delete-4 rule, from the same rows."""
    from bnmem.attack import intervals as I
    var = {"jackknife": 4e-4, "samples": 3e-4, "pairs": 2e-4, "both": 5e-4, "halves": 1e-4,
           "delete4": 2e-4}
    plan = I.IntervalPlan("mixed", 8, {"halves": (9, 109), "delete4": (109, 137)})
    fig = "auc_all/heldout@common"
    for a, b, rule in (("batchnorm", "none", "delete4_halves"),
                       ("batchnorm_reg", "batchnorm", "delete4_halves"),
                       ("none", "batchnorm", "delete4_halves"), ("groupnorm", "none", "jacksum"),
                       ("layernorm", "batchnorm", "jacksum"), ("groupnorm_dp", "batchnorm", "jacksum")):
        p = I.for_arms(plan, a, b)
        assert p.rule_for(fig, var) == rule, (a, b)
        want = 3e-4 if rule == "delete4_halves" else 7e-4
        assert p.ci_from(0.0, var, fig)[1] == pytest.approx(1.96 * np.sqrt(want))
        # the rows stay laid out: the Pareto flips count the same rows either way
        assert p.segments == plan.segments
    assert I.for_arms(plan, "groupnorm", "none").rule_for("auc_all/heldout@overlap", var) == "both"


def test_the_mitigations_table_reads_the_fallback_for_an_unstudied_arm(d4):
    """mitigation.compare_pairs computing a pair itself (nothing known): GroupNorm against BN
    reads jacksum at the common point, none against BN the delete-4 rule, from the same rows."""
    from bnmem.attack import frontier, mitigation
    from bnmem.attack import intervals as I
    rng = np.random.default_rng(4)
    rows = 157  # the point, 8 jackknife, 20 samples, 100 halves, 28 delete-4 rows

    def arm(shift):
        return [[{"out_acc_clean": u + rng.normal(0, 0.005), "in_acc_clean": u + 0.05,
                  "train_loss": 1 - u, "gen_gap": 0.05,
                  **{f: 0.5 + u / 4 + shift + rng.normal(0, 0.01) for f in frontier.FIGURES}}
                 for u in (0.6, 0.7, 0.8)] for _ in range(rows)]
    ends = {"groupnorm": arm(0.01), "batchnorm": arm(0.02), "none": arm(0.0)}
    plan = I.IntervalPlan("mixed", 8, {"jackknife": (1, 9), "samples": (9, 29),
                                       "halves": (29, 129), "delete4": (129, 157)})
    out = mitigation.compare_pairs(ends, plan, ["none", "batchnorm", "groupnorm"], {})
    assert set(out) == {"none_minus_batchnorm", "groupnorm_minus_batchnorm"}
    assert out["none_minus_batchnorm"]["auc_all"]["rule"] == "delete4_halves"
    assert out["groupnorm_minus_batchnorm"]["auc_all"]["rule"] == "jacksum"


@pytest.mark.slow  # pool E's afterwards store (about 10 s)
def test_the_rules_in_use_on_pool_e():
    """Measured after the plan's outcome (decides nothing): the rules a run uses beside the
    delete-d ones on pool E's first 100 coverage subsets; the table regenerates from the
    stores, README quotes it."""
    import real_shadow_deleted as D
    t, text = D.afterwards("real_shadows_", 4, "Real shadows, pool E (data seed 4): the rules in "
                           "use beside the delete-d ones, first 100 subsets (measured after the "
                           "keypooled plan's outcome; decides nothing)")
    assert text == (ROOT / "bench/results/real_shadows_keypooled_today.md").read_text()
    flat = " ".join((ROOT / "README.md").read_text().split())
    cov = {c: t[c]["rules"][t[c]["today"]] for c in "ABCDEFG"}
    a4 = t["A"]["rules"]["D4"]
    assert (f"jacksum covers {cov['E']['coverage']:.3f} for AUC at equal budgets at "
            f"{cov['E']['width_calibrated']:.2f}× the calibrated width, {cov['A']['coverage']:.3f} "
            f"at the common point (the fallback then, the rule since the sixth pool; D4 there "
            f"{a4['coverage']:.3f} at "
            f"{a4['width_calibrated']:.2f}×), `both` {cov['B']['coverage']:.3f} over the overlap, "
            f"jacksum {cov['C']['coverage']:.3f} and {cov['F']['coverage']:.3f} for memorization at "
            f"matched utility and at equal budgets, `pairs_t` {cov['D']['coverage']:.3f} and "
            f"{cov['G']['coverage']:.3f} for TPR") in flat
