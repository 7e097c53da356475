"""The prepared pool (`data/prepared/pool.npz`) as arrays and as training tensors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bnmem.core.io import load_npz
from bnmem.data.images import preprocess

POOL_KEYS = ("x", "y_train", "y_clean", "kind")


def load_pool(path: str | Path) -> dict[str, np.ndarray]:
    return load_npz(path, POOL_KEYS)


def tensors(pool: dict[str, np.ndarray], dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The pool's preprocessed images [N, C, H, W] and training labels [N]."""
    return preprocess(pool["x"], dataset, pool["x"]), torch.as_tensor(pool["y_train"])
