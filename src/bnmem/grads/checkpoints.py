"""The grads stage's work: per-sample gradient norms of every pool sample at every saved
checkpoint, under the configured definition and, for BN arms, the other one where
`grads.other_definition` asks; entry point `grads_for_arm`.

A LeNet (norm none or batchnorm) on the CPU with the C kernels runs on numpy arrays alone
(bnmem.native.arrays: the same kernels bnmem.grads.per_sample calls through torch, on the
same bits), so the stage starts without torch (~2 s per stage); every other model runs
through bnmem.grads.per_sample (torch), imported only then. Which path ran is logged;
the outputs are the same either way (tests/test_grads.py runs both)."""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from bnmem.core.config import GRAD_DEFINITIONS, Config
from bnmem.core.records import ModelSpec
from bnmem.core.schedule import batch_order
from bnmem.data.images import preprocess_array
from bnmem.grads.summary import histogram, summarize
from bnmem.native import arrays

log = logging.getLogger("bnmem.grads")


@dataclass(frozen=True)
class GradNorms:
    norms: np.ndarray        # float64 [N], total l2 norm over all trainable parameters
    layer_norms: np.ndarray  # float64 [L, N], l2 norm per parameter-owning module
    layers: tuple[str, ...]  # L module names, in module order


def norms_from_sq(sq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(total norms [n], per-layer norms [L, n]) from per-layer squares [L, n], in numpy,
    rows added in order: torch's float64 sqrt and sum gave other last bits under its
    AVX-512 kernels than under AVX2 (np.sqrt is the correctly rounded instruction)."""
    total = sq[0].copy()
    for row in sq[1:]:
        total += row
    return np.sqrt(total), np.sqrt(sq)


def checkpoint_rows(states: Iterable, norms_of: Callable[[object, str], GradNorms],
                    coupled: bool, definition: str, other: str, n: int
                    ) -> tuple[dict[str, np.ndarray], GradNorms]:
    """Norms at each state in turn: `norms_of(state, definition)` under both definitions.

    `other` says where a BN model (`coupled`) also gets the non-configured definition:
    "every" checkpoint, the "final" one only, or "never" (its rows are NaN where not
    computed). Without BN the batch rows are the eval rows (the definitions coincide),
    so they are computed once. Returns ({"eval": [E, n], "batch": [E, n]}, the last
    state's GradNorms under `definition`, which carries the per-layer norms)."""
    rows: dict[str, list[np.ndarray]] = {"eval": [], "batch": []}
    final = None
    states = list(states)
    for i, state in enumerate(states):
        wanted = GRAD_DEFINITIONS if coupled else ("eval",)
        if coupled and (other == "never" or (other == "final" and i < len(states) - 1)):
            wanted = (definition,)
        for d in wanted:
            res = norms_of(state, d)
            rows[d].append(res.norms)
            if d == definition or not coupled:
                final = res
        if coupled and len(wanted) == 1:
            rows["batch" if definition == "eval" else "eval"].append(np.full(n, np.nan))
        if not coupled:
            rows["batch"].append(rows["eval"][-1])
    if final is None:
        raise ValueError("states: at least one checkpoint is needed")
    return {d: np.stack(r) for d, r in rows.items()}, final


GPU_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/proc/driver/nvidia",  # NVIDIA drivers
             "/dev/kfd",                                               # AMD ROCm
             "/dev/dxg",                                               # WSL2's GPU
             "/dev/nvhost-ctrl-gpu")                                   # Jetson


def _gpu_present() -> bool:
    """Whether any GPU driver is visible: then `train.device: auto` is torch's to resolve
    (it may pick CUDA, where the torch path computes the norms), so the array path does
    not run. A false alarm only costs torch's start-up (its CPU path gives the same bits)."""
    return any(os.path.exists(p) for p in GPU_FILES)


def native_norm(cfg: Config, spec: ModelSpec) -> str | None:
    """The LeNet norm (none | batchnorm) whose norms run on arrays here (CPU, C kernels
    built, the batch kernel too where BN needs it), else None (the torch path)."""
    device = cfg.train.device
    if spec.arch != "lenet" or spec.norm not in arrays.LAYERS or spec.image_size not in (28, 32):
        return None
    if device not in ("cpu", "auto") or (device == "auto" and _gpu_present()):
        return None
    kernels = ["lenet_sq"] + (["lenet_rows"] if spec.norm == "batchnorm" and (
        cfg.grads.definition == "batch" or cfg.grads.other_definition != "never") else [])
    ok = all(arrays.applies(spec.norm, spec.in_channels, spec.num_classes, dt, k)
             for k in kernels for dt in ((np.float32,) if k == "lenet_sq" else (np.float64,)))
    return spec.norm if ok else None


def _threaded(run: Callable[[Sequence], None], items: Sequence, workers: int) -> None:
    """run(items[k::workers]) on `workers` threads (ctypes releases the GIL)."""
    workers = max(1, min(workers, len(items)))
    if workers == 1:
        run(items)
        return
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda k: run(items[k::workers]), range(workers)))


