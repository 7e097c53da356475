"""The analysis of bench/results/real_shadows_keypooled_plan.md where the truth is known: the
plan's binomial figures (exact sums, checked against SciPy and against a simulation of
per-pool key floors), and its decision rule on hand-made cells, each gate able to fail."""
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
    """The binomial figure against a simulation of the gate itself: six independent keys,
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


def _tables(**cov):
    pools = {p: cov.get(p, 0.95) for p in ("A", "C", "B", "D", "E")}
    return {p: {c: {"rules": {"D4": _cell(cov=x)}} for c in ("A", "B", "E")}
            for p, x in pools.items()}


def test_the_decision_adopts_only_when_every_gate_passes():
    per = _tables()
    pooled = {c: _cell() for c in K.CANDIDATES}
    dec = K.decide(per, pooled)
    assert dec["A"]["adopt"] and dec["B"]["adopt"] and dec["A"]["action"] == "adopt D4"
    assert dec["E"]["action"].startswith("D4 (in use) stays")
    # gate 1: the fresh pool's class coverage
    d = K.decide(_tables(E=0.975), pooled)
    assert not d["A"]["adopt"] and "gate 1: pool E 0.975" in d["A"]["action"]
    assert "reverts to jacksum" in d["E"]["action"]
    # gate 2: an earlier pool out of the band
    d = K.decide(_tables(C=0.925), pooled)
    assert not d["B"]["adopt"] and "gate 2: pool C 0.925" in d["B"]["action"]
    assert d["E"]["adopt"]  # E is judged on pool E alone
    # gate 3: each of the pooled cell's gates
    for change, why in (({"low": 0.915}, "lowest key 0.915"),
                        ({"low15": 0.918}, "lowest key at T_s x 1.5 0.918"),
                        ({"free": 0.972}, "where the floor is free 0.972"),
                        ({"bound": 0.925}, "where the floor binds 0.925"),
                        ({"emp": 0.928}, "empirical samples' part 0.928"),
                        ({"b8": 0.971}, "V_h at B8 0.971"),
                        ({"cov": 0.975}, "pooled 0.975")):
        p = copy.deepcopy(pooled)
        p["A"] = _cell(**change)
        d = K.decide(per, p)
        assert not d["A"]["adopt"] and why in d["A"]["action"], change
        assert d["B"]["adopt"]
    # the floor-binds gate needs 50 records
    p = copy.deepcopy(pooled)
    p["A"] = _cell(bound=0.90, n_bound=49)
    assert K.decide(per, p)["A"]["adopt"]
