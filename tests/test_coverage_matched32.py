"""The coverage_matched32 plan's readout (bench/coverage_matched32.py): it reads only the
planned study, finished, and its word per figure follows the plan's band."""
import json
import subprocess
import sys

from conftest import ROOT, load_script

C = load_script("bench/coverage_matched32.py")


def _store(path, study, truths, runs, width=len(C.NAMES)):
    lines = [{"study": study}]
    lines += [{"kind": "truth", "i": i, "value": [0.0] * width} for i in range(truths)]
    lines += [{"kind": "run", "i": i, "value": {p: [[-1.0] * width, [1.0] * width]
                                               for p in C.PROCEDURES}} for i in range(runs)]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_another_or_unfinished_study_is_refused_in_one_line(tmp_path):
    for store, says in ((_store(tmp_path / "other.jsonl", "0" * 16, C.TRUTH_RUNS, C.RUNS),
                         "not the planned b32f3e949a451feb"),
                        (_store(tmp_path / "part.jsonl", C.FINGERPRINT, C.TRUTH_RUNS, C.RUNS - 1),
                         "the study is unfinished"),
                        (_store(tmp_path / "figs.jsonl", C.FINGERPRINT, C.TRUTH_RUNS, C.RUNS,
                                width=len(C.NAMES) - 1), "not (2, 10)")):
        res = subprocess.run([sys.executable, str(ROOT / "bench" / "coverage_matched32.py"),
                              str(store)], capture_output=True, text=True)
        assert res.returncode == 1 and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert says in res.stderr


def test_the_word_follows_the_band_and_the_tails():
    row = {"coverage": 0.95, "miss_below": 0.025, "miss_above": 0.025, "runs": 500}
    assert C.word(row) == "calibrated"
    assert C.word({**row, "coverage": 0.93}) == "calibrated"
    assert C.word({**row, "coverage": 0.971}) == "over-covers"
    assert C.word({**row, "coverage": 0.929}) == "under-covers"
    assert C.word({**row, "coverage": 485 / 500}) == "calibrated"  # both ends in the band
    assert C.word({**row, "coverage": 465 / 500}) == "calibrated"
    assert C.word({**row, "miss_below": 0.041, "miss_above": 0.0}) == "calibrated, lopsided"
    assert C.word({**row, "miss_below": 0.0, "miss_above": 0.041}) == "calibrated, lopsided"
    assert C.word({**row, "miss_below": 20 / 500, "miss_above": 20 / 500}) == "calibrated"
    assert C.word({"coverage": None}) == "no word"
    assert C.word(row, float("nan")) == "no word"
    assert C.word({**row, "runs": 449}) == "no word: too few intervals"
    assert C.word({**row, "runs": 450}) == "calibrated"


def test_a_finished_store_of_the_planned_shape_reads(tmp_path):
    """Every interval [-1, 1] around a truth of 0: every figure covers, over-covers."""
    res = C.read(_store(tmp_path / "s.jsonl", C.FINGERPRINT, C.TRUTH_RUNS, C.RUNS))
    assert set(res["words"].values()) == {"over-covers"}
    assert res["rules"]["tpr_low_matched"] == "both_sqrt"
    assert res["rules"]["auc_matched"] == "jacksum" and res["rules"]["auc_overlap"] == "both"


def test_the_family_rule_needs_two_cells_of_one_family_and_direction():
    words = dict.fromkeys(C.NAMES, "calibrated")
    assert C.families_out(words) == []
    words.update(auc_matched="over-covers", auc_fit="under-covers", fz_ood_fit="over-covers")
    assert C.families_out(words) == []
    words.update(auc_overlap="over-covers, lopsided", fz_flipped_fit="over-covers")
    assert C.families_out(words) == ["AUC over-covers", "memorization over-covers"]


def test_the_outcome_follows_from_the_committed_store():
    """The readout regenerates its committed table byte for byte from the study's store, and
    the words and figures README and the plan's outcome quote are the store's."""
    store = ROOT / "results" / "coverage_matched32_seed43.jsonl"
    res = C.read(store)
    md = C.markdown("results/coverage_matched32_seed43.jsonl", res)
    assert md == (ROOT / "bench" / "results" / "coverage_matched32_seed43.md").read_text()
    t = res["table"]
    cov = {f: round(t["mixed"][f]["coverage"], 3) for f in C.NAMES}
    assert res["words"]["tpr_low_matched"] == "calibrated" and cov["tpr_low_matched"] == 0.944
    assert round(t["twoway"]["tpr_low_matched"]["coverage"], 3) == 0.930
    mem = [f for f in C.NAMES if f.startswith("fz")]
    assert {res["words"][f] for f in mem} == {"over-covers"}
    assert (min(cov[f] for f in mem), max(cov[f] for f in mem)) == (0.974, 0.996)
    assert {res["words"][f] for f in C.NAMES if f.startswith("auc")} == {"calibrated"}
    assert C.families_out(res["words"]) == ["memorization over-covers"]
    two = [t["twoway"][f]["coverage"] for f in mem]
    assert (round(min(two), 3), round(max(two), 3)) == (0.940, 0.954)
    ratio = [t["twoway"][f]["mean_width"] / t["mixed"][f]["mean_width"] for f in mem]
    assert (round(min(ratio), 2), round(max(ratio), 2)) == (0.86, 0.96)
    from bnmem.report import markdown  # the report's sentence on the full-scale rule
    assert f"covered {cov['tpr_low_matched']:.3f} once" in markdown._tpr_rule_text("both_sqrt")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "**0.944**, tails 0.026 below and 0.030 above" in readme
    assert "0.974–0.996" in readme and "0.940–0.954 at 0.86–0.96 times" in readme
