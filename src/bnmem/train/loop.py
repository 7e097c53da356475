"""One training recipe for target and shadow models: SGD with momentum, seeded batch order,
an optional gamma/sigma penalty on BN layers, per-epoch evaluation in eval mode.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
import torch.nn.functional as F

from bnmem.core.config import TrainConfig
from bnmem.models.zoo import bn_layers
from bnmem.core.schedule import batch_order, lr_at
from bnmem.train.sgd import make_sgd

log = logging.getLogger(__name__)


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
    opt = make_sgd(model.parameters(), device, lr=cfg.lr, momentum=cfg.momentum,
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
