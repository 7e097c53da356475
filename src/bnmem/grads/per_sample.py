"""Per-sample gradient norms ||grad_theta l(x_i, y_i)||_2, two definitions; the grads
stage's entry point is `grads_for_arm`.

`eval` (the default): BN layers in eval mode, normalizing with their running statistics
(the buffers are passed to functional_call), so l_i = CE(f(x_i; theta), y_i) depends on
x_i alone. Computed over chunks of `chunk_size` samples, which bounds memory at any pool
size, by the first that applies of: a C kernel for LeNet (bnmem.native), closed forms after
one autograd backward (bnmem.grads.fastgrad), vmap(grad(l)) (the reference; chunk_size x
n_params floats). Valid for every arm.

`batch` (batch-coupled, for BN): the pool is cut into the training batches (the caller
passes them; the stage uses the first epoch of bnmem.core.schedule.batch_order). For each batch of
B samples ONE train-mode forward pass gives per-example losses l_1..l_B that share the
batch statistics, and torch.func.jacrev of that loss vector gives every row
grad_theta l_i, gradients flowing through the batch mean and variance. The per-example
contribution to the batch-mean-loss gradient is c_i = grad_theta l_i / B (sum_i c_i is
exactly the gradient SGD steps on); we report ||B c_i|| = ||grad_theta l_i|| so that for a
model without BN (l_i independent of the batch) `batch` equals `eval` exactly. Running
statistics are not updated (the forward pass mutates copies of the buffers). Single-sample
batch statistics are never used. Cost: one Jacobian is B backward passes through the
whole batch, so `batch` costs roughly B times `eval` in activation work; memory is
bounded by taking max(1, chunk_size // B) rows per vmap call (chunk_size sample passes).
For a BatchNorm LeNet on the CPU the same B backward passes run in C
(bnmem.native.lenet_batch_sq: the training kernel with its loss seeded at one row, in
float64 as jacrev here), about 9x faster; jacrev stays the reference it is tested against.

Per-layer norms are per named module that owns parameters (e.g. `conv1` = weight and bias,
`norm1` = BN gamma and beta), so layer_norms[l]**2 summed over l is norms**2.
"""
from __future__ import annotations

import copy
from typing import Callable, Iterable, Sequence

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F
from torch.func import functional_call, grad, jacrev, vmap

from bnmem.grads import fastgrad
from bnmem.grads.checkpoints import GradNorms, checkpoint_rows, norms_from_sq
from bnmem import native
from bnmem.core.config import Config
from bnmem.core.records import ModelSpec
from bnmem.models.zoo import bn_layers, mode
from bnmem.models.spec import build
from bnmem.data.pool import tensors
from bnmem.models.runtime import map_single_threaded, resolve_device

EVAL_METHODS = ("auto", "native", "hooks", "vmap")


def has_batchnorm(model: nn.Module) -> bool:
    return len(bn_layers(model)) > 0


def layer_groups(model: nn.Module) -> dict[str, list[str]]:
    """{module name: [its trainable parameter names]}, in module order."""
    groups: dict[str, list[str]] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault(name.rpartition(".")[0] or name, []).append(name)
    return groups


def _layer_sq(grads: dict[str, torch.Tensor], groups: dict[str, list[str]]) -> torch.Tensor:
    """Per-sample gradients {param: [n, *shape]} -> squared norms per layer, float64 [L, n]."""
    rows = []
    for names in groups.values():
        # Norm in the gradients' own dtype (an upcast would copy chunk x n_params floats),
        # then squared and summed across tensors in float64.
        rows.append(sum(torch.linalg.vector_norm(grads[k].flatten(1), dim=1).double().pow(2)
                        for k in names))
    return torch.stack(rows)


def _split_state(model: nn.Module) -> tuple[dict, dict]:
    params = {k: v.detach() for k, v in model.named_parameters() if v.requires_grad}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    return params, buffers


def per_sample_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """`eval` definition: {param name: [n, *shape]} gradients of CE(f(x_i), y_i), one vmap call.

    x, y must be on the model's device and x in its dtype. BN uses running statistics.
    """
    params, buffers = _split_state(model)

    def loss_one(p: dict, b: dict, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
        out = functional_call(model, (p, b), (xi.unsqueeze(0),))  # (1, classes)
        return F.cross_entropy(out, yi.unsqueeze(0))

    with mode(model, False):
        return vmap(grad(loss_one), in_dims=(None, None, 0, 0))(params, buffers, x, y)


def batch_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                chunk_size: int | None = None) -> dict[str, torch.Tensor]:
    """`batch` definition for ONE batch: {param name: [B, *shape]}, row i = grad l_i.

    l = CE(f(x; theta), y) per example from a single train-mode forward pass, so BN uses
    the statistics of this batch and gradients flow through them. Row i is B * c_i, c_i
    the contribution to the batch-mean-loss gradient: rows.sum(0) / B == that gradient.
    Running statistics are untouched (the pass updates copies of the buffers).
    chunk_size: Jacobian rows per vmap call inside jacrev (None = all B at once).
    """
    if len(x) < 2:
        raise ValueError("batch_grads: a batch of one sample would use single-sample statistics")
    params, buffers = _split_state(model)

    def losses(p: dict, b: dict) -> torch.Tensor:
        # `b` is an argument (not captured) because BN updates running stats in place.
        return F.cross_entropy(functional_call(model, (p, b), (x,)), y, reduction="none")

    copies = {k: v.clone() for k, v in buffers.items()}
    with mode(model, True):
        return jacrev(losses, chunk_size=chunk_size)(params, copies)


