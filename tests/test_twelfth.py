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


def _outcome():
    return T12.E11.table_text(T12.POOLS, T12.auc_part, T12.mem_load("L"), T12.mem_part)


@pytest.mark.slow  # twelve pools' AUC and memorization stores (about 20 s)
def test_the_outcome_follows_from_the_stores_and_the_pipeline_follows_it():
    """The twelfth table regenerates byte for byte from the committed stores and pool L's
    full read; each class's rule in `mixed` is the one its decision leaves (its rule in use,
    or its fallback); README quotes the outcome's figures."""
    import numpy as np

    from bnmem.attack import intervals as I
    text, got, m = _outcome()
    assert text == (ROOT / "bench/results/real_shadows_twelfth.md").read_text()
    dec = got["decision"]
    pipeline = {"A": "delete4_halves_s", "B": "delete4_halves", "E": "delete4_halves"}
    for cls, read in (("A", "common"), ("B", "overlap"), ("E", "equal")):
        want = pipeline[cls] if dec[cls]["stays"] else T12.OTHERWISE[cls]
        assert I.MIXED_RULES[("auc", read)] == want, cls
    readme = " ".join((ROOT / "README.md").read_text().split())
    for cls in T12.RULES:
        c = got["cells"][cls]
        lo, pooled = c["per_pool"]["L"], c["pooled"]
        assert (f"class {cls} {lo['coverage']:.3f} on pool L (lowest key {lo['min']:.3f}), "
                f"{pooled['coverage']:.3f} over twelve pools (lowest key {pooled['min']:.3f})") in readme, cls
    head = got["cells"]["A"]["per_key"][T12.S.HEADLINE]
    assert f"the headline key {head[-1]:.3f} on L, {np.mean(head):.3f} over twelve pools" in readme
    f = m["figures"]
    K1, K2 = T12.T.K1, T12.T.K2
    assert (f"K2 {f[K2]['JSs'][-1]:.3f}, K1 {f[K1]['JSs'][-1]:.3f} on L; over twelve pools K2 "
            f"{np.mean(f[K2]['JSs']):.3f}, the class {m['decision']['class']:.3f}") in readme
    # the report's rule text quotes the twelfth outcome for class A
    from bnmem.report.markdown import _procedure_text
    report = " ".join(_procedure_text("mixed", 100, 8).split())
    a = got["cells"]["A"]
    ka = f"{min(a['pooled']['per_key']):.3f}-{max(a['pooled']['per_key']):.3f}"
    assert (f"{a['per_pool']['L']['coverage']:.3f} on L (lowest key {a['per_pool']['L']['min']:.3f}), "
            f"{a['pooled']['coverage']:.3f} over twelve pools, {ka} per key (the headline key "
            f"{np.mean(head):.3f}, lowest pool {min(head):.3f}") in report
    assert f"{ka} per key over twelve pools" in " ".join((ROOT / "report.md").read_text().split())
    # README's calibration table quotes the twelve pools beside the ten
    table = readme[readme.index("**Where calibration stands**"):readme.index("How well a full-scale interval")]
    for cls in ("B", "E"):
        p = got["cells"][cls]["pooled"]
        assert f"; {p['coverage']:.3f} over twelve, lowest key {p['min']:.3f}" in table, cls
    a = got["cells"]["A"]
    assert (f"pool L, fresh for it: {a['per_pool']['L']['coverage']:.3f} (lowest key {a['per_pool']['L']['min']:.3f}), "
            f"twelve pools {a['pooled']['coverage']:.3f}") in table
    pooled = {k: np.mean(r["JSs"]) for k, r in f.items()}
    assert f"; {m['decision']['class']:.3f} over twelve, lowest key {min(pooled.values()):.3f}" in table
    k1, k2 = f[K1]["JSs"], f[K2]["JSs"]
    assert f"over ten pools, {np.mean(k2):.3f} / {np.mean(k1):.3f} over twelve" in table
    # class E's weak spot: the longest budget's keys
    e = got["cells"]["E"]["per_key"]
    last = [v for k, v in e.items() if "/eq3_" in k]
    assert len(last) == 3
    assert (f"the longest budget's keys ({min(np.mean(v) for v in last):.3f}–{max(np.mean(v) for v in last):.3f} "
            f"over twelve pools, one pool's {min(min(v) for v in last):.3f}; pool L passed its 0.91 floor by "
            f"{got['cells']['E']['per_pool']['L']['min'] - 0.91:.3f}") in table


def test_a_gate_that_passes_below_but_fails_above_says_so():
    """The outcome tables' gate line: the lower side decides; a full-band failure with the
    lower side passing is named as a failure above, not left to a parenthesis."""
    gate_text = load_script("bench/real_shadow_eleventh.py").gate_text
    assert gate_text((True, ""), (True, "")) == "passes"
    above = gate_text((True, ""), (False, "pooled 0.973"))
    assert above.startswith("passes on the lower side") and "fails above: pooled 0.973" in above
    below = gate_text((False, "key x 0.905 < 0.91"), (False, "key x 0.905 < 0.91"))
    assert below.startswith("fails: key x 0.905 < 0.91")
