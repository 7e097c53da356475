"""The twelfth plan (bench/results/real_shadows_twelfth_plan.md): a twelfth, fresh pool (L)
re-checks every real-shadow rule in use (D4s for class A, D4 for B and E, jacksum_s for
memorization), lower side only, with a stopping rule for class A. The check made before
pool L reproduces the eleventh's class A cells and the tenth's class B and E cells."""
import argparse
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, load_script

T12 = load_script("bench/real_shadow_twelfth.py")


def _cell(cov, low=None, ts15=None, bound=None):
    c = {"coverage": cov, "min": low if low is not None else cov - 0.01, "max": cov + 0.01,
         "free": cov, "bound": bound if bound is not None else cov, "n_bound": 400,
         "range": [cov - 0.01, cov + 0.01], "width_calibrated": 1.2, "share": 0.4}
    c["ts15"] = {**c, "min": ts15 if ts15 is not None else c["min"] - 0.01}
    c["emp"], c["b8"] = dict(c), dict(c)
    return c


def test_decision_rule_on_hand_made_cells():
    """Each class keeps its rule unless a gate fails on its lower side; then A and E revert
    to jacksum and B to both; an upper-side failure alone keeps the rule (and is listed by
    over_lines, not by the action)."""
    for cls, fallback in (("A", "jacksum"), ("B", "both"), ("E", "jacksum")):
        ok = T12.decide({"per_pool": {"L": _cell(0.975)}, "pooled": _cell(0.972)}, "L", cls)
        assert ok["stays"] and ok["action"] == f"{T12.RULES[cls]} stays for class {cls}"
        bad = T12.decide({"per_pool": {"L": _cell(0.95, low=0.905)}, "pooled": _cell(0.96)}, "L", cls)
        assert not bad["stays"] and bad["action"].startswith(f"class {cls} reverts to {fallback}")
        assert "lowest key 0.905" in bad["action"]
        binds = T12.decide({"per_pool": {"L": _cell(0.95)}, "pooled": _cell(0.95, bound=0.925)}, "L", cls)
        assert not binds["stays"] and "where the floor binds 0.925" in binds["action"]
    over = {"per_pool": {"L": _cell(0.975)}, "pooled": _cell(0.95),
            "per_key": {"k1": [0.96, 0.98], "k2": [0.95, 0.96]}}
    lines = T12.over_lines(over, "L", "two")
    assert lines[0].startswith("pool L: class 0.975") and "1 of 2 keys: `k1` 0.980" in lines[0]
    assert lines[1] == "two pools: nothing above 0.97"


@pytest.mark.slow  # eleven pools' stores, and ten again for the tenth's cells (about 40 s)
def test_the_check_before_pool_l_reproduces_the_earlier_tables():
    """`table --as-of K` regenerates byte for byte; its class A cells (pool K alone, the
    eleven pools) are the eleventh table's rows, and the class B and E cells of its function
    over pools A-J are the tenth's pooled cells."""
    with tempfile.TemporaryDirectory() as tmp:
        got = Path(tmp) / "k.md"
        T12.table_main(argparse.Namespace(as_of="K", out=got))
        text = got.read_text()
    assert text == (ROOT / "bench/results/real_shadows_twelfth_as_of_K.md").read_text()
    eleventh = (ROOT / "bench/results/real_shadows_eleventh.md").read_text()
    for row in (ln for ln in text.splitlines() if ln.startswith(("| pool K: D4s", "| eleven pools: D4s"))):
        assert row in eleventh
    pools = {n: T12.PO.load_pool(s, k) for n, s, k in T12.T.POOLS}
    tenth = T12.T.auc_part(T12.T.POOLS)[1]["pooled"]
    for cls in ("B", "E"):
        mine = T12.class_cells(pools, cls)["pooled"]
        assert T12.K._row("x", mine) == T12.K._row("x", tenth[cls])
