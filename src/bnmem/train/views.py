"""Query views: the augmented copies of an image a membership attack asks a model about
(identity, horizontal flip, shifts), and one model's eval-mode logits on each."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bnmem.models.runtime import predict


def augment(x: torch.Tensor, query: str) -> torch.Tensor:
    """One query view of [N, C, H, W]: identity, hflip, or shift_<dx>_<dy> (zero fill)."""
    if query == "identity":
        return x
    if query == "hflip":
        return x.flip(-1)
    _, dx, dy = query.split("_")
    dx, dy = int(dx), int(dy)
    pad = max(abs(dx), abs(dy))
    h, w = x.shape[-2:]
    padded = F.pad(x, (pad, pad, pad, pad))
    return padded[..., pad - dy: pad - dy + h, pad - dx: pad - dx + w]


def query(model: nn.Module, x: torch.Tensor, queries: tuple[str, ...]) -> np.ndarray:
    """float32 [N, Q, C] logits of every query view, in eval mode (running statistics)."""
    return torch.stack([predict(model, augment(x, q)) for q in queries], dim=1).numpy()
