"""LeNet kernels in C, compiled at first use: per-sample gradient norms (lenet_sq.c, the
grads stage) and the gradients of a training step for K models (lenet_train.c, the shadow
stage's stacked trainer).

lenet_sq runs one sample at a time in cache and only touches the max-pools' argmax
positions on the way back, where PyTorch runs ~15 batched kernels over the whole chunk;
bench/bench_grads.py measures both. lenet_train makes a batch's samples the SIMD lanes
(bench/bench_train.py). Both are accelerators, never requirements: without a C compiler
(or with BNMEM_NATIVE=0) `supported()` is False / `TrainStep.create` returns None and the
PyTorch paths (bnmem.fastgrad, autograd on the stacked network) are used. Built with the
system `cc` into ~/.cache/bnmem (XDG_CACHE_HOME), one library per source hash, flags, CPU
and precision; ctypes releases the GIL during a call, so worker threads run them in
parallel. lenet_sq needs ~60 KB of stack per call (float32; ~115 KB in float64): fine with
glibc's 8 MB thread stacks; lenet_train allocates a ~5 MB workspace per model and batch of 64.
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

from bnmem import cpu

log = logging.getLogger(__name__)
SOURCE = Path(__file__).with_name("lenet_sq.c")
TRAIN_SOURCE = Path(__file__).with_name("lenet_train.c")
FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math",
         "-fassociative-math", "-fno-signed-zeros"]  # the last three let gcc vectorize sums
_LIBS: dict[tuple[Path, torch.dtype], ctypes.CDLL | None] = {}
_LOCK = threading.Lock()


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bnmem"


def _build(source: Path, dtype: torch.dtype) -> ctypes.CDLL | None:
    real = {torch.float32: "float", torch.float64: "double"}[dtype]
    flags = FLAGS + cpu.c_flags()  # x86-64-v3 when pinned (bnmem.cpu), else -march=native
    # -march=native code is only valid on this CPU: key the cache on its flags too, for
    # home directories shared between machines
    native = _cpu_id() if "-march=native" in flags else ""
    digest = hashlib.sha256(source.read_bytes() + " ".join(flags).encode()
                            + native.encode()).hexdigest()[:16]
    lib = _cache_dir() / f"{source.stem}_{real}_{digest}.so"
    if not lib.exists():
        cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:  # atomic: build, then rename
            part = Path(tmp) / lib.name
            try:
                subprocess.run([*cc, *flags, f"-DREAL={real}", str(source), "-o", str(part), "-lm"],
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
    if source == SOURCE:
        handle.lenet_sq.restype = ctypes.c_int
        handle.lenet_sq.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 15  # see lenet_sq.c
    else:
        handle.lenet_train.restype = ctypes.c_int
        handle.lenet_train.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p] * 9  # lenet_train.c
        handle.lenet_forward.restype = ctypes.c_int
        handle.lenet_forward.argtypes = [ctypes.c_int] * 4 + [ctypes.c_void_p] * 3
    return handle


def _cpu_id() -> str:
    """The CPU model and instruction-set flags (Linux), else the platform's description."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "".join(sorted({l for l in lines if l.startswith(("model name", "flags"))}))
    except OSError:
        return platform.platform() + platform.processor()


def _lib(dtype: torch.dtype, source: Path = SOURCE) -> ctypes.CDLL | None:
    if os.environ.get("BNMEM_NATIVE", "1") == "0" or dtype not in (torch.float32, torch.float64):
        return None
    with _LOCK:
        if (source, dtype) not in _LIBS:
            _LIBS[source, dtype] = _build(source, dtype)
        return _LIBS[source, dtype]


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


_SLOTS = [f"{layer}.{kind}" for layer in ("conv1", "norm1", "conv2", "norm2", "fc1", "norm3",
                                          "fc2", "norm4", "fc3") for kind in ("weight", "bias")]


def _table(k: int, tensors: list[torch.Tensor | None]) -> ctypes.Array:
    """Pointers to model j's slice of each stacked [K, ...] tensor (None: NULL), model-major:
    the C side reads entry j * len(tensors) + i."""
    ptrs = [None if t is None else t.data_ptr() + j * t[0].numel() * t.element_size()
            for j in range(k) for t in tensors]
    return (ctypes.c_void_p * len(ptrs))(*ptrs)


