"""The contract with the C sources: which files make each library, how they are compiled
and loaded (argument types), and the names that must match lenet.h (parameter slots,
running-statistic slots, status codes; tests/test_native_slots.py checks them)."""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from bnmem.core.ckernel import compile_library

HERE = Path(__file__).parent
# {library: its source files, the first one compiled}: lenet_train_unit.c includes the
# other two (one translation unit, see there), lenet_rows.c includes lenet_train.c (its own
# unit, so the training library is compiled as before); every file listed is hashed into
# the build
HEADERS = ("lenet.h", "lenet_lanes.h")
KERNELS = {"lenet_sq": ("lenet_sq.c",),
           "lenet_train": ("lenet_train_unit.c", "lenet_train.c", "lenet_forward.c"),
           "lenet_rows": ("lenet_rows.c", "lenet_train.c")}
# {library: {function: (leading int arguments, then pointer arguments)}}: see the .c files
SIGNATURES = {"lenet_sq": {"lenet_sq": (3, 15)},
              "lenet_train": {"lenet_train": (4, 9), "lenet_forward": (4, 3)},
              "lenet_rows": {"lenet_batch_sq": (3, 9)}}
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


REALS = {"float32": "float", "float64": "double"}  # the C type REAL per dtype name


def real_name(dtype) -> str:
    """The C type for a float32/float64 dtype, torch's or numpy's ("float" / "double")."""
    name = str(dtype).removeprefix("torch.")
    return REALS[name if name in REALS else np.dtype(dtype).name]


def build(kernel: str, dtype, directory: Path | None = None,
          defines: tuple[str, ...] = ()) -> ctypes.CDLL:
    """Library `kernel` (a KERNELS key) for dtype (float32/float64, torch's or numpy's), compiled unless
    `directory` (default: the cache) already holds this build (`bnmem.core.ckernel`), and loaded
    with its SIGNATURES. `defines`: extra -D macros (e.g. BNMEM_PROFILE). Raises
    RuntimeError when the compiler fails, OSError when the library cannot be loaded."""
    real = real_name(dtype)
    lib = compile_library(f"{kernel}_{real}", HERE / KERNELS[kernel][0],
                          [HERE / f for f in (*KERNELS[kernel], *HEADERS)], directory,
                          [f"-DREAL={real}"] + [f"-D{d}" for d in defines])
    return load(lib, kernel)


def load(path: Path, kernel: str) -> ctypes.CDLL:
    """The compiled library of `kernel` at `path`, its functions typed per SIGNATURES."""
    handle = ctypes.CDLL(str(path))
    for name, (ints, ptrs) in SIGNATURES[kernel].items():
        fn = getattr(handle, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_int] * ints + [ctypes.c_void_p] * ptrs
    return handle
