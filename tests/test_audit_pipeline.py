"""The worked audit (examples/audit) end to end with real DVC on small params, in a
temporary git repository: your model factory, your .npz, your trained model with known
members; and every bad input as one line, exit status 2, outputs untouched."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import ROOT, run_stage
from test_pipeline import merge, sh

SMALL = {
    "arms": ["none", "batchnorm"],
    "train": {"epochs": 3, "checkpoints": [1]},
    "shadow": {"n_models": 6},
    "attack": {"bootstrap": 20, "model_bootstrap": 20, "rmia_population": 100},
    "audit": {"top_k": 4},
}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """examples/audit with small params, `dvc repro` run and committed."""
    work = tmp_path_factory.mktemp("auditrepo")
    for name in ("dvc.yaml", "stages", "src", "tools"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, work / name)
    shutil.rmtree(work / "src" / "bnmem.egg-info", ignore_errors=True)
    (work / "data" / "replicates").mkdir(parents=True)
    shutil.copy(ROOT / "data" / "replicates" / "README.md", work / "data" / "replicates")
    proj = work / "examples" / "audit"
    proj.mkdir(parents=True)
    for name in ("mymodels.py", "digits.npz", "weights.pt", "members.npy"):
        shutil.copy(ROOT / "examples" / "audit" / name, proj)
    params = merge(yaml.safe_load((ROOT / "examples" / "audit" / "params.yaml").read_text()), SMALL)
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (work / ".gitignore").write_text("__pycache__/\n")
    sh(work, "git", "init", "-q")
    sh(work, "dvc", "init", "-q")
    sh(work, "dvc", "config", "core.autostage", "true")
    sh(work, "python", "tools/audit_project.py", "examples/audit")
    (work / "dvc.yaml").unlink()  # bnmem's own pipeline: no params.yaml in this repo
    sh(proj, "dvc", "repro")
    sh(work, "git", "add", "-A")
    sh(work, "git", "commit", "-qm", "audit run")
    return proj


@pytest.mark.slow
def test_audit_reports_your_model_and_who_is_exposed(project):
    exp = json.loads((project / "results" / "exposure.json").read_text())
    mine = exp["your_model"]
    # the user's model overfits its members (train accuracy 1.0 on them): offline attacks
    # see it
    assert mine["lira_offline"]["auc"] > 0.55 and mine["rmia_offline"]["auc"] > 0.52
    assert mine["lira_offline"]["n_members"] == 1000 and mine["lira_offline"]["n_nonmembers"] == 1000
    assert mine["members_listed"] == 1000 and 0 < mine["calibration"]["nonmember_median"] < 3
    assert len(mine["top"]) == 4 and set(mine["top"][0]["exposure"]) == {"your_model", "none", "batchnorm"}
    assert exp["reference_arm"] == "batchnorm" and set(exp["arms"]) == {"none", "batchnorm"}
    meta = json.loads((project / "data" / "models" / "none.json").read_text())
    assert meta["swapped"] == ["1", "5", "10"] and meta["arch"] == "mymodels:make_net"
    assert json.loads((project / "data" / "models" / "batchnorm.json").read_text())["swapped"] == []
    pool = np.load(project / "data" / "prepared" / "pool.npz")
    np.testing.assert_array_equal(pool["index"], np.arange(2000))  # pool_size 0: file order
    report = (project / "report.md").read_text()
    for words in ("### Your model (`weights.pt`", "| lira_offline | ", "Normalization swap",
                  "plots/report/exposure.png", "Reference check: your model's non-members"):
        assert words in report
    assert (project / "plots" / "report" / "exposure.png").stat().st_size > 10_000


@pytest.mark.slow
def test_editing_your_model_file_reruns_the_model_stages(project):
    model_file = project / "mymodels.py"
    text = model_file.read_text()
    try:
        model_file.write_text(text + "\n# edited\n")
        status = sh(project, "dvc", "status", "--json").stdout
        changed = set(json.loads(status))
        assert {"train@none", "shadow@batchnorm-0", "grads@none", "exposure"} <= changed
        assert "prepare" not in changed and "attack" not in changed
    finally:
        model_file.write_text(text)


def _err(res) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.slow
def test_bad_weights_and_members_stop_exposure_with_outputs_untouched(project, tmp_path):
    out = project / "results" / "exposure.json"
    before = out.read_bytes()
    torch.save({"weight": torch.zeros(3)}, tmp_path / "other.pt")
    np.save(tmp_path / "neg.npy", np.array([3, -1]))
    args = ["--params", "params.yaml", "--pool", "data/prepared/pool.npz", "--models",
            "data/models", "--shadow-dir", "data/shadow", "--out", str(out),
            "--scores-dir", "data/exposure"]
    line = _err(run_stage("exposure.py", *args, "--target-weights", str(tmp_path / "other.pt"),
                          "--members", "members.npy", cwd=project))
    assert "audit target weights:" in line and "does not fit arch mymodels:make_net" in line
    line = _err(run_stage("exposure.py", *args, "--target-weights", "weights.pt",
                          "--members", str(tmp_path / "neg.npy"), cwd=project))
    assert "audit members:" in line and "negative index -1" in line
    line = _err(run_stage("exposure.py", *args, cwd=project))  # params name weights, dvc.yaml not
    assert line.startswith("bnmem exposure: error: audit.target_weights: 'weights.pt' in params")
    assert out.read_bytes() == before


BAD_MODELS = {
    "nosuchmodule:make": "arch: cannot import 'nosuchmodule'",
    "badmodels:wrong_size": "must be logits [2, num_classes=10]",
    "badmodels:no_classes": "must accept keyword arguments num_classes and in_channels",
}


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(BAD_MODELS))
def test_bad_factory_stops_train_with_one_line(project, tmp_path, arch):
    (project / "badmodels.py").write_text(
        "from torch import nn\n"
        "def wrong_size(num_classes, in_channels):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(in_channels * 256, num_classes + 2))\n"
        "def no_classes(in_channels):\n"
        "    return nn.Linear(3, 3)\n")
    recipe = yaml.safe_load((project / "data" / "recipes" / "none.yaml").read_text())
    recipe["arch"] = arch
    recipe["audit"]["model_file"] = "badmodels.py"
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(recipe))
    line = _err(run_stage("train.py", "--recipe", str(tmp_path / "r.yaml"), "--pool",
                          "data/prepared/pool.npz", "--test", "data/prepared/test.npz",
                          "--model", str(tmp_path / "m.pt"), "--checkpoints", str(tmp_path / "c"),
                          "--curves", str(tmp_path / "c.csv"), cwd=project))
    assert line.startswith("bnmem train: error: ") and BAD_MODELS[arch] in line
    assert not (tmp_path / "m.pt").exists()


BAD_DATA = {
    "no_x": ({"y": np.zeros(30, np.int64)}, "missing arrays ['x']"),
    "labels": ({"x": np.zeros((30, 16, 16, 1), np.uint8), "y": np.full(30, 10)},
               "labels must lie in [0, data.num_classes=10)"),
    "shapes": ({"x": np.zeros((30, 16, 16, 1), np.uint8), "y": np.zeros(30, np.int64),
                "test_x": np.zeros((5, 12, 12, 1), np.uint8), "test_y": np.zeros(5, np.int64)},
               "every image needs the same [C, H, W]"),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_dataset_stops_prepare_with_one_line(project, tmp_path, case):
    arrays, words = BAD_DATA[case]
    np.savez(tmp_path / "bad.npz", **arrays)
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["dataset"] = str(tmp_path / "bad.npz")
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(params))
    pool = project / "data" / "prepared" / "pool.npz"
    before = pool.read_bytes()
    line = _err(run_stage("prepare.py", "--params", str(tmp_path / "p.yaml"), "--pool", str(pool),
                          "--test", str(tmp_path / "t.npz"), cwd=project))
    assert line.startswith("bnmem prepare: error: dataset: ") and words in line
    assert pool.read_bytes() == before
