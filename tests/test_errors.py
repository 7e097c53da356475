"""Bad input through the real stage CLIs: one line naming the key or file, exit status 2,
nothing already computed touched. Also: no unpickling of anything read from disk."""
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT, run_main, run_stage

BASE = yaml.safe_load((ROOT / "params.yaml").read_text())


def params_with(tmp_path: Path, **over) -> Path:
    raw = dict(BASE)
    for key, value in over.items():
        if "." in key:
            section, sub = key.split(".")
            raw[section] = {**raw[section], sub: value}
        else:
            raw[key] = value
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


BAD_PARAMS = [
    ({"noise_rate": 1.5}, "noise_rate: 1.5 is invalid; valid: a number in [0, 1)"),
    ({"noise_rate": 0.6, "ood_rate": 0.5}, "noise_rate + ood_rate: 1.1 is invalid"),
    ({"dataset": "imagenet"}, "dataset: 'imagenet' is invalid"),
    ({"arch": "vgg"}, "arch: 'vgg' is invalid"),
    ({"arms": ["none", "weightnorm"]}, "arms: 'weightnorm' is invalid"),
    ({"noise_rat": 0.1}, "noise_rat: unknown key"),
    ({"train.epochs": "ten"}, "train.epochs: expected an integer, got 'ten'"),
    ({"train.epochs": 0}, "train.epochs: 0 is invalid; valid: an integer > 0"),
    ({"train.lr": 0}, "train.lr: 0.0 is invalid; valid: a number > 0"),
    ({"shadow.n_models": 7}, "shadow.n_models: 7 is invalid; valid: an even integer >= 6"),
    ({"shadow.n_models": 4}, "shadow.n_models: 4 is invalid; valid: an even integer >= 6"),
    ({"shadow.shards": 3, "shadow.shard_ids": [0, 1, 2]}, "shadow.shards: 3 is invalid"),
    ({"dataset": "mnist", "pool_size": 4500}, "pool_size: 4500 is larger than the dataset's 4000"),
    ({"dataset": "mnist", "data.root": "/nonexistent"}, "/nonexistent/MNIST/raw: train-images"),
    ({"dataset": "cifar10"}, "cifar10: needs data.root"),
]


@pytest.mark.parametrize("over, message", BAD_PARAMS, ids=[m.split(":")[0] for _, m in BAD_PARAMS])
def test_bad_params_one_line(tmp_path, over, message):
    pool = tmp_path / "pool.npz"
    pool.write_bytes(b"precious")  # an earlier output: must survive the failed run
    res = run_main("prepare", "--params", params_with(tmp_path, **over),
                   "--pool", pool, "--test", tmp_path / "test.npz")
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert pool.read_bytes() == b"precious" and not (tmp_path / "test.npz").exists()


def test_bad_params_one_line_through_the_script(tmp_path):
    """The same rule through `python stages/prepare.py` as DVC runs it (stages/_boot.py,
    the interpreter's exit status and stderr)."""
    pool = tmp_path / "pool.npz"
    pool.write_bytes(b"precious")
    over, message = BAD_PARAMS[0]
    res = run_stage("prepare.py", "--params", str(params_with(tmp_path, **over)),
                    "--pool", str(pool), "--test", str(tmp_path / "test.npz"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], res.stderr
    assert pool.read_bytes() == b"precious" and not (tmp_path / "test.npz").exists()


def test_missing_params_file(tmp_path):
    res = run_stage("configure.py", "--params", str(tmp_path / "nope.yaml"), "--out", str(tmp_path))
    assert res.returncode == 2 and "nope.yaml: params file not found" in res.stderr


def _train_args(tmp_path, pool):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump({**BASE, "arms": ["none"]}))
    return ["--recipe", str(recipe), "--pool", str(pool), "--test", str(pool),
            "--model", str(tmp_path / "m.pt"), "--checkpoints", str(tmp_path / "ck"),
            "--curves", str(tmp_path / "c.csv")]


@pytest.mark.parametrize("content, message", [
    (None, "file not found"),
    (b"PK\x03\x04truncated", "not a readable .npz"),
    ("foreign", "missing arrays"),
])
def test_bad_npz_input(tmp_path, content, message):
    pool = tmp_path / "pool.npz"
    if content == "foreign":
        np.savez(pool, something=np.zeros(3))
    elif content is not None:
        pool.write_bytes(content)
    res = run_main("train", *_train_args(tmp_path, pool))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(pool) in lines[0] and message in lines[0], res.stderr


def test_truncated_npz_written_by_numpy(tmp_path):
    pool = tmp_path / "pool.npz"
    np.savez(pool, x=np.zeros((10, 1, 28, 28), np.uint8), y_train=np.zeros(10, np.int64),
             y_clean=np.zeros(10, np.int64), kind=np.zeros(10, np.int8))
    pool.write_bytes(pool.read_bytes()[:300])
    res = run_main("train", *_train_args(tmp_path, pool))
    assert res.returncode == 2 and "not a readable .npz" in res.stderr


