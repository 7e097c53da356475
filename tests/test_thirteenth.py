"""The thirteenth plan (bench/results/real_shadows_thirteenth_plan.md): the twelfth's analysis
with pool N fresh. Its check before pool N (pools A-L) reproduces the twelfth table's cells,
and the reported spread is the pools' mean, SD / sqrt(n) and one-sided t."""
import argparse
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, load_script

T13 = load_script("bench/real_shadow_thirteenth.py")


def test_the_spread_is_the_pools_mean_standard_error_and_t():
    from scipy import stats
    cov = [0.96, 0.97, 0.98, 0.975]
    s = T13.spread({str(i): {"coverage": c} for i, c in enumerate(cov)})
    se = np.std(cov, ddof=1) / math.sqrt(4)
    assert s["mean"] == pytest.approx(np.mean(cov)) and s["se"] == pytest.approx(se) and s["n"] == 4
    assert s["t_top"] == pytest.approx((np.mean(cov) - 0.97) / se)
    assert s["t_low"] == pytest.approx((np.mean(cov) - 0.93) / se)
    assert s["crit"] == pytest.approx(stats.t.ppf(0.95, 3))
    # the reading: beyond 0.97 only where t exceeds t_0.95(n - 1), not 1.64; a mean the test
    # cannot tell from 0.97 is not "inside" the band
    assert T13._reading({**s, "t_top": 1.70, "crit": 1.782}) == "not distinguishable from 0.97"
    assert T13._reading({**s, "t_top": -1.70, "t_low": 9.0, "crit": 1.782}) == "not distinguishable from 0.97"
    assert T13._reading({**s, "t_top": -1.80, "t_low": 9.0, "crit": 1.782}) == "inside [0.93, 0.97] beyond the spread"
    assert T13._reading({**s, "t_top": -9.0, "t_low": 1.0, "crit": 1.782}) == "not distinguishable from 0.93"
    assert T13._reading({**s, "t_top": 1.80, "crit": 1.782}) == "above 0.97 beyond the spread"
    assert T13._reading({**s, "t_top": -9.0, "t_low": -1.9, "crit": 1.782}) == "below 0.93 beyond the spread"


def test_the_prediction_interval_for_the_fresh_pool():
    from scipy import stats
    cov = {"a": 0.96, "b": 0.97, "c": 0.98, "x": 0.99}
    pr = T13.predicted({k: {"coverage": v} for k, v in cov.items()}, "x")
    h = stats.t.ppf(0.975, 2) * np.std([0.96, 0.97, 0.98], ddof=1) * math.sqrt(1 + 1 / 3)
    assert pr["lo"] == pytest.approx(0.97 - h) and pr["hi"] == pytest.approx(0.97 + h)
    assert pr["inside"] == (0.97 - h <= 0.99 <= 0.97 + h) and pr["n"] == 3


@pytest.mark.slow  # twelve pools' stores (about 40 s)
def test_the_check_before_pool_n_reproduces_the_twelfth_table():
    """`table --as-of L` regenerates byte for byte; every class's cell rows, per-key rows,
    gates and the memorization table are the twelfth table's lines (only the title, the
    decision lines and the reported spread differ), and the twelfth table itself still
    regenerates from the parametrized function."""
    with tempfile.TemporaryDirectory() as tmp:
        got = Path(tmp) / "l.md"
        T13.table_main(argparse.Namespace(as_of="L", out=got))
        text = got.read_text()
    assert text == (ROOT / "bench/results/real_shadows_thirteenth_as_of_L.md").read_text()
    twelfth = (ROOT / "bench/results/real_shadows_twelfth.md").read_text().splitlines()
    rows = [ln for ln in text.splitlines() if ln.startswith(("| `", "| pool L:", "| twelve pools:", "- Gate"))]
    assert len(rows) > 40 and all(r in twelfth for r in rows)
    assert "| A (D4s), out of sample | 4 |" in text and "Class E's longest-budget keys" in text
    with tempfile.TemporaryDirectory() as tmp:
        got = Path(tmp) / "t12.md"
        T13.T12.table_main(argparse.Namespace(as_of="L", out=got))
        assert got.read_text() == "\n".join(twelfth) + "\n"


def _outcome():
    return T13.E11.table_text(T13.POOLS, T13.auc_part, T13.mem_load("N"), T13.mem_part)


