"""The thirteenth plan (bench/results/real_shadows_thirteenth_plan.md): the twelfth's analysis
with pool N fresh. Its check before pool N (pools A-L) reproduces the twelfth table's cells,
and the reported spread is the pools' mean, SD / sqrt(n) and z."""
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
    # the reading: beyond 0.97 only where t exceeds t_0.95(n - 1), not 1.64
    assert T13._reading({**s, "t_top": 1.70, "crit": 1.782}) == "within the spread of [0.93, 0.97]"
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
