"""The grads stage's LeNet kernels on numpy arrays, without torch: per-sample squared
gradient norms in eval mode (lenet_sq.c) and batch-coupled (lenet_rows.c), from a
state_dict of arrays. bnmem.native's torch entry points (`lenet_sq`, `lenet_batch_sq`)
convert a module's tensors and call these, so both paths run the same code on the same
bits; the grads stage calls them directly for a LeNet on the CPU and so starts without
torch (~2 s of every grads stage). Libraries are built and cached as bnmem.native's
(one per kernel and precision, per process)."""
from __future__ import annotations

import ctypes
import logging
import threading

import numpy as np

from bnmem.core import ckernel
from bnmem.native.library import ERRORS, NORMS, RUNNING, SLOTS, build, real_name

log = logging.getLogger("bnmem.native")
_LIBS: dict[tuple[str, str], ctypes.CDLL | None] = {}
_LOCK = threading.Lock()
BN_EPS = 1e-5  # every BN layer of bnmem.models.zoo.LeNet (PyTorch's default; a test checks)
LAYERS = {"none": ("conv1", "conv2", "fc1", "fc2", "fc3"),
          "batchnorm": ("conv1", "norm1", "conv2", "norm2", "fc1", "norm3", "fc2", "norm4", "fc3")}


def lib(dtype, kernel: str = "lenet_sq") -> ctypes.CDLL | None:
    """The library `kernel` (a KERNELS key) for a float32/float64 dtype (numpy's or
    torch's), built once per process; None where it cannot run here (BNMEM_NATIVE=0,
    another dtype, no compiler)."""
    try:
        real = real_name(dtype)
    except (KeyError, TypeError):
        return None
    if not ckernel.enabled():
        return None
    with _LOCK:
        if (kernel, real) not in _LIBS:
            try:
                _LIBS[kernel, real] = build(kernel, dtype)
            except (OSError, RuntimeError) as exc:  # no compiler, or a noexec cache mount
                log.warning("native LeNet kernel unavailable (%s): using PyTorch", str(exc)[:200])
                _LIBS[kernel, real] = None
        return _LIBS[kernel, real]


def call(fn, *args) -> None:
    """The calling convention: arrays as their data pointers, ctypes pointer tables as
    void*, objects with data_ptr() (torch tensors) as that, None as NULL; a non-zero status
    raises its ERRORS message."""
    conv = [a.ctypes.data if isinstance(a, np.ndarray) else ctypes.cast(a, ctypes.c_void_p)
            if isinstance(a, ctypes.Array) else a.data_ptr() if hasattr(a, "data_ptr") else a
            for a in args]
    code = fn(*conv)
    if code:
        raise ValueError(list(ERRORS.values())[code - 1] if code <= len(ERRORS)
                         else f"native LeNet kernel: status {code}")


def lenet_keys(norm: str) -> list[str]:
    """The state_dict keys of bnmem.models.zoo.LeNet with this norm (none | batchnorm), in
    its order (a test checks them against the module)."""
    keys = []
    for layer in LAYERS[norm]:
        keys += [f"{layer}.weight", f"{layer}.bias"]
        if layer.startswith("norm"):
            keys += [f"{layer}.running_mean", f"{layer}.running_var",
                     f"{layer}.num_batches_tracked"]
    return keys


def lenet_shapes(norm: str, channels: int, classes: int) -> dict[str, tuple[int, ...]]:
    """Every state_dict entry's shape of bnmem.models.zoo.LeNet (28 px padded or 32 px
    input) with this norm, input channels and classes (a test checks them against the
    module): what the kernels read, so a file with other shapes is refused before any runs."""
    width = {"conv1": 6, "norm1": 6, "conv2": 16, "norm2": 16, "fc1": 120, "norm3": 120,
             "fc2": 84, "norm4": 84, "fc3": classes}
    weight = {"conv1": (6, channels, 5, 5), "conv2": (16, 6, 5, 5), "fc1": (120, 400),
              "fc2": (84, 120), "fc3": (classes, 84)}
    out = {}
    for key in lenet_keys(norm):
        layer, _, name = key.partition(".")
        out[key] = (() if name == "num_batches_tracked" else
                    weight[layer] if name == "weight" and layer in weight else (width[layer],))
    return out


def check_state(state: dict[str, np.ndarray], norm: str, channels: int, classes: int) -> str | None:
    """None when `state` holds exactly LeNet's entries (lenet_shapes) as float32/float64
    parameters and statistics and an int64 counter, else what is wrong, in words."""
    shapes = lenet_shapes(norm, channels, classes)
    if set(state) != set(shapes):
        return f"keys do not match a lenet/{norm} model"
    for key, shape in shapes.items():
        a = np.asarray(state[key])
        kinds = "iu" if key.endswith("num_batches_tracked") else "f"
        if a.shape != shape or a.dtype.kind not in kinds:
            return (f"{key} is {a.dtype}{list(a.shape)}, a lenet/{norm} model with {channels} "
                    f"input channels and {classes} classes has {list(shape)}")
    return None


def applies(norm: str, channels: int, classes: int, dtype, kernel: str = "lenet_sq") -> bool:
    """Whether `kernel` runs here for LeNets with this norm, input channels and classes."""
    return (norm in NORMS and 1 <= channels <= 3 and 1 <= classes <= 256
            and (kernel != "lenet_rows" or norm == "batchnorm") and lib(dtype, kernel) is not None)


