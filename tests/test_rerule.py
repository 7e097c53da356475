"""tools/rerule.py: a committed run's TPR intervals read again under another rule from the
design SDs the record keeps."""
import json
import math
import subprocess
import sys

import pytest

from conftest import ROOT, load_script

FULL = ROOT / "results/fullscale_908761f/results/membership.json"


def test_the_records_own_rule_gives_back_every_recorded_interval():
    rerule = load_script("tools/rerule.py")
    m = json.loads(FULL.read_text())
    rows = rerule.rerule(m, "pairs_t")  # the full-scale run's TPR rule (32 pairs)
    assert len(rows) >= 40 and all("tpr_" in r["figure"] for r in rows)
    for r in rows:
        assert r["after"] == pytest.approx(r["before"], rel=1e-12, abs=1e-15), r["figure"]


def test_sum_is_one_point_96_sd_of_pairs_and_samples():
    rerule = load_script("tools/rerule.py")
    m = json.loads(FULL.read_text())
    rec = m["arms"]["none"]["tpr_vlow_all"]
    (row,) = [r for r in rerule.rerule(m, "sum") if r["figure"] == "arms/none/tpr_vlow_all"]
    half = 1.96 * math.hypot(rec["sd"]["pairs"], rec["sd"]["samples"])
    assert row["after"] == pytest.approx([rec["value"] - half, rec["value"] + half], rel=1e-12)


def test_a_rule_the_record_cannot_give_is_one_line():
    res = subprocess.run([sys.executable, str(ROOT / "tools/rerule.py"), str(FULL), "--rule",
                          "both"], capture_output=True, text=True)
    assert res.returncode != 0 and res.stdout == ""
    (line,) = res.stderr.strip().splitlines()
    assert "no both SD" in line and "recorded: jackknife, pairs, samples" in line


def test_the_committed_full_scale_sum_companion_is_the_tools_output(tmp_path):
    """results/fullscale_908761f/tpr_rerule_sum.md (README's companion to the full-scale TPR
    intervals, which predate twoway and cannot be re-ruled under it) is what
    tools/rerule.py --rule sum writes from the committed records, byte for byte."""
    import subprocess
    import sys

    from conftest import ROOT
    out = tmp_path / "sum.md"
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "rerule.py"),
                          "results/fullscale_908761f/results/membership.json", "--rule", "sum",
                          "--md", str(out)], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert out.read_bytes() == (ROOT / "results" / "fullscale_908761f" / "tpr_rerule_sum.md").read_bytes()
    res = subprocess.run([sys.executable, str(ROOT / "tools" / "rerule.py"),
                          "results/fullscale_908761f/results/membership.json", "--rule", "twoway"],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode != 0 and "has no both SD, which rule twoway needs" in res.stderr


def test_the_full_scale_runs_tpr_intervals_are_todays_rule_and_read_back_under_it():
    """The full-scale run of today's rules (results/fullscale, 32 pairs): every TPR interval
    is TPR_RULE_MANY_PAIRS's (both_sqrt above 8 pairs), keeps the design SDs it reads (a
    difference also its arms' points and V_b's), and tools/rerule.py under that rule gives
    every recorded interval back."""
    from bnmem.attack.intervals import SQRT_PROCEDURES, TPR_RULE_MANY_PAIRS, designs
    rerule = load_script("tools/rerule.py")
    m = json.loads((ROOT / "results/fullscale/results/membership.json").read_text())
    assert int(m["pairs"]) == 32 and TPR_RULE_MANY_PAIRS == "both_sqrt"
    recs = list(rerule.intervals(m))
    assert len(recs) >= 40
    assert {r["rule"] for _, r in recs} == {TPR_RULE_MANY_PAIRS}
    assert all(set(designs(TPR_RULE_MANY_PAIRS)) <= set(r["sd"]) for _, r in recs)
    diffs = [r for p, r in recs if "/compare/" in p or "mitigations" in p]
    assert len(diffs) >= 20 and all(len(r["arms"]) == 2 for r in diffs)
    assert TPR_RULE_MANY_PAIRS in SQRT_PROCEDURES
    rows = rerule.rerule(m, TPR_RULE_MANY_PAIRS)
    assert len(rows) == len(recs)
    for r in rows:
        assert r["after"] == pytest.approx(r["before"], rel=1e-12, abs=1e-15), r["figure"]
