import bnmem  # noqa: F401, I001  (first: pins the CPU kernels as the stages do)
import os
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


def merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = merge(base[k], v) if isinstance(v, dict) else v
    return out


def sh(cwd: Path, *cmd: str) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True)
    assert res.returncode == 0, f"{' '.join(cmd)} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


def run_stage(script: str, *args: str, cwd: Path = ROOT):
    """Run a stage CLI as DVC would; returns the CompletedProcess."""
    import subprocess
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
    import subprocess

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

