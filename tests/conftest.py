import os  # noqa: I001
# One BLAS / OpenMP thread in each pytest-xdist worker and the stages it starts, set before
# numpy loads (OpenBLAS reads it once; nothing pytest loads before this file imports numpy):
# make test runs one worker per core, and numpy's threads spinning beside the other
# worker's cost 5-13 % of the suite's time on a 2-core AMD EPYC (404 -> 382 s and 454 -> 393 s
# in two A/Bs; the tests that read the simulation stores about twice as fast; BENCHMARKS.md,
# "The test suite").
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")
import bnmem  # noqa: F401, E402  (before numpy and torch: pins the CPU kernels as the stages do)
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
os.chdir(ROOT)  # tests read the repo's params.yaml and call stages/ by relative path


@pytest.fixture
def rng():
    return np.random.default_rng(0)


# a temporary git + DVC repository's commands: the venv's dvc first, a fixed git identity
ENV = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@t", "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def load_script(relpath: str):
    """A script of the repository that is no package module (tools/, bench/), imported from
    its file under its stem's name; its folder goes on sys.path (last, so it shadows nothing),
    as running it would (bench scripts import bench/lscpu.py)."""
    import importlib.util
    path = ROOT / relpath
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(base[k], v) if isinstance(v, dict) else v
    return out


def sh(cwd: Path, *cmd: str) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def tiny_target(directory: Path, n: int, n_test: int, flipped: int = 0):
    """A random-image pool of `n` (the first `flipped` of kind flipped) and test set of
    `n_test`, and a 2-epoch batchnorm recipe (seed 3, batches of 32, checkpoint 1) written to
    `directory`/p.yaml: (cfg, pool, test) for the target-model tests."""
    import yaml

    from bnmem.core.config import load_config
    rng = np.random.default_rng(0)
    pool = {"x": rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8),
            "y_train": rng.integers(0, 10, n).astype(np.int64), "kind": np.zeros(n, np.int8)}
    pool["kind"][:flipped] = 1
    pool["y_clean"] = pool["y_train"].copy()
    test = {"x": rng.integers(0, 256, (n_test, 1, 28, 28), dtype=np.uint8),
            "y": rng.integers(0, 10, n_test).astype(np.int64)}
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(arms=["batchnorm"], seed=3)
    params["train"].update(epochs=2, batch_size=32, checkpoints=[1])
    (directory / "p.yaml").write_text(yaml.safe_dump(params))
    return load_config(directory / "p.yaml"), pool, test


def run_stage(script: str, *args: str, cwd: Path = ROOT):
    """Run a stage CLI as DVC would; returns the CompletedProcess."""
    return subprocess.run([sys.executable, str(ROOT / "stages" / script), *args], cwd=cwd,
                          capture_output=True, text=True)


def run_main(stage: str, *args: str, cwd: Path = ROOT):
    """Run stage `stage`'s main() in this process, as its script would (bnmem.core.cli.run:
    bad input -> one line on stderr, exit status 2), without a fresh interpreter's seconds
    of imports; returns (returncode, stderr) like subprocess.run. The process-wide state a
    stage sets (cwd, argv, torch threads, root log handlers) is restored. The script path
    itself (stages/_boot.py, `python stages/<stage>.py`) is tested through run_stage."""
    import contextlib
    import importlib
    import io
    import logging

    import torch

    from bnmem.core import cli
    mod = importlib.import_module(f"bnmem.stages.{stage}")
    err, code = io.StringIO(), 0
    root, handlers, threads = logging.getLogger(), logging.getLogger().handlers[:], torch.get_num_threads()
    argv, here = sys.argv, os.getcwd()
    try:
        os.chdir(cwd)
        sys.argv = [f"stages/{stage}.py", *map(str, args)]
        with contextlib.redirect_stderr(err):
            try:
                cli.run(mod.main, stage)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv, root.handlers[:] = argv, handlers
        os.chdir(here)
        torch.set_num_threads(threads)
    return subprocess.CompletedProcess([stage, *args], code, "", err.getvalue())


# make test runs the suite on every core (pytest-xdist, --dist loadgroup). Each of these
# modules builds a module-scoped fixture of about a minute (the wheel's audit project, the
# default pipeline's temp repository, the Dask reference shards): all its tests go to one
# worker, so it is built once; every other test goes wherever a worker is free.
SHARED_SETUP = ("test_audit_pipeline", "test_pipeline", "test_dask")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadgroup with SHARED_SETUP's modules as the groups. (xdist's own loadgroup
    renames each marked item's nodeid, which pytest >= 9.2 ignores: its groups fall apart.)
    Whole modules are the largest units, so loadscope's reorder hands them out first.
    xdist_group marks play no part (this suite sets none)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedSetupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if Path(module).stem in SHARED_SETUP else nodeid

    return SharedSetupScheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """One intra-op thread for every test (as the stages run, train.threads: 1): on 2
    shared cores, 2 OpenMP threads stall at every barrier when another job runs, and tiny
    tensors gain nothing from more (one test took 72 s in the suite, 5.8 s alone)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

