"""The prepared pool (`data/prepared/pool.npz`) as arrays (torch-free: the exposure stage
loads it without torch) and as training tensors."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bnmem.core.io import load_npz
from bnmem.data.images import preprocess

if TYPE_CHECKING:
    import torch

POOL_KEYS = ("x", "y_train", "y_clean", "kind")


def load_pool(path: str | Path) -> dict[str, np.ndarray]:
    return load_npz(path, POOL_KEYS)


def tensors(pool: dict[str, np.ndarray], dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The pool's preprocessed images [N, C, H, W] and training labels [N]."""
    import torch
    return preprocess(pool["x"], dataset, pool["x"]), torch.as_tensor(pool["y_train"])