class TrainStep:
    """Gradients of one SGD step for K stacked LeNets in C (lenet_train.c), written into
    each parameter's `.grad`; the optimizer step stays in PyTorch.

    `params`: {LeNet parameter name: [K, *shape] leaf tensor}; `state`: the stacked
    state_dict (running statistics updated in place). `x_pad`: the pool [N, C, 32, 32]
    (zero-padded to 32 px as conv1 pads), `y`: its labels [N]. `lam`, `target`: the
    gamma/sigma penalty (lam 0: off). Build with `TrainStep.create`, which returns None
    where the kernel does not apply (no compiler, BNMEM_NATIVE=0, not the CPU, a dtype
    other than float32/float64, norm other than none/batchnorm).
    """

    def __init__(self, lib: ctypes.CDLL, params: dict[str, torch.Tensor],
                 state: dict[str, torch.Tensor], x_pad: torch.Tensor, y: torch.Tensor,
                 bn: bool, eps: float, momentum: float, lam: float, target: float):
        self.lib, self.x_pad, self.y = lib, x_pad.contiguous(), y.to(torch.int64).contiguous()
        self.k = len(params["conv1.weight"])
        self.classes = params["fc3.weight"].shape[1]
        for p in params.values():
            p.grad = torch.zeros_like(p)
        self.hyper = torch.tensor([eps, momentum, lam, target], dtype=torch.float64)
        self.p_table = _table(self.k, [params.get(s) for s in _SLOTS])
        self.g_table = _table(self.k, [params[s].grad if s in params else None for s in _SLOTS])
        stats = [state.get(f"norm{i}.running_{m}") for i in range(1, 5) for m in ("mean", "var")]
        self.r_table = _table(self.k, stats if bn else [None] * 8)
        self.out = torch.zeros(self.k, 2, dtype=torch.float64)

    @classmethod
    def create(cls, params: dict[str, torch.Tensor], state: dict[str, torch.Tensor], norm: str,
               x_pad: torch.Tensor, y: torch.Tensor, eps: float, momentum: float | None,
               lam: float, target: float) -> "TrainStep | None":
        w = params["conv1.weight"]
        if (norm not in ("none", "batchnorm") or momentum is None
                or {w.device.type, x_pad.device.type, y.device.type} != {"cpu"}
                or x_pad.shape[1:] != (w.shape[2], 32, 32) or w.shape[2] > 3
                or params["fc3.weight"].shape[1] > 256 or x_pad.dtype != w.dtype):
            return None
        lib = _lib(w.dtype, TRAIN_SOURCE)
        if lib is None:
            return None
        return cls(lib, params, state, x_pad, y, norm == "batchnorm", eps, momentum, lam, target)

    def __call__(self, rows: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients for batches x_pad[rows[k, :counts[k]]] (rows [K, B] int64, real rows
        first); returns each model's mean batch loss and penalty, float64 [K] each."""
        rows, counts = rows.to(torch.int64).contiguous(), counts.to(torch.int64).contiguous()
        if len(rows) != self.k or rows.numel() and not (0 <= int(rows.min()) and
                                                        int(rows.max()) < len(self.x_pad)):
            raise ValueError(f"rows: expected [{self.k}, B] indices into the pool's "
                             f"{len(self.x_pad)} rows, got shape {tuple(rows.shape)}")
        code = self.lib.lenet_train(
            self.k, rows.shape[1], self.x_pad.shape[1], self.classes, counts.data_ptr(),
            rows.data_ptr(), self.x_pad.data_ptr(), self.y.data_ptr(), self.hyper.data_ptr(),
            *[ctypes.cast(t, ctypes.c_void_p) for t in (self.p_table, self.g_table, self.r_table)],
            self.out.data_ptr())
        if code:
            raise ValueError({2: "y: labels must lie in [0, classes)",
                              3: "native LeNet training step: out of memory",
                              4: "train.batch_size: a BatchNorm model got a batch of 1 sample "
                                 "(batch statistics need >= 2); change batch_size or the "
                                 "subset size"}.get(
                code, "native LeNet training step: unsupported shape or batch"))
        return self.out[:, 0], self.out[:, 1]


@torch.no_grad()
def lenet_forward(params: list[torch.Tensor], x_pad: torch.Tensor) -> torch.Tensor | None:
    """Eval-mode logits [K, N, classes] of K LeNets on the same inputs x_pad [N, C, 32, 32]
    (zero-padded as conv1 pads), in C (lenet_train.c), or None where the kernel does not
    apply (as TrainStep.create). `params`: the stacked [K, ...] weight and bias of conv1,
    conv2, fc1, fc2, fc3, with any eval-mode BN already folded in. NaN propagates as in
    PyTorch (max-pool and relu pass it on)."""
    w = params[0]
    classes = params[8].shape[1]
    if (w.device.type != "cpu" or x_pad.device.type != "cpu" or x_pad.dtype != w.dtype
            or w.shape[2] > 3
            or x_pad.shape[1:] != (w.shape[2], 32, 32) or classes > 256):
        return None
    lib = _lib(w.dtype, TRAIN_SOURCE)
    if lib is None:
        return None
    given = iter(t.detach().to(w.dtype).contiguous() for t in params)
    ps = [None if s.startswith("norm") else next(given) for s in _SLOTS]
    k, x = len(w), x_pad.contiguous()
    table = _table(k, ps)
    out = torch.empty(k, len(x), classes, dtype=w.dtype)
    code = lib.lenet_forward(k, len(x), x.shape[1], classes, x.data_ptr(),
                             ctypes.cast(table, ctypes.c_void_p), out.data_ptr())
    if code:
        raise ValueError("native LeNet forward: " + ("out of memory" if code == 3 else
                                                      "unsupported shape"))
    return out