def native_norms_of(norm: str, x_pad: np.ndarray, y: np.ndarray, batches: Sequence[np.ndarray],
                    chunk_size: int, workers: int) -> Callable[[dict, str], GradNorms]:
    """norms_of for checkpoint_rows on arrays: float32 LeNet states, x_pad the pool
    [N, C, 32, 32] float32. As bnmem.grads.per_sample.grad_norms computes them: `eval`
    in the weights' float32, `batch` on a float64 copy with the norms rounded to float32."""
    layers = arrays.LAYERS[norm]
    x64 = None

    def norms_of(state: dict, definition: str) -> GradNorms:
        nonlocal x64
        state = {k: np.asarray(v) for k, v in state.items()}
        if state["conv1.weight"].dtype != np.float32:
            raise ValueError("native grads: expected float32 LeNet weights")
        out = np.empty((len(layers), len(y)), dtype=np.float64)
        if definition == "batch" and norm == "batchnorm":
            if x64 is None:
                x64 = x_pad.astype(np.float64)
            s64 = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in state.items()}

            def run_batches(part: Sequence[np.ndarray]) -> None:
                for idx in part:
                    out[:, idx] = arrays.lenet_batch_sq(s64, x64[idx], y[idx])
            _threaded(run_batches, list(batches), workers)
            out = np.square(np.sqrt(out).astype(np.float32).astype(np.float64))  # float32's grid
        else:
            starts = list(range(0, len(y), chunk_size))

            def run_chunks(part: Sequence[int]) -> None:
                for s in part:
                    out[:, s:s + chunk_size] = arrays.lenet_sq(state, x_pad[s:s + chunk_size],
                                                               y[s:s + chunk_size])
            _threaded(run_chunks, starts, workers)
        return GradNorms(*norms_from_sq(out), layers)

    return norms_of


def grads_for_arm(cfg: Config, pool: dict, spec: ModelSpec, epochs: list[int],
                  states: Iterable[dict], progress: bool = True
                  ) -> tuple[dict[str, np.ndarray], dict, dict[str, np.ndarray]]:
    """Per-sample gradient norms of every pool sample at each of `epochs` (states in that
    order: state dicts of tensors or of arrays), under the configured definition and, for
    BN arms, the other one where `grads.other_definition` asks (final | every | never).
    Returns (arrays for data/grads/<arm>.npz, summary JSON, histogram table columns)."""
    definition, other = cfg.grads.definition, "batch" if cfg.grads.definition == "eval" else "eval"
    y = np.asarray(pool["y_train"], dtype=np.int64)
    # the first epoch's training batches: the batches the batch-coupled definition couples
    batches = batch_order(len(y), cfg.train.batch_size, 1, cfg.seed)[0]
    norm = native_norm(cfg, spec)
    if norm is not None:
        x = preprocess_array(pool["x"], cfg.dataset, pool["x"])
        pad = 2 if spec.image_size == 28 else 0  # as LeNet's conv1 pads
        x_pad = np.ascontiguousarray(np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))))
        norms_of = native_norms_of(norm, x_pad, y, batches, cfg.grads.chunk_size,
                                   cfg.grads.workers)
        coupled = norm == "batchnorm"
        log.info("norms on arrays (C kernels, no torch)")
    else:
        from bnmem.grads.per_sample import torch_norms_of
        norms_of, coupled = torch_norms_of(cfg, pool, spec, batches, progress)
    rows, final = checkpoint_rows(states, norms_of, coupled, definition,
                                  cfg.grads.other_definition, len(y))
    main_rows, other_rows = rows[definition], rows[other]
    arrays_out = dict(norms=main_rows[-1], norms_epoch=main_rows,
                      epochs=np.asarray(epochs, dtype=np.int64), layer_norms=final.layer_norms,
                      layers=np.asarray(final.layers, dtype=str), definition=np.asarray(definition),
                      batch_coupled=np.asarray(coupled),
                      **{f"norms_{other}": other_rows[-1], f"norms_{other}_epoch": other_rows})
    kind = pool["kind"]
    summary = {"epoch_final": epochs[-1], "epoch_early": epochs[0],
               **summarize(main_rows[-1], kind), **summarize(main_rows[0], kind, "_early"),
               **(summarize(other_rows[-1], kind, f"_{other}")
                  if np.isfinite(other_rows[-1]).all() else {}),
               **(summarize(other_rows[0], kind, f"_{other}_early")
                  if np.isfinite(other_rows[0]).all() else {})}
    return arrays_out, summary, histogram(main_rows[-1], kind)
