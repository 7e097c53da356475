"""tools/grid.py: cells from grid.yaml, the fit-rule flag, and the table a partial grid gives."""
import json
import sys

import yaml

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import grid  # noqa: E402


def test_cells_cover_the_spec_with_per_arch_settings():
    spec = yaml.safe_load((ROOT / "grid.yaml").read_text())
    cells = dict(grid.cells(spec))
    assert len(cells) == len(spec["archs"]) * len(spec["datasets"]) * len(spec["noise_rates"])
    res = cells["resnet-mnist-noise0.05"]
    assert res["arch"] == "resnet" and res["dataset"] == "mnist" and res["noise_rate"] == 0.05
    assert res["model.zero_init_residual"] is True and res["arms"] == spec["arms"]
    assert "model.zero_init_residual" not in cells["lenet-mnist-noise0.05"]


def _delta(v, lo, hi):
    return {"value": v, "lo": lo, "hi": hi}


def test_fit_rule_flags_an_arm_and_the_table_says_so(tmp_path):
    train = {"none": {"clean_train_acc": 0.75, "test_acc": 0.7},
             "batchnorm": {"clean_train_acc": 0.95, "test_acc": 0.8}}
    deltas = {"batchnorm_minus_none": {"auc_identity_equal_epochs": _delta(0.1, 0.05, 0.15),
                                       "auc_identity_matched_fit": _delta(0.01, -0.02, 0.04)},
              "batchnorm_reg_minus_batchnorm": {}}
    summary = {"claims": [{"claim": "BN raises LiRA AUC by >= 3 points", "verdict": "reproduced"}]}
    row = grid.summarize(train, deltas, summary, {"min_clean_train_acc": 0.8})
    assert row["flagged_arms"] == ["none"] and list(row["deltas"]) == ["batchnorm_minus_none"]
    ok = grid.summarize({**train, "none": {"clean_train_acc": 0.85}}, deltas, summary,
                        {"min_clean_train_acc": 0.8})
    assert ok["flagged_arms"] == []
    spec = yaml.safe_load((ROOT / "grid.yaml").read_text())
    recs = [{"cell": "a", "wall_s": 60.0, **row}, {"cell": "b", "wall_s": 30.0, **ok}]
    grid.report(recs, spec, tmp_path / "grid.md", tmp_path / "grid.png")
    text = (tmp_path / "grid.md").read_text()
    assert ("| a | batchnorm − none | +0.100 [+0.050, +0.150] | +0.010 [-0.020, +0.040] "
            "(within-run fit) | covers 0 |") in text
    # re-judged by today's rule at the cell's threshold (4 points at 6 % outliers): the
    # matched interval [-2, +4] covers 4 points and excludes half the equal-epoch +10
    assert "| none | 4 | not evidence (flagged) | not evidence (flagged) |" in text
    assert "| no | 4 | at equal epochs only (not at matched utility) | at equal epochs only (not at matched utility) |" in text
    assert "Cells finished: 2 of 12; total wall time 1.5 min." in text
    assert (tmp_path / "grid.png").stat().st_size > 5000


def test_committed_cells_are_complete_records():
    for f in sorted((ROOT / "results" / "grid").glob("*.json")):
        rec = json.loads(f.read_text())
        assert rec["cell"] == f.stem and rec["stamp"] and rec["wall_s"] > 0
        assert set(rec["fit"]) == set(rec["params"]["arms"])
        for d in rec["deltas"].values():
            for point in d.values():
                assert point["lo"] is None or point["lo"] <= point["value"] <= point["hi"]
