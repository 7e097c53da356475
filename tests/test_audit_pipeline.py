"""The worked audit (examples/audit) end to end with real DVC on small params, as a user
makes it: bnmem installed from its wheel into a fresh virtual environment, an empty git + DVC
repository outside the checkout, `bnmem audit init`, `dvc repro`. Your model factory, your
.npz, your trained model with known members; and every bad input as one line, exit status
2, outputs untouched."""
import json
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import ENV, ROOT, merge, run_main, run_stage, sh

SMALL = {
    "arms": ["none", "batchnorm"],
    "train": {"epochs": 3, "checkpoints": [1]},  # at 2 the shadows fit too little to
    # calibrate your model's exposure (its non-members' median 3.8, not below 3)
    # the BN arm's train-mode norms loop over every sample (23 of its 28 s); that definition
    # is tested in tests/test_grads.py, so the audit computes the headline one only
    "grads": {"other_definition": "never"},
    "shadow": {"n_models": 6},
    "attack": {"bootstrap": 20, "model_bootstrap": 20, "rmia_population": 100},
    "audit": {"top_k": 4},
}


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh virtual environment with bnmem installed from its wheel (non-editable), its
    dependencies reached through a .pth (torch is not installed twice)."""
    d = tmp_path_factory.mktemp("wheel")
    src = d / "source"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src)
    shutil.copytree(ROOT / "src", src / "src",
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    run = lambda *cmd: subprocess.run(cmd, check=True, capture_output=True, text=True)  # noqa: E731
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
        "--no-index", "-w", str(d / "dist"), str(src))
    (wheel,) = (d / "dist").glob("bnmem-*.whl")
    run(sys._base_executable, "-m", "venv", str(d / "venv"))
    py = d / "venv" / "bin" / "python"
    purelib = run(str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    (Path(purelib.stdout.strip()) / "_bnmem_deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    run(str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel))
    return d / "venv"


def venv_env(venv: Path) -> dict:
    """PATH with the fresh venv first: `python` in dvc.yaml's commands is the wheel's."""
    env = {k: v for k, v in ENV.items() if k != "PYTHONPATH"}
    return {**env, "PATH": f"{venv / 'bin'}:{ENV['PATH']}"}


@pytest.fixture(scope="module")
def project(venv, tmp_path_factory) -> Path:
    """The worked audit as README tells a user to make it, outside the checkout: an empty git
    + DVC repository, the example's files copied into myaudit/ (small params), `bnmem audit
    init myaudit` of the wheel, then `dvc repro` run and committed."""
    work = tmp_path_factory.mktemp("auditrepo")
    proj = work / "myaudit"
    proj.mkdir()
    for name in ("mymodels.py", "digits.npz", "weights.pt", "members.npy"):
        shutil.copy(ROOT / "examples" / "audit" / name, proj)
    params = merge(yaml.safe_load((ROOT / "examples" / "audit" / "params.yaml").read_text()), SMALL)
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (work / ".gitignore").write_text("__pycache__/\n")
    env = venv_env(venv)
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"],
                ["dvc", "config", "core.autostage", "true"],
                [str(venv / "bin" / "bnmem"), "audit", "init", "myaudit"]):
        res = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run(["dvc", "repro"], cwd=proj, env=env, capture_output=True, text=True)
    (work / "repro.log").write_text(res.stdout + res.stderr)
    assert res.returncode == 0, (res.stdout + res.stderr)[-5000:]
    sh(work, "git", "add", "-A")
    sh(work, "git", "commit", "-qm", "audit run")
    return proj


@pytest.mark.slow
def test_the_wheel_audits_outside_the_checkout_with_every_c_kernel(venv, project):
    py = venv / "bin" / "python"
    where = subprocess.run([str(py), "-c", "import bnmem, pathlib; print(pathlib.Path("
                            "bnmem.__file__).parent)"], capture_output=True, text=True, check=True,
                           env=venv_env(venv))
    pkg = Path(where.stdout.strip())
    assert pkg.is_relative_to(venv) and not pkg.is_relative_to(ROOT)  # the wheel, not src/
    ours = sorted(p.relative_to(ROOT / "src" / "bnmem").as_posix()
                  for p in (ROOT / "src" / "bnmem").rglob("*") if p.suffix in (".c", ".h", ".yaml"))
    assert ours and all((pkg / f).is_file() for f in ours), ours
    spec = (project / "dvc.yaml").read_text()
    assert "../" not in spec and str(ROOT) not in spec and "python -m bnmem.stages." in spec
    log = (project.parent / "repro.log").read_text()
    assert "kernel unavailable" not in log  # the C kernels built from the wheel's sources
    # and every one of them, whether or not this audit's stages ask for it (the BN arm's
    # train-mode norms, lenet_rows, are off in SMALL), builds and loads from the wheel
    built = subprocess.run([str(py), "-c", "import bnmem\n"
                            "from bnmem.native.library import KERNELS, build\n"
                            "from bnmem.attack import roc\n"
                            "for k in KERNELS:\n"
                            "    for dt in ('float32', 'float64'):\n"
                            "        build(k, dt)\n"
                            "assert roc._kernel() is not None\n"
                            "print(sorted(KERNELS), roc.__file__)"],
                           capture_output=True, text=True, env=venv_env(venv))
    assert built.returncode == 0, built.stderr[-2000:]
    assert "lenet_rows" in built.stdout and str(pkg) in built.stdout
    for stage in ("code", "prepare", "train@none", "shadow@batchnorm-0", "attack", "report"):
        assert f"Running stage '{stage}'" in log
    code = json.loads((project / "data" / "code.json").read_text())
    from importlib.metadata import version
    assert code["bnmem"] == "0.1.0" and code["files"] >= 40 and code["torch"] == version("torch")
    again = subprocess.run(["dvc", "repro"], cwd=project, env=venv_env(venv),
                           capture_output=True, text=True)
    assert again.returncode == 0
    ran = {l.split("'")[1] for l in again.stdout.splitlines() if l.startswith("Running stage")}
    assert ran == {"code"}, again.stdout  # the stamp is unchanged: everything else up to date


@pytest.mark.slow
def test_bnmem_command_help_and_errors(venv, tmp_path):
    bnmem = str(venv / "bin" / "bnmem")
    run = lambda *a: subprocess.run([bnmem, *a], cwd=tmp_path, capture_output=True,  # noqa: E731
                                    text=True, env=venv_env(venv))
    for args in (["--help"], ["audit", "init", "--help"], ["stage", "--help"]):
        res = run(*args)
        assert res.returncode == 0 and "usage: bnmem" in res.stdout, res.stderr
    assert run("--version").stdout.strip() == "bnmem 0.1.0"
    res = run("stage", "train", "--help")
    assert res.returncode == 0 and "--recipe" in res.stdout
    res = run("grid")  # a driver of a checkout: outside one, one line
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert res.stderr.startswith("bnmem: error: grid runs a bnmem checkout's own pipeline")
    res = run("audit", "init", "nosuchdir")
    assert res.returncode == 2 and res.stderr.startswith("bnmem: error: nosuchdir: no such folder")
    (tmp_path / "new").mkdir()
    res = run("audit", "init", "new")  # no params.yaml: the commented template, then dvc.yaml
    assert res.returncode == 0, res.stderr
    assert "wrote new/params.yaml from the template" in res.stdout
    assert (tmp_path / "new" / "params.yaml").read_text().startswith("# An audit of your own")
    assert (tmp_path / "new" / "dvc.yaml").is_file()
    assert run("audit", "init", "new", "--check").returncode == 0


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
    line = _err(run_main("exposure", *args, "--target-weights", str(tmp_path / "other.pt"),
                          "--members", "members.npy", cwd=project))
    assert "audit target weights:" in line and "does not fit arch mymodels:make_net" in line
    line = _err(run_main("exposure", *args, "--target-weights", "weights.pt",
                          "--members", str(tmp_path / "neg.npy"), cwd=project))
    assert "audit members:" in line and "negative index -1" in line
    line = _err(run_main("exposure", *args, cwd=project))  # params name weights, dvc.yaml not
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
    line = _err(run_main("prepare", "--params", str(tmp_path / "p.yaml"), "--pool", str(pool),
                          "--test", str(tmp_path / "t.npz"), cwd=project))
    assert line.startswith("bnmem prepare: error: dataset: ") and words in line
    assert pool.read_bytes() == before