def test_package_never_unpickles():
    """No pickle/eval/exec on disk data: np.load always with allow_pickle=False, torch.load
    always with weights_only=True; the one pickle reader is bnmem.core.io's restricted
    state_dict unpickler (an allow-list of three globals, as weights_only: next test)."""
    for path in list((ROOT / "src").rglob("*.py")) + list((ROOT / "stages").glob("*.py")):
        text = path.read_text()
        if path == ROOT / "src" / "bnmem" / "core" / "io.py":
            assert "pickle.load" not in text and "class _StateUnpickler(pickle.Unpickler)" in text
            text = text.replace("import pickle\n", "")
        assert not re.search(r"\bimport pickle\b|pickle\.load|(?<![.\w])eval\(|(?<![.\w])exec\(", text), path
        for call in re.findall(r"np\.load\([^)]*\)", text):
            assert "allow_pickle=False" in call, (path, call)
        for call in re.findall(r"torch\.load\([^)]*\)", text):
            assert "weights_only=True" in call, (path, call)


def test_state_reader_constructs_nothing_but_tensors(tmp_path):
    """bnmem.core.io.read_state_arrays on a torch-format zip whose pickle calls os.system (or
    any global outside its allow-list) runs nothing and returns None (load_state then
    refuses it under weights_only)."""
    import pickle
    import zipfile
    from bnmem.core.io import read_state_arrays
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            import os
            return (os.system, (f"touch {marker}",))

    for payload in ({"w": Evil()}, Evil(), {"w": print}):
        path = tmp_path / "evil.pt"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", pickle.dumps(payload, protocol=2))
            z.writestr("archive/byteorder", "little")
        assert read_state_arrays(path) is None
        assert not marker.exists()


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04not really a zip", b"hello"])
def test_truncated_or_foreign_pt(tmp_path, content):
    """A weights file cut short or not a state_dict: one line naming it, exit 2."""
    from bnmem.core.config import config_from_dict
    from bnmem.core.records import TargetRecord
    from bnmem.models.spec import model_spec

    n = 12
    pool = tmp_path / "pool.npz"
    np.savez(pool, x=np.zeros((n, 1, 28, 28), np.uint8), y_train=np.zeros(n, np.int64),
             y_clean=np.zeros(n, np.int64), kind=np.zeros(n, np.int8))
    raw = {**BASE, "arms": ["batchnorm"], "pool_size": 20}
    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    model = tmp_path / "batchnorm.pt"
    model.write_bytes(content)
    spec = model_spec(config_from_dict(raw), "batchnorm", 1, 28)
    TargetRecord(spec, {}, [raw["train"]["epochs"]], {}).save(tmp_path / "batchnorm.json")
    res = run_main("grads", "--recipe", str(recipe), "--pool", str(pool), "--model", str(model),
                    "--checkpoints", str(tmp_path / "ck"), "--out", str(tmp_path / "g.npz"),
                    "--metrics", str(tmp_path / "g.json"), "--hist", str(tmp_path / "h.csv"))
    assert res.returncode == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(model) in lines[0] and "not a readable weights file" in lines[0], res.stderr


def test_stage_without_bnmem_says_how_to_fix_it():
    """dvc run from outside the venv starts stages with a python that cannot import bnmem
    (here: -S, no site-packages): one line naming the fix, exit status 2."""
    import os
    import subprocess
    import sys

    from conftest import ROOT
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-S", str(ROOT / "stages" / "prepare.py"), "--pool",
                           "x.npz", "--test", "y.npz"], capture_output=True, text=True, env=env)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot import bnmem" in lines[0]
    assert "source .venv/bin/activate" in lines[0] and "make repro" in lines[0]


def test_exposure_without_the_train_stages_pool_logits_names_the_file(tmp_path):
    """An _eval.npz from before the train stage saved the targets' query logits (or for
    other queries) is one line naming it and what to re-run, not a traceback."""
    from bnmem.core.io import InputError
    from bnmem.stages.exposure import target_logits
    pool = {"y_train": np.zeros(5, np.int64)}
    np.savez(tmp_path / "batchnorm_eval.npz", correct=np.ones(5, bool))
    with pytest.raises(InputError, match=r"batchnorm_eval.npz: holds no pool logits for "
                                         r"queries \['identity', 'hflip'\].*re-run train@batchnorm"):
        target_logits(tmp_path, "batchnorm", ("identity", "hflip"), pool)
    np.savez(tmp_path / "batchnorm_eval.npz", pool_logits=np.zeros((5, 1, 10), np.float32),
             queries=np.array(["identity"]))
    with pytest.raises(InputError, match="saved: \\['identity'\\]"):
        target_logits(tmp_path, "batchnorm", ("identity", "hflip"), pool)
    got = target_logits(tmp_path, "batchnorm", ("identity",), pool)
    assert got.shape == (5, 1, 10)