def _eval_sq(model: nn.Module, x: torch.Tensor, y: torch.Tensor, chunk_size: int,
             groups: dict[str, list[str]], progress: bool, method: str = "auto",
             workers: int = 1) -> torch.Tensor:
    """`eval` squared norms [L, n], chunk by chunk: the C kernel for LeNet (bnmem.native,
    `auto`/`native`), closed forms from one backward (bnmem.grads.fastgrad, `auto`/`hooks`) when
    every layer has one, else vmap(grad) (`vmap`, the reference)."""
    p = next(iter(model.parameters()))
    use_native = method in ("auto", "native") and native.supported(model)
    if method == "native" and not use_native:
        raise ValueError("method: 'native' needs a LeNet (norm none or batchnorm) on the CPU "
                         "and a C compiler; valid otherwise: auto | hooks | vmap")
    use_hooks = method in ("auto", "hooks") and fastgrad.supported(model)
    out = torch.empty(len(groups), len(x), dtype=torch.float64)
    starts = list(range(0, len(x), chunk_size))
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(starts), desc="grads eval", leave=False)

    def run(part: Sequence[int], net: nn.Module) -> None:
        for s in part:
            xc, yc = x[s:s + chunk_size].to(p.device, p.dtype), y[s:s + chunk_size].to(p.device)
            if use_native:
                sq = native.lenet_sq(net, xc, yc)
            else:
                sq = fastgrad.hook_sq(net, xc, yc, groups) if use_hooks else None
            if sq is None:
                sq = _layer_sq(per_sample_grads(net, xc, yc), groups)
            out[:, s:s + len(xc)] = sq.cpu()  # disjoint columns per chunk
            if bar is not None:
                bar.update(1)

    _run_parts(run, starts, model, workers, p.device)
    if bar is not None:
        bar.close()
    return out


def _run_parts(run: Callable[[Sequence, nn.Module], None], items: Sequence, model: nn.Module,
               workers: int, device: torch.device) -> None:
    """run(items, model) or, on CPU with workers > 1, run(items[k::workers], a copy of the
    model) on `workers` threads of one torch thread each (forward hooks and functional_call
    touch the module, so every thread gets its own)."""
    workers = min(workers, len(items)) if device.type == "cpu" else 1
    if workers <= 1:
        run(items, model)
        return
    map_single_threaded(lambda k: run(items[k::workers], copy.deepcopy(model)),
                        list(range(workers)), workers)