@pytest.mark.slow  # thirteen pools' AUC and memorization stores (about 25 s)
def test_the_outcome_follows_from_the_stores_and_the_pipeline_follows_it():
    """The thirteenth table regenerates byte for byte from the committed stores and pool N's
    full read; each class's rule in `mixed` is the one its decision leaves (its rule in use,
    or its fallback); README quotes the outcome's figures."""
    from bnmem.attack import intervals as I
    text, got, m = _outcome()
    assert text == (ROOT / "bench/results/real_shadows_thirteenth.md").read_text()
    dec = got["decision"]
    pipeline = {"A": "delete4_halves_s", "B": "delete4_halves", "E": "delete4_halves"}
    for cls, read in (("A", "common"), ("B", "overlap"), ("E", "equal")):
        want = pipeline[cls] if dec[cls]["stays"] else T13.T12.OTHERWISE[cls]
        assert I.MIXED_RULES[("auc", read)] == want, cls
    readme = " ".join((ROOT / "README.md").read_text().split())
    for cls in T13.T12.RULES:
        c = got["cells"][cls]
        n, pooled = c["per_pool"]["N"], c["pooled"]
        assert (f"class {cls} {n['coverage']:.3f} on pool N (lowest key {n['min']:.3f}), "
                f"{pooled['coverage']:.3f} over thirteen pools (lowest key {pooled['min']:.3f})") in readme, cls
    f = m["figures"]
    K1, K2 = T13.T12.T.K1, T13.T12.T.K2
    assert (f"K2 {f[K2]['JSs'][-1]:.3f}, K1 {f[K1]['JSs'][-1]:.3f} on N; over thirteen pools K2 "
            f"{np.mean(f[K2]['JSs']):.3f}, the class {m['decision']['class']:.3f}") in readme
    head = got["cells"]["A"]["per_key"][T13.T12.S.HEADLINE]
    assert f"the headline key {head[-1]:.3f} on N, {np.mean(head):.3f} over thirteen pools (lowest pool {min(head):.3f})" in readme
    # README's calibration table quotes the thirteen pools
    table = readme[readme.index("**Where calibration stands**"):readme.index("How well a full-scale interval")]
    for cls in ("B", "E"):
        p = got["cells"][cls]["pooled"]
        assert f"; {p['coverage']:.3f} over thirteen, lowest key {p['min']:.3f} |" in table, cls
    a = got["cells"]["A"]
    pooled = {k: np.mean(r["JSs"]) for k, r in f.items()}
    assert f"; {m['decision']['class']:.3f} over thirteen, lowest key {min(pooled.values()):.3f} |" in table
    oos = T13.spread({p: got["cells"]["A"]["per_pool"][p] for p in T13.OUT_OF_SAMPLE})
    assert (f"pool N: {a['per_pool']['N']['coverage']:.3f} (lowest key {a['per_pool']['N']['min']:.3f}), thirteen "
            f"pools {a['pooled']['coverage']:.3f} ({oos['mean']:.3f} over the five out of sample for its formula) |") in table
    from bnmem.report.markdown import _procedure_text
    report = " ".join(_procedure_text("mixed", 100, 8).split())
    assert (f"a thirteenth on pool N: {a['per_pool']['N']['coverage']:.3f} there (lowest key "
            f"{a['per_pool']['N']['min']:.3f}), {a['pooled']['coverage']:.3f} over thirteen pools, "
            f"{oos['mean']:.3f} over the five read after its formula was written (I-L, N), "
            f"{T13._reading(oos)}") in report
    b, e = got["cells"]["B"]["pooled"], got["cells"]["E"]["pooled"]
    assert (f"{b['coverage']:.3f} / {e['coverage']:.3f} over thirteen, lowest key {b['min']:.3f} / "
            f"{e['min']:.3f} (`real_shadows_thirteenth.md`)") in report
    after = [a["per_pool"][p]["coverage"] for p in ("K", "L", "N")]
    assert f"{min(after):.3f}-{max(after):.3f} on each pool read after its adoption (K, L, N)" in report
    assert min(after) > 0.97  # so README's "each above 0.97" holds
    assert (f"K, L and N, read {after[0]:.3f} / {after[1]:.3f} / {after[2]:.3f}, each above 0.97") in readme
    assert "kept on I, J, L and N" in " ".join((ROOT / "report.md").read_text().split())
    every = T13.spread(a["per_pool"])
    assert (f"the class's mean coverage is {every['mean']:.3f}, t {every['t_top']:+.2f} against 0.97 "
            f"(t_0.95(12) {every['crit']:.3f}): " + ("yes" if T13._reading(every).startswith("above") else "no")) in readme
    assert (f"(I–L, N) {oos['mean']:.3f}, t {oos['t_top']:+.2f} against 0.97 (t_0.95(4) {oos['crit']:.3f}; 95 % CI "
            f"{oos['ci'][0]:.3f}–{oos['ci'][1]:.3f}): {T13._reading(oos)}") in readme
    # the words follow the decisions and the checks, not only the numbers
    bullet = readme[readme.index("A thirteenth pool: every rule re-checked"):readme.index("Memorization without the interaction")]
    stays = all(dec[c]["stays"] for c in dec)
    assert ("**Every rule stays**" in bullet) == stays
    inside = all(T13.predicted(got["cells"][c]["per_pool"], "N")["inside"] for c in T13.T12.RULES)
    assert ("Each class's coverage on N lies in the 95 % prediction interval" in bullet) == inside
    assert ("B and E lie inside the band beyond the spread" in bullet) == all(
        T13._reading(T13.spread(got["cells"][c]["per_pool"])).startswith("inside") for c in ("B", "E"))
    bind = got["cells"]["B"]["per_pool"]["N"]["bound"]
    assert f"and on N where V_h's floor binds {bind:.3f}, {bind - 0.93:.3f} above the band's lower end" in bullet
    assert all(T13.predicted(got["cells"][c]["per_pool"], "N")["inside"] for c in T13.T12.RULES)
    tb, te = (T13.spread(got["cells"][c]["per_pool"])["t_top"] for c in ("B", "E"))
    assert f"(t {tb:+.2f} / {te:+.2f} against 0.97)".replace("-", "−") in readme
    last = [v for k, v in got["cells"]["E"]["per_key"].items() if T13.LONGEST in k]
    on_n, over = sorted(v[-1] for v in last), sorted(np.mean(v) for v in last)
    assert (f"its longest budget's keys {on_n[0]:.3f}–{on_n[-1]:.3f} on N, {over[0]:.3f}–{over[-1]:.3f} "
            "over thirteen") in readme
