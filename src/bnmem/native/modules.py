"""bnmem.native's torch entry points (see the package's docstring): modules and tensors
in, the kernels of bnmem.native.arrays and lenet_train.c / lenet_forward.c underneath."""
from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np
import torch
from torch import nn

from bnmem.models.zoo import LeNet
from bnmem.native import arrays
from bnmem.native.library import NORMS, RUNNING, SLOTS

__all__ = ["TrainStep", "applies", "batch_supported", "lenet_batch_sq", "lenet_forward",
           "lenet_sq", "retain_heap", "setup_process", "supported"]


def _lib(dtype: torch.dtype, kernel: str = "lenet_sq") -> ctypes.CDLL | None:
    """The library `kernel` (a KERNELS key) for dtype, built once per process; None where
    it cannot run here (BNMEM_NATIVE=0, a dtype other than float32/float64, no compiler).
    One cache with the torch-free entry points (bnmem.native.arrays)."""
    return arrays.lib(dtype, kernel)


def applies(norm: str, device: torch.device | str, dtype: torch.dtype, channels: int,
            classes: int, eps: tuple = (), momentum: tuple = (),
            kernel: str = "lenet_train") -> bool:
    """Whether C `kernel` runs for LeNets with this norm, on this device and dtype, with
    `channels` input channels and `classes` outputs: the one place that decides.

    eps, momentum: the BN layers' values (training only): the kernel takes one of each,
    and a running average (momentum None) is not implemented.
    """
    return (norm in NORMS and torch.device(device).type == "cpu" and 1 <= channels <= 3
            and 1 <= classes <= 256 and len(set(eps)) <= 1 and len(set(momentum)) <= 1
            and None not in momentum and _lib(dtype, kernel) is not None)


def setup_process(threads: int = 0) -> bool:
    """Process-wide settings of the CPU fast paths, in one call: torch's intra-op thread
    count (0: leave it) and the allocator (retain_heap); returns retain_heap's result."""
    if threads:
        torch.set_num_threads(threads)
    return retain_heap()