def _batch_sq(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
              batches: Sequence[np.ndarray], chunk_size: int, groups: dict[str, list[str]],
              progress: bool, workers: int = 1, method: str = "auto") -> torch.Tensor:
    flat = np.concatenate([np.asarray(b) for b in batches]) if len(batches) else np.zeros(0, int)
    if len(flat) != len(x) or not np.array_equal(np.sort(flat), np.arange(len(x))):
        raise ValueError("batches: must hold every sample index exactly once")
    # A float32 model runs in float64 and its norms are rounded to float32: PyTorch's
    # float32 convolutions sum in an order that differed between CPU vendors (AMD vs Intel,
    # same AVX2 pin); float64 moves the bits that differ far below float32's, so the
    # rounded norms agree unless one lies within float64's last-bit error of a float32
    # rounding boundary (rare, not impossible). About 15 % slower than float32.
    to_float32 = next(iter(model.parameters())).dtype == torch.float32
    if to_float32:
        model = copy.deepcopy(model).double()
        x = x.double()
    p = next(iter(model.parameters()))
    out = torch.empty(len(groups), len(x), dtype=torch.float64)
    # the C kernel (bnmem.native.lenet_batch_sq: one backward per row through the batch, in
    # float64 as the reference) where it applies, else torch.func's jacrev (batch_grads)
    use_native = method in ("auto", "native") and native.batch_supported(model)
    if method == "native" and not use_native:
        raise ValueError("method: 'native' needs a BatchNorm LeNet on the CPU and a C "
                         "compiler; valid otherwise: auto | vmap")
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(batches), desc="grads batch", leave=False)

    def run(part: Sequence[np.ndarray], net: nn.Module) -> None:
        for idx in part:
            idx_t = torch.as_tensor(np.asarray(idx))
            xb, yb = x[idx_t].to(p.device, p.dtype), y[idx_t].to(p.device)
            if use_native:
                out[:, idx_t] = native.lenet_batch_sq(net, xb, yb)
            else:
                # chunk_size counts sample passes: each Jacobian row is a backward through all B.
                rows = batch_grads(net, xb, yb, max(1, chunk_size // len(idx_t)))
                out[:, idx_t] = _layer_sq(rows, groups).cpu()  # disjoint columns per batch
            if bar is not None:
                bar.update(1)

    _run_parts(run, batches, model, workers, p.device)
    if bar is not None:
        bar.close()
    if not to_float32:
        return out
    norms = np.sqrt(out.numpy()).astype(np.float32).astype(np.float64)  # float32's grid
    return torch.from_numpy(np.square(norms))  # exact: a float32 squared fits a float64


def grad_norms(model: nn.Module, x: torch.Tensor, y: torch.Tensor, definition: str = "eval",
               chunk_size: int = 256, batches: Sequence[np.ndarray] | None = None,
               progress: bool = False, method: str = "auto", workers: int = 1) -> GradNorms:
    """Per-sample gradient norms of cross-entropy over all trainable parameters.

    Args:
        model: the network, on the device to compute on; its dtype sets the precision
            (a float32 model's `batch` norms run on a float64 copy, rounded to float32).
            Its weights, buffers and train/eval flag are left as they were.
        x: preprocessed inputs [N, C, H, W] (any device); y: labels [N] (y_train).
        definition: `eval` (running statistics, l_i depends on x_i alone) or `batch`
            (rows of the Jacobian of per-example losses in one train-mode pass per batch;
            see the module docstring). Without BN layers `batch` is computed as `eval`,
            to which it is identical (tests check this on the batch path).
        chunk_size: samples per vmap call (eval); for batch, max(1, chunk_size // B)
            Jacobian rows per vmap call, i.e. about chunk_size sample passes at once.
        batches: for `batch`: index arrays covering range(N) once, each of >= 2 samples.
        method: `eval` computation: `auto` (the first of `native`, `hooks`, `vmap` that
            applies), `native` (C kernel for LeNet, bnmem.native), `hooks` (closed forms
            after one autograd backward, bnmem.grads.fastgrad) or `vmap` (torch.func vmap(grad),
            the reference). `batch`: `auto`/`native` run a BatchNorm LeNet's rows in C
            (bnmem.native.lenet_batch_sq, float64 as the reference), otherwise (and
            `hooks`/`vmap`) torch.func's jacrev (batch_grads), the reference.
        workers: on CPU, chunks (eval) or batches (batch) computed side by side by this
            many threads, one torch thread and one model copy each (they are independent).
    """
    if definition not in ("eval", "batch"):
        raise ValueError(f"definition: {definition!r} is invalid; valid: eval | batch")
    if method not in EVAL_METHODS:
        raise ValueError(f"method: {method!r} is invalid; valid: {' | '.join(EVAL_METHODS)}")
    groups = layer_groups(model)
    if definition == "batch" and has_batchnorm(model):
        if batches is None:
            raise ValueError("definition batch: needs `batches`")
        sq = _batch_sq(model, x, y, batches, chunk_size, groups, progress, workers, method)
    else:
        sq = _eval_sq(model, x, y, chunk_size, groups, progress, method, workers)
    return GradNorms(*norms_from_sq(sq.numpy()), tuple(groups))


def checkpoint_norms(model: nn.Module, states: Iterable[dict], x: torch.Tensor, y: torch.Tensor,
                     definition: str, chunk_size: int, batches: Sequence[np.ndarray],
                     progress: bool = False, other: str = "every",
                     workers: int = 1) -> tuple[dict[str, np.ndarray], GradNorms]:
    """Load each state dict into `model` in turn; norms under both definitions where
    `other` asks (bnmem.grads.checkpoints.checkpoint_rows, which says how). The batch
    definition costs several times eval (BENCHMARKS.md, bench_grads), and at the
    full-scale pool it is most of the stage (README "Full-scale Fashion-MNIST")."""
    def norms_of(state: dict, d: str) -> GradNorms:
        model.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
        return grad_norms(model, x, y, d, chunk_size, batches, progress, workers=workers)

    return checkpoint_rows(states, norms_of, has_batchnorm(model), definition, other, len(x))


def torch_norms_of(cfg: Config, pool: dict, spec: ModelSpec, batches: Sequence[np.ndarray],
                   progress: bool) -> tuple[Callable[[dict, str], GradNorms], bool]:
    """(norms_of for bnmem.grads.checkpoints.checkpoint_rows through torch, whether the
    model has BN layers): the path for every model the array kernels do not run."""
    x, y = tensors(pool, cfg.dataset)
    model = build(spec).to(resolve_device(cfg.train.device))

    def norms_of(state: dict, d: str) -> GradNorms:
        model.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})
        return grad_norms(model, x, y, d, cfg.grads.chunk_size, batches, progress,
                          workers=cfg.grads.workers)

    return norms_of, has_batchnorm(model)
