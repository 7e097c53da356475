"""Where training data go through in which order and at which learning rate: the batch order
and learning-rate schedule every training path shares (numpy only)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from bnmem.core.config import TrainConfig
from bnmem.core.rng import SALT


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
    times (step + 1) / warm-up steps during the first `warmup_epochs` epochs (a fraction of an
    epoch allowed: floor(warmup_epochs x total / epochs) steps, exact rational arithmetic)."""
    if cfg.schedule == "constant":
        lr = cfg.lr
    elif cfg.schedule == "step":
        lr = cfg.lr * (0.1 ** ((step >= total // 2) + (step >= 3 * total // 4)))
    else:
        lr = 0.5 * cfg.lr * (1 + math.cos(math.pi * step / total))
    warm = math.floor(Fraction(cfg.warmup_epochs) * total / cfg.epochs)
    return lr * (step + 1) / warm if step < warm else lr
