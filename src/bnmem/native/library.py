"""The contract with the C sources: which files make each library, how they are compiled
and loaded (argument types), and the names that must match lenet.h (parameter slots,
running-statistic slots, status codes; tests/test_native_slots.py checks them)."""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shlex
import subprocess
import sysconfig
import tempfile
from pathlib import Path

import torch

from bnmem import cpu

HERE = Path(__file__).parent
# {library: its source files, the first one compiled}: lenet_train_unit.c includes the
# other two (one translation unit, see there); every file listed is hashed into the build
HEADERS = ("lenet.h", "lenet_lanes.h")
KERNELS = {"lenet_sq": ("lenet_sq.c",),
           "lenet_train": ("lenet_train_unit.c", "lenet_train.c", "lenet_forward.c")}
# {library: {function: (leading int arguments, then pointer arguments)}}: see the .c files
SIGNATURES = {"lenet_sq": {"lenet_sq": (3, 15)},
              "lenet_train": {"lenet_train": (4, 9), "lenet_forward": (4, 3)}}
FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math",
         "-fassociative-math", "-fno-signed-zeros"]  # the last three let gcc vectorize sums
NORMS = ("none", "batchnorm")  # the norm layers the kernels implement

# lenet.h's enum slot and enum running, in order: the pointer tables' entries per model
SLOTS = [f"{layer}.{kind}" for layer in ("conv1", "norm1", "conv2", "norm2", "fc1", "norm3",
                                          "fc2", "norm4", "fc3") for kind in ("weight", "bias")]
RUNNING = [f"norm{i}.running_{m}" for i in range(1, 5) for m in ("mean", "var")]
# lenet.h's enum status after OK (1, 2, ...) -> the ValueError message
ERRORS = {
    "E_SHAPE": "native LeNet kernel: unsupported shape or batch count",
    "E_LABEL": "y: labels must lie in [0, classes)",
    "E_MEMORY": "native LeNet kernel: out of memory",
    "E_BN_BATCH_OF_ONE": "train.batch_size: a BatchNorm model got a batch of 1 sample (batch "
                         "statistics need >= 2); change batch_size or the subset size",
}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bnmem"


def build(kernel: str, dtype: torch.dtype, directory: Path | None = None,
          defines: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Library `kernel` (a KERNELS key) for dtype (float32/float64), compiled unless
    `directory` (default: the cache) already holds this build, and loaded with its
    SIGNATURES. `defines`: extra -D macros (e.g. BNMEM_PROFILE). Raises RuntimeError when
    the compiler fails, OSError when the library cannot be loaded."""
    real = {torch.float32: "float", torch.float64: "double"}[dtype]
    flags = FLAGS + cpu.c_flags() + [f"-D{d}" for d in defines]  # x86-64-v3 when pinned
    # -march=native code is only valid on this CPU: key the cache on its flags too, for
    # home directories shared between machines
    native = _cpu_id() if "-march=native" in flags else ""
    text = b"".join((HERE / f).read_bytes() for f in (*KERNELS[kernel], *HEADERS))
    digest = hashlib.sha256(text + " ".join(flags).encode() + native.encode()).hexdigest()[:16]
    lib = Path(directory or cache_dir()) / f"{kernel}_{real}_{digest}.so"
    if not lib.exists():
        cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:  # atomic: build, then rename
            part = Path(tmp) / lib.name
            try:
                subprocess.run([*cc, *flags, f"-DREAL={real}", str(HERE / KERNELS[kernel][0]), "-o",
                                str(part), "-lm"], check=True, capture_output=True, text=True,
                               timeout=120)
            except (OSError, subprocess.SubprocessError) as exc:
                raise RuntimeError(str(getattr(exc, "stderr", "") or exc).strip()) from exc
            os.replace(part, lib)
    return load(lib, kernel)


def load(path: Path, kernel: str) -> ctypes.CDLL:
    """The compiled library of `kernel` at `path`, its functions typed per SIGNATURES."""
    handle = ctypes.CDLL(str(path))
    for name, (ints, ptrs) in SIGNATURES[kernel].items():
        fn = getattr(handle, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int] * ints + [ctypes.c_void_p] * ptrs
    return handle


def _cpu_id() -> str:
    """The CPU model and instruction-set flags (Linux), else the platform's description."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "".join(sorted({l for l in lines if l.startswith(("model name", "flags"))}))
    except OSError:
        return platform.platform() + platform.processor()
