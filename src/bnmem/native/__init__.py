"""LeNet kernels in C, compiled at first use: per-sample gradient norms (lenet_sq.c, the
grads stage) and a training step and eval forward for K models (lenet_train.c and
lenet_forward.c, the shadow stage's stacked trainer); lenet.h and lenet_lanes.h hold what
they share.

lenet_sq runs one sample at a time in cache and only touches the max-pools' argmax
positions on the way back (bench/bench_grads.py); lenet_train makes a batch's samples the
SIMD lanes (bench/bench_train.py); speeds: BENCHMARKS.md. Both are accelerators, never
requirements: `applies(...)` is the one place that decides whether a kernel runs, and
where it is False (no C compiler, BNMEM_NATIVE=0, not the CPU, another dtype or norm) the
callers use PyTorch (bnmem.grads.fastgrad, autograd on the stacked network). Built with the
system `cc` into ~/.cache/bnmem (XDG_CACHE_HOME), one library per sources hash, flags, CPU
and precision; ctypes releases the GIL during a call, so worker threads run them in
parallel. lenet_sq needs ~60 KB of stack per call (float32; ~115 KB in float64): fine with
glibc's 8 MB thread stacks; lenet_train allocates a ~5 MB workspace per model and batch of 64.
"""
from __future__ import annotations

from bnmem.native.library import (ERRORS, HEADERS, KERNELS, NORMS, RUNNING, SLOTS, build,
                                  load)

__all__ = ["ERRORS", "HEADERS", "KERNELS", "NORMS", "RUNNING", "SLOTS", "TrainStep", "applies",
           "batch_supported", "build", "lenet_batch_sq", "lenet_forward", "lenet_sq", "load",
           "retain_heap", "setup_process", "supported"]
# the entry points that take torch modules and tensors live in bnmem.native.modules and are
# imported on first use (PEP 562), so that importing bnmem.native.arrays (the grads stage's
# numpy kernels) or this package does not import torch
_TORCH = {"TrainStep", "applies", "batch_supported", "lenet_batch_sq", "lenet_forward",
          "lenet_sq", "retain_heap", "setup_process", "supported", "_lib", "_call", "_table",
          "_check_pool", "_arr", "_state", "_padded"}


def __getattr__(name: str):
    if name in _TORCH:
        from bnmem.native import modules
        return getattr(modules, name)
    raise AttributeError(f"module 'bnmem.native' has no attribute {name!r}")
