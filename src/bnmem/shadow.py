"""Shadow models for LiRA: a balanced keep matrix, per-model seeds, eval-mode queries.

A shard trains its models and saves each finished model's logits at once under a
`.partial` folder beside the shard, stamped with a fingerprint of everything that
determines them; a rerun after a kill reuses matching parts and trains only the rest.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bnmem.io import load_npz, save_npz
from bnmem.train import predict

log = logging.getLogger(__name__)


def keep_matrix(n_models: int, n: int, seed: int) -> np.ndarray:
    """bool [n_models, n]: every sample IN for exactly n_models / 2 models.

    Models come in complementary pairs (2p, 2p+1): row 2p keeps a seeded random half of
    the pool (floor(n/2) samples), row 2p+1 the other half. Each column therefore has
    exactly n_models/2 True, and every model trains on floor or ceil of n/2 samples.
    """
    if n_models % 2:
        raise ValueError(f"n_models must be even, got {n_models}")
    rng = np.random.default_rng([seed, 0x4EE9])
    keep = np.zeros((n_models, n), dtype=bool)
    for p in range(n_models // 2):
        half = rng.permutation(n)[: n // 2]
        keep[2 * p, half] = True
        keep[2 * p + 1] = ~keep[2 * p]
    return keep


def model_seeds(seed: int, model_id: int) -> tuple[int, int]:
    """(init seed, batch-order seed) of shadow model `model_id`; the same for every arm."""
    a, b = np.random.SeedSequence([seed, 0x5AD0, model_id]).generate_state(2)
    return int(a), int(b)


def shard_ids(n_models: int, shards: int, shard: int) -> np.ndarray:
    """Global model ids of one shard: a contiguous block of n_models / shards ids."""
    per = n_models // shards
    return np.arange(shard * per, (shard + 1) * per, dtype=np.int64)


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


def fingerprint(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode() if isinstance(p, str) else p)
        h.update(b"\0")
    return h.hexdigest()[:32]


def load_part(path: Path, stamp: str) -> np.ndarray | None:
    """Logits of a finished model from an earlier, killed run, if it matches `stamp`."""
    if not path.is_file():
        return None
    try:
        part = load_npz(path, ("logits", "stamp"))
    except Exception:  # a part cut short by the kill: retrain that model
        return None
    return part["logits"] if str(part["stamp"]) == stamp else None


def save_part(path: Path, logits: np.ndarray, stamp: str) -> None:
    save_npz(path, logits=logits, stamp=np.array(stamp))
