"""LeNet per-sample gradient norms in C (lenet_sq.c), compiled at first use.

The C kernel runs one sample at a time in cache and only touches the max-pools' argmax
positions on the way back, where PyTorch runs ~15 batched kernels over the whole chunk;
bench/bench_grads.py measures both. It is an accelerator, never a requirement: without a
C compiler (or with BNMEM_NATIVE=0) `supported()` is False and bnmem.fastgrad's PyTorch
closed forms are used. Built with the system `cc` into ~/.cache/bnmem (XDG_CACHE_HOME),
one library per source hash and precision; ctypes releases the GIL during a call, so
bnmem.grads' worker threads run it in parallel. It needs ~60 KB of stack per call (float32;
~115 KB in float64): fine with glibc's 8 MB thread stacks.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shlex
import subprocess
import sysconfig
import tempfile
import threading
from pathlib import Path

import numpy as np
import torch
from torch import nn

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("lenet_sq.c")
FLAGS = ["-O3", "-march=native", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math",
         "-fassociative-math", "-fno-signed-zeros"]  # the last three let gcc vectorize sums
_LIBS: dict[torch.dtype, ctypes.CDLL | None] = {}
_LOCK = threading.Lock()


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bnmem"


def _build(dtype: torch.dtype) -> ctypes.CDLL | None:
    real = {torch.float32: "float", torch.float64: "double"}[dtype]
    # -march=native code is only valid on this CPU: key the cache on its flags too, for
    # home directories shared between machines
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(FLAGS).encode()
                            + _cpu_id().encode()).hexdigest()[:16]
    lib = _cache_dir() / f"lenet_sq_{real}_{digest}.so"
    if not lib.exists():
        cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:  # atomic: build, then rename
            part = Path(tmp) / lib.name
            try:
                subprocess.run([*cc, *FLAGS, f"-DREAL={real}", str(SOURCE), "-o", str(part), "-lm"],
                               check=True, capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.SubprocessError) as exc:
                err = getattr(exc, "stderr", "") or exc
                log.info("native LeNet kernel unavailable (%s): using PyTorch", str(err).strip()[:200])
                return None
            os.replace(part, lib)
    try:
        handle = ctypes.CDLL(str(lib))
    except OSError as exc:  # e.g. a cache on a noexec mount
        log.info("native LeNet kernel unavailable (%s): using PyTorch", exc)
        return None
    handle.lenet_sq.restype = ctypes.c_int
    handle.lenet_sq.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 15  # see lenet_sq.c
    return handle


def _cpu_id() -> str:
    """The CPU model and instruction-set flags (Linux), else the platform's description."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "".join(sorted({l for l in lines if l.startswith(("model name", "flags"))}))
    except OSError:
        return platform.platform() + platform.processor()


def _lib(dtype: torch.dtype) -> ctypes.CDLL | None:
    if os.environ.get("BNMEM_NATIVE", "1") == "0" or dtype not in (torch.float32, torch.float64):
        return None
    with _LOCK:
        if dtype not in _LIBS:
            _LIBS[dtype] = _build(dtype)
        return _LIBS[dtype]


def supported(model: nn.Module) -> bool:
    """A LeNet (bnmem.models) with norm none or BatchNorm, 28 px + padding 2 or 32 px, on
    the CPU in float32/float64, every parameter trainable, and a C compiler present."""
    from bnmem.models import LeNet
    if type(model) is not LeNet or not all(p.requires_grad for p in model.parameters()):
        return False
    p = model.conv1.weight
    norms = [model.norm1, model.norm2, model.norm3, model.norm4]
    plain = all(isinstance(m, nn.Identity) for m in norms)
    bn = all(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine
             and m.running_var is not None for m in norms)
    return ((plain or bn) and p.device.type == "cpu" and p.shape[1] <= 3
            and model.fc3.out_features <= 256 and _lib(p.dtype) is not None)


def _arr(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.detach().to(dtype).contiguous()


@torch.no_grad()
def lenet_sq(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """float64 [L, n] per-layer squared per-sample gradient norms of a LeNet in eval mode
    (`supported(model)` must hold), rows in module order as bnmem.grads.layer_groups."""
    dtype = model.conv1.weight.dtype
    lib = _lib(dtype)
    pad = model.conv1.padding[0]
    if x.dim() != 4 or x.shape[1] != model.conv1.in_channels or len(y) != len(x):
        raise ValueError(f"x: expected [n, {model.conv1.in_channels}, H, W] with one label "
                         f"per sample, got x {tuple(x.shape)} and y {tuple(y.shape)}")
    xp = _arr(torch.nn.functional.pad(x, (pad,) * 4) if pad else x, dtype)
    if xp.shape[-2:] != (32, 32):
        raise ValueError(f"x: LeNet's padded input must be 32 x 32, got {tuple(xp.shape[-2:])}")
    n, c = xp.shape[:2]
    yy = y.detach().to(torch.int64).contiguous()
    w2 = _arr(model.conv2.weight, dtype)
    keep = [_arr(t, dtype) for t in (xp, model.conv1.weight, model.conv1.bias,
                                      w2.reshape(16, -1).t().contiguous(), w2, model.conv2.bias,
                                      model.fc1.weight, model.fc1.bias, model.fc2.weight,
                                      model.fc2.bias, model.fc3.weight, model.fc3.bias)]
    bn_arrays, bn_ptr = [], None
    if not isinstance(model.norm1, nn.Identity):
        for m in (model.norm1, model.norm2, model.norm3, model.norm4):
            inv = torch.rsqrt(m.running_var.double() + m.eps)
            scale = m.weight.double() * inv
            bn_arrays += [_arr(t, dtype) for t in (scale, m.bias.double() - m.running_mean.double()
                                                   * scale, m.running_mean, inv)]
        bn_ptr = (ctypes.c_void_p * 16)(*[t.data_ptr() for t in bn_arrays])
    out = np.zeros((n, 9), dtype=np.float64)
    code = lib.lenet_sq(n, c, model.fc3.out_features, keep[0].data_ptr(), yy.data_ptr(),
                        *[t.data_ptr() for t in keep[1:]],
                        ctypes.cast(bn_ptr, ctypes.c_void_p) if bn_ptr is not None else None,
                        out.ctypes.data)
    if code:
        raise ValueError("y: labels must lie in [0, classes)" if code == 2 else
                         "native LeNet kernel: unsupported shape")
    # The kernel's relu/max treat NaN as "not greater"; PyTorch propagates it. Match that:
    # non-finite weights spoil every sample, a non-finite input only its own.
    if not all(bool(torch.isfinite(t).all()) for t in [*keep[1:], *bn_arrays]):
        out[:] = np.nan
    out[~torch.isfinite(xp.flatten(1)).all(1).numpy()] = np.nan
    rows = list(range(9)) if bn_ptr is not None else [0, 2, 4, 6, 8]
    return torch.from_numpy(out[:, rows].T.copy())
