"""The thirteenth plan (bench/results/real_shadows_thirteenth_plan.md): the twelfth's analysis
with pool M fresh. Its check before pool M (pools A-L) reproduces the twelfth table's cells,
and the reported spread is the pools' mean, SD / sqrt(n) and z."""
import argparse
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, load_script

T13 = load_script("bench/real_shadow_thirteenth.py")


def test_the_spread_is_the_pools_mean_standard_error_and_z():
    cov = [0.96, 0.97, 0.98, 0.975]
    s = T13.spread({str(i): {"coverage": c} for i, c in enumerate(cov)})
    se = np.std(cov, ddof=1) / math.sqrt(4)
    assert s["mean"] == pytest.approx(np.mean(cov)) and s["se"] == pytest.approx(se) and s["n"] == 4
    assert s["z_top"] == pytest.approx((np.mean(cov) - 0.97) / se)
    assert s["z_low"] == pytest.approx((np.mean(cov) - 0.93) / se)


@pytest.mark.slow  # twelve pools' stores (about 40 s)
def test_the_check_before_pool_m_reproduces_the_twelfth_table():
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
    assert "| A (D4s) | " in text and "Class E's longest-budget keys" in text
    with tempfile.TemporaryDirectory() as tmp:
        got = Path(tmp) / "t12.md"
        T13.T12.table_main(argparse.Namespace(as_of="L", out=got))
        assert got.read_text() == "\n".join(twelfth) + "\n"