def _checked(state: dict, norm: str) -> None:
    """The kernels index the weights by LeNet's shapes: anything else is refused here."""
    w1, w3 = np.shape(state.get("conv1.weight")), np.shape(state.get("fc3.weight"))
    wrong = (check_state(state, norm, w1[1], w3[0]) if len(w1) == 4 and len(w3) == 2
             else "conv1.weight / fc3.weight missing or not a lenet layer")
    if wrong:
        raise ValueError(f"state: {wrong}")


def _c(a: np.ndarray, dtype) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=dtype)


def _finite(arrays) -> bool:
    return all(bool(np.isfinite(a).all()) for a in arrays)


def lenet_sq(state: dict[str, np.ndarray], x_pad: np.ndarray, y: np.ndarray,
             eps: float = BN_EPS) -> np.ndarray:
    """float64 [L, n] per-layer squared per-sample gradient norms of a LeNet in eval mode
    (BN with its running statistics), in the precision of its weights; x_pad: [n, C, 32,
    32] (zero-padded as conv1 pads), y: labels [n]. Rows in module order (LAYERS)."""
    dtype = state["conv1.weight"].dtype
    bn = "norm1.weight" in state
    c_in = state["conv1.weight"].shape[1]
    _checked(state, "batchnorm" if bn else "none")
    if x_pad.ndim != 4 or x_pad.shape[1] != c_in or len(y) != len(x_pad):
        raise ValueError(f"x: expected [n, {c_in}, H, W] with one label per sample, got x "
                         f"{tuple(x_pad.shape)} and y {tuple(np.shape(y))}")
    if x_pad.shape[-2:] != (32, 32):
        raise ValueError(f"x: LeNet's padded input must be 32 x 32, got {tuple(x_pad.shape[-2:])}")
    xp = _c(x_pad, dtype)
    n, c = xp.shape[:2]
    w2 = state["conv2.weight"]
    keep = [_c(t, dtype) for t in (state["conv1.weight"], state["conv1.bias"],
                                   w2.reshape(16, -1).T, w2, state["conv2.bias"],
                                   state["fc1.weight"], state["fc1.bias"], state["fc2.weight"],
                                   state["fc2.bias"], state["fc3.weight"], state["fc3.bias"])]
    bn_arrays, bn_ptr = [], None
    if bn:
        for i in range(1, 5):
            g = f"norm{i}."
            inv = 1.0 / np.sqrt(state[g + "running_var"].astype(np.float64) + eps)
            scale = state[g + "weight"].astype(np.float64) * inv
            bn_arrays += [_c(t, dtype) for t in (
                scale, state[g + "bias"].astype(np.float64)
                - state[g + "running_mean"].astype(np.float64) * scale,
                state[g + "running_mean"], inv)]
        bn_ptr = (ctypes.c_void_p * 16)(*[a.ctypes.data for a in bn_arrays])
    out = np.zeros((n, 9), dtype=np.float64)
    call(lib(dtype).lenet_sq, n, c, state["fc3.weight"].shape[0], xp,
         _c(y, np.int64), *keep, bn_ptr, out)
    # The kernel's relu/max treat NaN as "not greater"; PyTorch propagates it. Match that:
    # non-finite weights spoil every sample, a non-finite input only its own.
    if not _finite([*keep, *bn_arrays]):
        out[:] = np.nan
    out[~np.isfinite(xp.reshape(n, -1)).all(1)] = np.nan
    rows = list(range(9)) if bn else [0, 2, 4, 6, 8]
    return out[:, rows].T.copy()


def lenet_batch_sq(state: dict[str, np.ndarray], x_pad: np.ndarray, y: np.ndarray,
                   eps: float = BN_EPS) -> np.ndarray:
    """float64 [L, B] per-layer squared norms of the batch-coupled per-sample gradients of
    ONE batch x_pad [B >= 2, C, 32, 32] of a BatchNorm LeNet (bnmem.native.lenet_batch_sq),
    in the precision of its weights; the state's arrays are left as they were."""
    dtype = state["conv1.weight"].dtype
    c_in = state["conv1.weight"].shape[1]
    _checked(state, "batchnorm")
    if x_pad.ndim != 4 or x_pad.shape[1] != c_in or len(y) != len(x_pad) or len(x_pad) < 2:
        raise ValueError(f"x: expected a batch [B >= 2, {c_in}, H, W] with one label per "
                         f"sample, got x {tuple(x_pad.shape)} and y {tuple(np.shape(y))}")
    if x_pad.shape[-2:] != (32, 32):
        raise ValueError(f"x: LeNet's padded input must be 32 x 32, got {tuple(x_pad.shape[-2:])}")
    xp = _c(x_pad, dtype)
    params = [_c(state[s], dtype) for s in SLOTS]
    grads = [np.zeros_like(t) for t in params]
    running = [np.array(state[r], dtype=dtype) for r in RUNNING]  # scratch copies
    sizes = np.array([t.size for t in params], dtype=np.int64)
    hyper = np.array([eps, 0.1], dtype=np.float64)
    rows = np.arange(len(xp), dtype=np.int64)
    out = np.zeros((len(xp), len(SLOTS)), dtype=np.float64)
    call(lib(dtype, "lenet_rows").lenet_batch_sq, len(xp), xp.shape[1],
         state["fc3.weight"].shape[0], rows, xp, _c(y, np.int64), hyper, sizes,
         _table(params), _table(grads), _table(running), out)
    if not (_finite(params) and _finite([xp])):
        out[:] = np.nan  # the batch statistics carry a non-finite value to every row
    return (out[:, 0::2] + out[:, 1::2]).T.copy()


def _table(arrays: list[np.ndarray]) -> ctypes.Array:
    """One model's pointer table (bnmem.native._table with K = 1)."""
    return (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
