"""The LiRA signal: the logit-scaled confidence phi, computed from logits without softmax.

Its own module so the shadow stage (which records phi after every epoch) does not depend
on the attack code.
"""
from __future__ import annotations

import numpy as np


def logit_margin(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """phi = z_y - logsumexp_{j != y} z_j in float64, exact at any margin (no softmax).

    `labels` broadcasts against logits.shape[:-1]. Works class-major (one contiguous
    array per class) because numpy reductions over a short last axis are slow.
    """
    z = np.ascontiguousarray(np.moveaxis(np.asarray(logits), -1, 0), dtype=np.float64)
    is_y = [np.broadcast_to(labels, z.shape[1:]) == c for c in range(z.shape[0])]
    z_y, top = np.zeros(z.shape[1:]), np.full(z.shape[1:], -np.inf)
    for zc, yc in zip(z, is_y):
        np.copyto(z_y, zc, where=yc)
        np.maximum(top, np.where(yc, -np.inf, zc), out=top)  # max over the other classes
    total = np.zeros(z.shape[1:])
    for zc, yc in zip(z, is_y):
        total += np.exp(np.where(yc, -np.inf, zc) - top)
    return z_y - (top + np.log(total))


def log_prob_from_margin(phi: np.ndarray) -> np.ndarray:
    """log softmax_y = -log(1 + e^{-phi}), exact for large |phi| (no underflow to -inf)."""
    return -np.logaddexp(0.0, -phi)
