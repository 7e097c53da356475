"""bench/real_shadow_pareto.py (bench/results/real_shadows_pareto_plan.md): memorization at the
common point as a minimum over candidates, and its interval from per-candidate intervals."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from bnmem.attack.frontier import _pareto_candidates, draw_compare, pareto_at

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import real_shadow_pareto as P  # noqa: E402


def _ends(u, y):
    return [{"out_acc_clean": a, "fz_flipped": b} for a, b in zip(u, y)]


def _candidates(ua, ya, ub, yb):
    level = min(ua.max(), ub.max())
    tied = abs(ua.max() - ub.max()) <= 1e-12
    ca, _ = P.closure(ua, _pareto_candidates(ua, ya, level), level, tied)
    cb, _ = P.closure(ub, _pareto_candidates(ub, yb, level), level, tied)
    return level, [s for _, s in ca], [s for _, s in cb]


def test_the_minimum_over_candidates_is_the_pipelines_read():
    """min_ca max_cb D over the (closed) candidate sets equals frontier.draw_compare's read at
    the common point, on random curves and on curves whose utilities and values tie exactly
    (the plan's amendments); the crossing's smooth function is the segment's line."""
    rng = np.random.default_rng(5)
    cases = []
    for _ in range(300):
        ua, ub = rng.uniform(0.3, 0.9, 4), rng.uniform(0.3, 0.9, 4)
        ya, yb = rng.uniform(0, 0.6, 4), rng.uniform(0, 0.6, 4)
        cases.append((ua, ya, ub, yb))
    # exact ties: a's best utility on b's 3rd endpoint; b's values tie between endpoints 1, 2
    cases.append((np.array([0.4, 0.6, 0.7, 0.78]), np.array([0.02, 0.0, 0.01, 0.04]),
                  np.array([0.67, 0.74, 0.78, 0.81]), np.array([0.01, 0.0125, 0.0125, 0.63])))
    cases.append((np.array([0.4, 0.6, 0.78, 0.7]), np.array([0.02, 0.0, 0.01, 0.04]),
                  np.array([0.67, 0.74, 0.78, 0.76]), np.array([0.01, 0.01, 0.02, 0.63])))
    added = 0
    for ua, ya, ub, yb in cases:
        want = draw_compare(_ends(ua, ya), _ends(ub, yb), "heldout", ("fz_flipped",))["fz_flipped"]
        level, sa, sb = _candidates(ua, ya, ub, yb)
        added += len(sa) + len(sb) > len(_pareto_candidates(ua, ya, level)) + len(
            _pareto_candidates(ub, yb, level))
        x = np.stack([np.c_[ua, ya], np.c_[ub, yb]]).ravel()
        d = np.array([[P.pair_function(4, a, b)(x) for b in sb] for a in sa])
        assert d.max(axis=1).min() == pytest.approx(want, abs=1e-12)
        assert pareto_at(ua, ya, level) - pareto_at(ub, yb, level) == pytest.approx(want, abs=1e-12)
    assert added >= 2  # the tie cases exercise the closure
    u, y = np.array([0.5, 0.7, 0.8, 0.6]), np.array([0.1, 0.3, 0.2, 0.9])
    assert P.candidate_value(u, y, 0.65, 2.5) == pytest.approx(0.2 + (0.65 - 0.8) / (0.6 - 0.8) * 0.7)
    assert P.candidate_value(u, y, 0.95, 0.5) == pytest.approx(0.1 + 0.45 / 0.2 * 0.2)  # beyond: the line


def test_the_interval_covers_the_minimum_whenever_every_pair_covers():
    """[min_ca max_cb (D - h), min_ca max_cb (D + h)] contains min_ca max_cb of any true
    differences inside every pair's interval (the plan's monotonicity), and is the chosen
    pair's own where one candidate per arm is far below the others; a max-min in the wrong
    order fails."""
    rng = np.random.default_rng(9)
    wrong = 0
    for _ in range(2000):
        na, nb = rng.integers(1, 4, 2)
        rows = np.array([[a, b, rng.normal(0, 1), 0, 0, 0] for a in range(na) for b in range(nb)], float)
        h = rng.uniform(0.1, 1.0, rows.shape[0])
        pt, lo, hi = P.interval(rows, h)
        truth = rows[:, 2] + rng.uniform(-1, 1, h.size) * h
        t = min(truth[rows[:, 0] == a].max() for a in range(na))
        assert lo - 1e-12 <= t <= hi + 1e-12 and lo <= pt <= hi
        # the max-min in the other order (max over b of min over a) is another interval
        lo_b = max((rows[:, 2] - h)[rows[:, 1] == b].min() for b in range(nb))
        hi_b = max((rows[:, 2] + h)[rows[:, 1] == b].min() for b in range(nb))
        wrong += not (lo_b - 1e-12 <= t <= hi_b + 1e-12)
    assert wrong > 20
    rows = np.array([[0, 0, 0.1, 0, 0, 0], [0, 1, -5.0, 0, 0, 0], [1, 0, 6.0, 0, 0, 0],
                     [1, 1, 0.9, 0, 0, 0]])
    assert P.interval(rows, np.full(4, 0.2)) == pytest.approx((0.1, -0.1, 0.3))


@pytest.mark.slow  # six pools' stores (about 30 s)
def test_the_selection_follows_from_the_stores():
    """bench/results/real_shadows_pareto_selection.md regenerates from the committed stores
    byte for byte (machinery checks included); no rule qualifies in either tier, for the
    reasons it gives; README's figures."""
    pools = [P.load(lb, s, n) for lb, s, n in P.SELECT]
    chk = {d["label"]: P.checks(d) for d in pools}
    tab = P.decide(pools, None)
    text = P.markdown(tab, pools, None, chk)
    assert text == (ROOT / "bench" / "results" / "real_shadows_pareto_selection.md").read_text()
    assert tab["chosen"] is None and not tab["tier2"][0]
    assert tab["tier2"][1].startswith("lowest key 0.870")
    assert sum(c["ties"] for c in chk.values()) == 25
    sel = tab["select"]
    flat = " ".join((ROOT / "README.md").read_text().split())
    key = P.SOURCE_KEY
    assert (f"(PJ) the class of twelve common-point memorization keys covers {sel['PJ']['coverage']:.3f} "
            f"and the key {sel['PJ']['per_key'][key]:.3f} (jacksum {sel['JS']['per_key'][key]:.3f} "
            f"over pools A–F); with ANs per pair (PA) {sel['PA']['coverage']:.4f} (under the "
            f"band's 0.935) and {sel['PA']['per_key'][key]:.3f}") in flat
    assert sel["PA"]["coverage"] < P.SELECT_BAND[0]
    # the exploratory table, after the outcome, from the stores and the committed full reads
    full = json.loads(P.FULL.read_text())
    lines, t = P.target_table(pools, full)
    assert "\n".join(lines) + "\n" == (ROOT / "bench/results/real_shadows_pareto_target.md").read_text()
    others = [abs(b) for k, bs in t["bias"].items() if k != key for b in bs]
    assert f"(on the other eleven keys within {max(others):.2f})" in flat and max(others) > 0.2
    js = t["theta"][key]["JS"]
    assert (f"against that full read jacksum covers the key {np.mean(js):.3f} ({min(js):.3f}–"
            f"{max(js):.3f} per pool; {np.mean(t['mu'][key]['JS']):.3f} against the mean)") in flat
    assert all(v["vj"]["no_source_change"] == v["vj"]["equal_there"] for lb, v in full.items() if lb != "meta")
    # the report's caveat quotes the per-candidate outcome (its text is fixed in
    # bnmem.report.markdown; its coverage figures, over seven pools, in tests/test_fullread.py)
    report = " ".join((ROOT / "report.md").read_text().split())
    assert (f"Per-candidate intervals for the minimum did not help ({sel['PJ']['per_key'][key]:.3f}, "
            "`bench/results/real_shadows_pareto_plan.md`)") in report


@pytest.mark.slow  # pool A's logits (about 15 s); they exist only where the pools were trained
@pytest.mark.skipif(not Path("/work/realpool0/pool.npz").exists(), reason="pool A's logits absent")
def test_the_committed_full_reads_are_the_pools():
    """results/real_shadows_pareto_full.json's reads on all of pool A's pairs recompute from
    its logits (the target table's input)."""
    got = P.full_pool("A", 0, 200, check_vj=False)
    want = json.loads(P.FULL.read_text())["A"]
    assert got["pool"] == want["pool"] and got["sources"] == want["sources"]
    assert got["reads"] == pytest.approx(want["reads"], abs=1e-12)
