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
