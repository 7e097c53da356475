import bnmem  # noqa: F401, I001  (first: pins the CPU kernels as the stages do)
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
os.chdir(ROOT)  # tests read the repo's params.yaml and call stages/ by relative path


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def run_stage(script: str, *args: str, cwd: Path = ROOT):
    """Run a stage CLI as DVC would; returns the CompletedProcess."""
    import subprocess
    return subprocess.run([sys.executable, str(ROOT / "stages" / script), *args], cwd=cwd,
                          capture_output=True, text=True)


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op thread for a module: on 2 shared cores, 2 OpenMP threads stall at every
    barrier when another job runs, and tiny tensors gain nothing from more."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)

