"""What decides a shadow model's bits in a process (`signature`: the CPU pin, the libraries
and the C kernels), checked between the shadow stage and every Dask worker
(`check_signature`), and the CPU model a worker reports (numpy only until called)."""
from __future__ import annotations

import os
import platform
from pathlib import Path

import numpy as np

from bnmem.core.io import ClusterError


def signature() -> dict[str, str]:
    """What decides a shadow model's bits in this process: the CPU pin and the versions of
    the libraries that compute them. A worker whose signature differs from the stage's
    would return different bits, so its results are refused."""
    import torch

    import bnmem
    from bnmem.core import cpu

    sig = {f"pin {k}": os.environ.get(k, "") for k in cpu.PIN}
    sig.update({"level": cpu.level(), "pinned before numpy": str(cpu.pin_effective()),
                "torch dispatch": torch.backends.cpu.get_cpu_capability(),
                "torch": torch.__version__, "numpy": np.__version__, "bnmem": bnmem.__version__,
                "machine": platform.machine(), "C kernels": str(_native_kernels())})
    if cpu.level() == "native":  # unpinned: the bits are this CPU model's
        sig["CPU model (BNMEM_CPU=native)"] = cpu_model()
    return sig


def _native_kernels() -> bool:
    """Whether the LeNet C kernels build and load here (without them a worker would train
    through PyTorch: other bits)."""
    import torch

    from bnmem import native
    return native._lib(torch.float32, "lenet_train") is not None


def check_signature(mine: dict, theirs: dict, worker: str) -> None:
    if theirs != mine:
        diff = {k: f"{mine.get(k)} here, {theirs.get(k)} there"
                for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)}
        raise ClusterError(
            f"dask worker {worker} computes with other kernels or libraries than this stage "
            f"({diff}), so its bits would differ: start workers in the stage's environment, "
            "after eval \"$(python -m bnmem.train.scaleout env)\"")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"
