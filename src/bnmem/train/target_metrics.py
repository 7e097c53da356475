"""Measurements of one trained (target) model in eval mode: accuracy on each sample kind
(memorization of the corrupted ones), BN gamma/sigma per layer, and the direction BN's
gamma is pushed by each kind of sample. Attack-side memorization (Feldman-Zhang, over
shadow models) is `bnmem.attack.signals.memorization`."""
from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bnmem.core.kinds import CLEAN, FLIPPED, OOD
from bnmem.models.zoo import bn_layers


def _acc(pred: np.ndarray, y: np.ndarray, mask: np.ndarray) -> float | None:
    return float((pred[mask] == y[mask]).mean()) if mask.any() else None


def accuracy_by_kind(pool_logits: torch.Tensor, y_train: np.ndarray, kind: np.ndarray,
                 test_logits: torch.Tensor, y_test: np.ndarray) -> dict:
    """Accuracy on each kind *with its training label* (for corrupted kinds: memorization).

    Returns clean_train_acc, flipped_mem_acc (share of flipped samples predicted as their
    flipped label), ood_mem_acc, test_acc; None where a kind is absent.
    """
    pred = pool_logits.argmax(1).numpy()
    return {
        "clean_train_acc": _acc(pred, y_train, kind == CLEAN),
        "flipped_mem_acc": _acc(pred, y_train, kind == FLIPPED),
        "ood_mem_acc": _acc(pred, y_train, kind == OOD),
        "test_acc": float((test_logits.argmax(1).numpy() == y_test).mean()),
    }


@torch.no_grad()
def gamma_sigma(model: nn.Module) -> dict[str, dict]:
    """Per BN layer: |gamma|/sigma with sigma = sqrt(running_var + eps), summarised.

    Keys per layer: type (conv | dense), median_ratio, share_above_1, median_gamma, median_sigma, and the
    per-channel `ratio` list (for plots).
    """
    out = {}
    for name, m in bn_layers(model):
        # float64 numpy: IEEE sqrt and division are correctly rounded on every CPU, while
        # torch's float32 kernels differed by one ulp between an AMD and an Intel machine
        sigma = np.sqrt(m.running_var.detach().cpu().double().numpy() + m.eps)
        gamma = np.abs(m.weight.detach().cpu().double().numpy())
        ratio = gamma / sigma
        out[name.replace(".", "_")] = {
            "type": "conv" if isinstance(m, nn.BatchNorm2d) else "dense",
            "median_ratio": lower_median(ratio),
            "share_above_1": float((ratio > 1).mean()),
            "median_gamma": lower_median(gamma),
            "median_sigma": lower_median(sigma),
            "ratio": [round(float(r), 6) for r in ratio],
        }
    return out


def lower_median(v) -> float:
    """torch.median's convention: the lower of the two middle values for an even count;
    nan when any value is nan (a diverged model), as torch.median."""
    v = np.asarray(v, dtype=np.float64)
    if v.size == 0 or np.isnan(v).any():
        return float("nan")
    return float(np.sort(v)[(v.size - 1) // 2])


def epochs_to(history: list[dict], key: str, level: float) -> int | None:
    """First epoch whose `key` reaches `level`, or None."""
    for rec in history:
        if rec.get(key) is not None and rec[key] >= level:
            return rec["epoch"]
    return None


# samples per float64 forward and backward in gamma_push: all 56 400 clean samples of the
# full-scale pool at once held 13.5 GiB (train@batchnorm, results/fullscale/timing.md);
# bench/bench_gamma_push.py measures both
GAMMA_PUSH_CHUNK = 2048


def gamma_push(model, x, y, masks: dict[str, np.ndarray],
               chunk: int | None = GAMMA_PUSH_CHUNK) -> dict[str, dict[str, float]]:
    """Per BN layer and sample group: -mean_i dl_i/dgamma (mean over channels), eval mode.

    Positive means an SGD step on those samples pushes the layer's gamma *up* (the paper's
    self-reinforcing loop); the value is per sample, so groups of different size compare.
    The mean's gradient is summed over chunks of `chunk` samples (each chunk's summed loss
    over the group's size), so memory is bounded by a chunk; None: one pass over the group
    (the reference path; equal up to float64 rounding, tested).
    """
    out: dict[str, dict[str, float]] = {}
    # a float32 model in float64 on a copy, rounded to float32: PyTorch's float32
    # convolutions differ between CPU vendors in the last bits (as bnmem.grads.per_sample' batch
    # definition; equal unless a value lies at a float32 rounding boundary)
    single = next(iter(model.parameters())).dtype == torch.float32
    model = copy.deepcopy(model).double().eval() if single else model.eval()
    x = x.double() if single else x
    layers = bn_layers(model)
    gammas = [m.weight for _, m in layers]
    for group, mask in masks.items():
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            continue
        # the gradients of the gammas alone (no weight gradient of any other layer)
        if chunk is None:
            loss = F.cross_entropy(model(x[idx]), torch.as_tensor(y[idx]), reduction="mean")
            grads = torch.autograd.grad(loss, gammas)
        else:
            grads = [torch.zeros_like(g) for g in gammas]
            for start in range(0, idx.size, chunk):
                part = idx[start:start + chunk]
                loss = F.cross_entropy(model(x[part]), torch.as_tensor(y[part]),
                                       reduction="sum") / idx.size
                for total, g in zip(grads, torch.autograd.grad(loss, gammas)):
                    total += g
        for (name, _), grad in zip(layers, grads):
            g = -grad.mean()
            out.setdefault(name.replace(".", "_"), {})[group] = float(g.float() if single else g)
    return out
