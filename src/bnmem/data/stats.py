"""Per-channel normalization statistics (numpy only: the report stage reads them without
loading torch)."""
from __future__ import annotations

import numpy as np

# Per-channel mean / std of the training images (0-1 scale).
_STATS = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}


def channel_stats(dataset: str, pool_x: np.ndarray | None = None
                  ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Per-channel (mean, std) on the 0-1 scale: published values for the built-in datasets;
    for your own dataset, those of the prepared pool's images (`pool_x`, uint8 [N, C, H, W])."""
    if dataset in _STATS:
        return _STATS[dataset]
    if pool_x is None:
        raise ValueError(f"{dataset}: normalizing your own dataset needs the pool's images")
    v = np.asarray(pool_x, dtype=np.float64) / 255.0
    std = v.std(axis=(0, 2, 3))
    return tuple(v.mean(axis=(0, 2, 3)).tolist()), tuple(np.where(std > 0, std, 1.0).tolist())
