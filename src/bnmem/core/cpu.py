"""Pin the CPU kernel level, so every x86-64 machine with AVX2 computes the same bits.

Float32 results depend on which SIMD kernels run: PyTorch's vectorized kernels, oneDNN's
convolutions and MKL's gemm each pick AVX-512 code on a CPU that has it, with a different
summation order, and numpy does the same for exp/log and OpenBLAS for matmul. A run on an
AVX-512 machine then differs from one on an AVX2 machine from the first epoch on. bnmem
caps all of them at AVX2 + FMA (x86-64-v3), which every supported machine has:

- `pin()` sets the environment variables the libraries read when they first dispatch
  (torch and oneDNN on first use, numpy and OpenBLAS when they load). `import bnmem` calls
  it, and every stage script imports bnmem before numpy or torch (`stages/_boot.py`).
- The C kernels (bnmem.native) are compiled with `c_flags()`: -march=x86-64-v3.
- `check()` reports what actually runs and, in a stage, fails when the pin did not take.

Opt out with BNMEM_CPU=native: each library then uses the best kernels of this CPU (faster
on AVX-512 machines, see BENCHMARKS.md) and results match only machines of the same kind.
A variable the user already set is left alone (it wins over the pin; `check()` says so).
On other architectures, or an x86 CPU without AVX2/FMA, nothing is pinned.
"""
from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

ENV = "BNMEM_CPU"  # "avx2" (default) | "native"
PIN = {  # variable -> value, read by the library when it first dispatches or loads
    "ATEN_CPU_CAPABILITY": "avx2",  # PyTorch's DispatchStub kernels (reductions, BN, ...)
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN (mkldnn) convolutions
    "MKL_CBWR": "AVX2",  # MKL gemm: conditional numerical reproducibility, AVX2 code path
    "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR",  # numpy SIMD loops
    "OPENBLAS_CORETYPE": "Haswell",  # numpy's OpenBLAS (the AVX2 kernels)
}
TORCH_CAPABILITY = "AVX2"  # what torch.backends.cpu.get_cpu_capability() reports when pinned


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def level() -> str:
    """"avx2" when the pin applies (x86-64 with AVX2 and FMA, BNMEM_CPU not "native"), else
    "native"."""
    want = os.environ.get(ENV, "avx2").strip().lower()
    if want not in ("avx2", "native"):
        raise ValueError(f"{ENV}={want!r} is invalid; valid: avx2 (default) or native")
    x86 = platform.machine().lower() in ("x86_64", "amd64")
    return "avx2" if want == "avx2" and x86 and {"avx2", "fma"} <= _cpu_flags() else "native"


_EFFECTIVE: bool | None = None  # whether the first pin() came before numpy / torch loaded


def pin() -> str:
    """Set the pinning variables (those not already set) when `level()` is avx2; returns
    the level. Effective only before numpy / torch load or first dispatch (see `check`)."""
    global _EFFECTIVE
    lvl = level()
    if _EFFECTIVE is None:
        _EFFECTIVE = (lvl != "avx2" or all(k in os.environ for k in PIN)
                      or not {"numpy", "torch"} & set(sys.modules))
    if lvl == "avx2":
        for key, value in PIN.items():
            os.environ.setdefault(key, value)
    return lvl


def pin_effective() -> bool:
    """True when the pin took effect in this process: the variables were in the environment
    when it started, or bnmem pinned before numpy and torch loaded. False in a process that
    imported numpy first without them (e.g. a Dask worker started without the variables
    `python -m bnmem.train.scaleout env` prints): its numpy may run other SIMD kernels than a stage's."""
    return bool(_EFFECTIVE) if _EFFECTIVE is not None else False


def environment() -> dict[str, str]:
    """The variables a process that loads numpy or torch before bnmem (a Dask worker) must
    start with to compute a stage's bits: the pin at this machine's level."""
    return dict(PIN) if level() == "avx2" else {}


def c_flags() -> list[str]:
    """Code-generation flags for the C kernels at the current level."""
    return ["-march=x86-64-v3", "-mtune=generic"] if level() == "avx2" else ["-march=native"]


def check(strict: bool = False) -> dict[str, str]:
    """What runs: {"level", "torch"} (torch's dispatch level, e.g. AVX2).

    With strict=True (the stages), a pinned level whose torch dispatch is not AVX2 raises
    RuntimeError: torch was used before `pin()` took effect. A user's own
    ATEN_CPU_CAPABILITY (e.g. `default`) wins over the pin, as documented: no error then.
    """
    import torch

    lvl, torch_level = level(), torch.backends.cpu.get_cpu_capability()
    pinned = os.environ.get("ATEN_CPU_CAPABILITY", "").lower() == PIN["ATEN_CPU_CAPABILITY"]
    if strict and lvl == "avx2" and pinned and torch_level != TORCH_CAPABILITY:
        raise RuntimeError(
            f"CPU kernels not pinned: torch dispatches {torch_level}, expected "
            f"{TORCH_CAPABILITY} (ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY')!r});"
            f" import bnmem before torch, or set {ENV}=native to opt out")
    return {"level": lvl, "torch": torch_level}

