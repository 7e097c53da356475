"""One training recipe for target and shadow models: SGD with momentum, seeded batch order,
an optional gamma/sigma penalty on BN layers, per-epoch evaluation in eval mode.
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from bnmem.config import TrainConfig
from bnmem.models import bn_layers
from bnmem.rng import SALT

log = logging.getLogger(__name__)


def resolve_device(device: str) -> torch.device:
    """`auto` -> CUDA when present, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def batch_order(n: int, batch_size: int, epochs: int, seed: int) -> list[list[np.ndarray]]:
    """Per epoch, a seeded permutation of range(n) cut into ceil(n / batch_size) batches.

    np.array_split keeps every batch within one sample of the others, so no batch has a
    single sample (BN needs two) and every sample is seen once per epoch. Depends only on
    (n, batch_size, epochs, seed): all arms see the same batches.
    """
    rng = np.random.default_rng([seed, SALT["batch_order"]])
    k = math.ceil(n / batch_size)
    return [np.array_split(rng.permutation(n), k) for _ in range(epochs)]


def lr_at(cfg: TrainConfig, step: int, total: int) -> float:
    """Learning rate at optimizer step `step` of `total` (cosine decays to 0 at the end),
    times (step + 1) / warm-up steps during the first `warmup_epochs` epochs."""
    if cfg.schedule == "constant":
        lr = cfg.lr
    elif cfg.schedule == "step":
        lr = cfg.lr * (0.1 ** ((step >= total // 2) + (step >= 3 * total // 4)))
    else:
        lr = 0.5 * cfg.lr * (1 + math.cos(math.pi * step / total))
    warm = cfg.warmup_epochs * total // cfg.epochs
    return lr * (step + 1) / warm if step < warm else lr


class BatchSigma:
    """Captures sigma_B = sqrt(Var_batch + eps) of every BN layer's input, with gradients.

    The regularizer needs the *batch* std of the current forward pass, differentiable
    through the activations that produced it; BN does not expose it, so a pre-hook
    recomputes it from the layer input (biased variance, as BN normalizes with).
    """

    def __init__(self, model: nn.Module):
        self.sigmas: list[torch.Tensor] = []
        self.gammas: list[torch.Tensor] = []
        self._handles = [m.register_forward_pre_hook(self._hook) for _, m in bn_layers(model)]

    def _hook(self, module: nn.modules.batchnorm._BatchNorm, inputs: tuple[torch.Tensor]) -> None:
        if not module.training:
            return
        x = inputs[0]
        dims = [0] + list(range(2, x.dim()))
        self.sigmas.append(torch.sqrt(x.var(dim=dims, unbiased=False) + module.eps))
        self.gammas.append(module.weight)

    def pop(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        out = (self.gammas, self.sigmas)
        self.gammas, self.sigmas = [], []
        return out

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def gamma_sigma_penalty(gammas: list[torch.Tensor], sigmas: list[torch.Tensor],
                        target: float) -> torch.Tensor:
    """mean over all BN channels of relu(|gamma| / sigma_B - target)^2 (per model).

    Our form (the paper gives none): it is zero while every channel's effective gain
    |gamma|/sigma_B stays at or below `target`, so it leaves well-behaved channels alone,
    and it grows quadratically with the excess gain that the paper's analysis says
    multiplies an outlier's margin growth by (gamma/sigma)^2. Gradients flow into both
    gamma and sigma_B (hence into the weights producing the activations).
    """
    if not gammas:
        return torch.zeros(())
    # channels on the last axis: [C] per layer for one model, [K, C] for K stacked models
    ratio = torch.cat([g.abs() / s for g, s in zip(gammas, sigmas)], dim=-1)
    return F.relu(ratio - target).pow(2).mean(-1)


@dataclass
class Regularizer:
    strength: float
    target: float


def map_single_threaded(fn: Callable, items: list, workers: int) -> list:
    """list(map(fn, items)) on `workers` OS threads that each run torch single-threaded.

    torch ops release the GIL, so threads use the cores without a process pool, and one
    intra-op thread per worker avoids OpenMP barrier stalls on shared cores. torch's
    thread count is restored afterwards. workers <= 1: a plain map in this thread.
    """
    if workers <= 1:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    def one(item):
        torch.set_num_threads(1)  # per OS thread too (OpenMP keeps it per thread)
        return fn(item)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(one, items))
    finally:
        torch.set_num_threads(threads)


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """Logits in eval mode (running BN statistics), float32 [N, C], on the CPU."""
    model.eval()
    device = next(model.parameters()).device
    out = [model(x[i:i + batch_size].to(device)).float().cpu() for i in range(0, len(x), batch_size)]
    return torch.cat(out) if out else torch.zeros(0)


def train_model(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig, seed: int,
                reg: Regularizer | None = None,
                on_epoch: Callable[[int, nn.Module, dict], None] | None = None,
                progress: bool = False) -> list[dict]:
    """Train `model` in place on preprocessed `x` [N, C, H, W] and labels `y` [N].

    Args:
        cfg: the recipe (epochs, batch size, lr, momentum, weight decay, schedule, device).
        seed: seeds the batch order only (weights are initialised by make_model).
        reg: optional gamma/sigma penalty added to the loss (BN models).
        on_epoch: called as on_epoch(epoch, model, record) after each epoch; may add
            evaluation results to `record`.
        progress: show a tqdm bar over batches.
    Returns:
        one record per epoch: epoch, loss, penalty, lr, seconds (+ what on_epoch adds).
    """
    device = next(model.parameters()).device
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                          weight_decay=cfg.weight_decay)
    order = batch_order(len(y), cfg.batch_size, cfg.epochs, seed)
    total, step, history = sum(len(e) for e in order), 0, []
    capture = BatchSigma(model) if reg is not None and reg.strength > 0 else None
    for epoch, batches in enumerate(order, start=1):
        t0, loss_sum, pen_sum = time.perf_counter(), 0.0, 0.0
        model.train()
        if progress:
            from tqdm import tqdm
            batches = tqdm(batches, desc=f"epoch {epoch}", leave=False)
        for idx in batches:
            lr = lr_at(cfg, step, total)
            for group in opt.param_groups:
                group["lr"] = lr
            xb, yb = x[idx].to(device, non_blocking=True), y[idx].to(device, non_blocking=True)
            loss = F.cross_entropy(model(xb), yb)
            objective = loss
            if capture is not None:
                penalty = gamma_sigma_penalty(*capture.pop(), reg.target)
                objective = loss + reg.strength * penalty
                pen_sum += penalty.item() * len(idx)
            opt.zero_grad(set_to_none=True)
            objective.backward()
            opt.step()
            loss_sum += loss.item() * len(idx)
            step += 1
        record = {"epoch": epoch, "loss": loss_sum / len(y), "penalty": pen_sum / len(y),
                  "lr": lr, "seconds": time.perf_counter() - t0}
        if on_epoch is not None:
            on_epoch(epoch, model, record)
        history.append(record)
    if capture is not None:
        capture.remove()
    return history