def retain_heap() -> bool:
    """glibc only: keep freed memory in the heap instead of returning it to the OS.

    A stack's activations are tens of MB per tensor; with glibc's defaults the freed top
    of the heap is trimmed after every step and re-faulted (zeroed by the kernel) in the
    next, which costs time at every step of a LeNet stack (bench/bench_train.py measures
    stacks with it, as the shadow stage runs them).
    Process-wide; RSS stays at its peak. Returns False where glibc's mallopt is missing.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)  # glibc's maximum
                    and libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):
        return False


_call = arrays.call  # one calling convention (tensors via data_ptr)


def supported(model: nn.Module) -> bool:
    """A LeNet (bnmem.models.zoo) with norm none or BatchNorm, every parameter trainable,
    where `applies` holds for lenet_sq (the grads stage's kernel)."""
    if type(model) is not LeNet or not all(p.requires_grad for p in model.parameters()):
        return False
    norms = [model.norm1, model.norm2, model.norm3, model.norm4]
    plain = all(isinstance(m, nn.Identity) for m in norms)
    bn = all(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.affine
             and m.running_var is not None for m in norms)
    p = model.conv1.weight
    return (plain or bn) and applies("none" if plain else "batchnorm", p.device, p.dtype,
                                     p.shape[1], model.fc3.out_features, kernel="lenet_sq")


def _arr(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.detach().to(dtype).contiguous()


def _state(model: nn.Module) -> dict[str, np.ndarray]:
    """The module's state_dict as numpy arrays (views of CPU tensors, no copy)."""
    return {k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}


def _padded(model: nn.Module, x: torch.Tensor) -> np.ndarray:
    pad = model.conv1.padding[0]
    return _arr(torch.nn.functional.pad(x, (pad,) * 4) if pad else x,
                model.conv1.weight.dtype).cpu().numpy()


@torch.no_grad()
def lenet_sq(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """float64 [L, n] per-layer squared per-sample gradient norms of a LeNet in eval mode
    (`supported(model)` must hold), rows in module order as bnmem.grads.per_sample.layer_groups:
    bnmem.native.arrays.lenet_sq on the module's tensors."""
    if x.dim() != 4 or x.shape[1] != model.conv1.in_channels or len(y) != len(x):
        raise ValueError(f"x: expected [n, {model.conv1.in_channels}, H, W] with one label "
                         f"per sample, got x {tuple(x.shape)} and y {tuple(y.shape)}")
    eps = getattr(model.norm1, "eps", arrays.BN_EPS)
    return torch.from_numpy(arrays.lenet_sq(_state(model), _padded(model, x),
                                            y.detach().cpu().numpy(), eps))


def batch_supported(model: nn.Module) -> bool:
    """A BatchNorm LeNet where `supported` holds, every BN layer with one eps, and the
    lenet_rows kernel (the `batch` definition) builds."""
    if not supported(model) or isinstance(model.norm1, nn.Identity):
        return False
    norms = [model.norm1, model.norm2, model.norm3, model.norm4]
    p = model.conv1.weight
    return applies("batchnorm", p.device, p.dtype, p.shape[1], model.fc3.out_features,
                   tuple(m.eps for m in norms), (0.1,), kernel="lenet_rows")


@torch.no_grad()
def lenet_batch_sq(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """float64 [L, B] per-layer squared norms of the batch-coupled per-sample gradients of
    ONE batch x [B, C, H, W] (`batch_supported(model)` must hold): row i's gradient is of
    l_i = CE(f(x_i), y_i) in a train-mode pass, BN normalizing with this batch's statistics
    and its gradient flowing through them (bnmem.grads.per_sample.batch_grads, the torch.func
    reference). Rows in module order as layer_groups. The model's weights and running
    statistics are left as they were: bnmem.native.arrays.lenet_batch_sq on its tensors."""
    if x.dim() != 4 or x.shape[1] != model.conv1.in_channels or len(y) != len(x) or len(x) < 2:
        raise ValueError(f"x: expected a batch [B >= 2, {model.conv1.in_channels}, H, W] with "
                         f"one label per sample, got x {tuple(x.shape)} and y {tuple(y.shape)}")
    return torch.from_numpy(arrays.lenet_batch_sq(_state(model), _padded(model, x),
                                                  y.detach().cpu().numpy(), model.norm1.eps))


def _table(k: int, tensors: list[torch.Tensor | None]) -> ctypes.Array:
    """Pointers to model j's slice of each stacked [K, ...] tensor (None: NULL), model-major:
    the C side reads entry j * len(tensors) + i."""
    ptrs = [None if t is None else t.data_ptr() + j * t[0].numel() * t.element_size()
            for j in range(k) for t in tensors]
    return (ctypes.c_void_p * len(ptrs))(*ptrs)


def _check_pool(w: torch.Tensor, x_pad: torch.Tensor) -> None:
    """x_pad must be the kernels' input for stacked weights w = conv1.weight [K, 6, C, 5, 5]."""
    if x_pad.device.type != "cpu" or x_pad.dtype != w.dtype or x_pad.shape[1:] != (w.shape[2], 32, 32):
        raise ValueError(f"x_pad: expected [N, {w.shape[2]}, 32, 32] {w.dtype} on the CPU, got "
                         f"{tuple(x_pad.shape)} {x_pad.dtype} on {x_pad.device}")


class TrainStep:
    """Gradients of one SGD step for K stacked LeNets in C (lenet_train.c), written into
    each parameter's `.grad`; the optimizer step stays in PyTorch.

    `params`: {LeNet parameter name: [K, *shape] leaf tensor}; `state`: the stacked
    state_dict (running statistics updated in place). `x_pad`: the pool [N, C, 32, 32]
    (zero-padded to 32 px as conv1 pads), `y`: its labels [N]. `lam`, `target`: the
    gamma/sigma penalty (lam 0: off). Build with `TrainStep.create`, which returns None
    where `applies` does not hold.
    """

    def __init__(self, lib: ctypes.CDLL, params: dict[str, torch.Tensor],
                 state: dict[str, torch.Tensor], x_pad: torch.Tensor, y: torch.Tensor,
                 bn: bool, eps: float, momentum: float, lam: float, target: float):
        _check_pool(params["conv1.weight"], x_pad)
        self.lib, self.x_pad, self.y = lib, x_pad.contiguous(), y.to(torch.int64).contiguous()
        self.k = len(params["conv1.weight"])
        self.classes = params["fc3.weight"].shape[1]
        for p in params.values():
            p.grad = torch.zeros_like(p)
        self.hyper = torch.tensor([eps, momentum, lam, target], dtype=torch.float64)
        self.p_table = _table(self.k, [params.get(s) for s in SLOTS])
        self.g_table = _table(self.k, [params[s].grad if s in params else None for s in SLOTS])
        self.r_table = _table(self.k, [state.get(s) for s in RUNNING] if bn else [None] * 8)
        self.out = torch.zeros(self.k, 2, dtype=torch.float64)

    @classmethod
    def create(cls, params: dict[str, torch.Tensor], state: dict[str, torch.Tensor], norm: str,
               x_pad: torch.Tensor, y: torch.Tensor, eps: Sequence[float],
               momentum: Sequence[float | None], lam: float, target: float
               ) -> "TrainStep | None":
        """The step, or None where `applies` does not hold. eps, momentum: each BN
        layer's (empty without BN)."""
        w = params["conv1.weight"]
        if not applies(norm, w.device, w.dtype, w.shape[2], params["fc3.weight"].shape[1],
                       tuple(eps), tuple(momentum)):
            return None
        return cls(_lib(w.dtype, "lenet_train"), params, state, x_pad, y, norm == "batchnorm",
                   next(iter(eps), 1e-5), next(iter(momentum), 0.1), lam, target)

    def __call__(self, rows: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gradients for batches x_pad[rows[k, :counts[k]]] (rows [K, B] int64, real rows
        first); returns each model's mean batch loss and penalty, float64 [K] each."""
        rows, counts = rows.to(torch.int64).contiguous(), counts.to(torch.int64).contiguous()
        if len(rows) != self.k or rows.numel() and not (0 <= int(rows.min()) and
                                                        int(rows.max()) < len(self.x_pad)):
            raise ValueError(f"rows: expected [{self.k}, B] indices into the pool's "
                             f"{len(self.x_pad)} rows, got shape {tuple(rows.shape)}")
        _call(self.lib.lenet_train, self.k, rows.shape[1], self.x_pad.shape[1], self.classes,
              counts, rows, self.x_pad, self.y, self.hyper, self.p_table, self.g_table,
              self.r_table, self.out)
        return self.out[:, 0], self.out[:, 1]


@torch.no_grad()
def lenet_forward(params: list[torch.Tensor], x_pad: torch.Tensor) -> torch.Tensor:
    """Eval-mode logits [K, N, classes] of K LeNets on the same inputs x_pad [N, C, 32, 32]
    (zero-padded as conv1 pads), in C (lenet_forward.c); call where `applies` holds.
    `params`: the stacked [K, ...] weight and bias of conv1, conv2, fc1, fc2, fc3, with any
    eval-mode BN already folded in. NaN propagates as in PyTorch (max-pool and relu pass
    it on)."""
    w = params[0]
    _check_pool(w, x_pad)
    classes = params[8].shape[1]
    given = iter(t.detach().to(w.dtype).contiguous() for t in params)
    ps = [None if s.startswith("norm") else next(given) for s in SLOTS]
    k, x = len(w), x_pad.contiguous()
    out = torch.empty(k, len(x), classes, dtype=w.dtype)
    _call(_lib(w.dtype, "lenet_train").lenet_forward, k, len(x), x.shape[1], classes, x,
          _table(k, ps), out)
    return out
