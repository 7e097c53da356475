"""Pool / test split and forced-memorization corruption (the `prepare` stage's library).

kind codes: 0 clean, 1 flipped label, 2 out-of-distribution image with a random label.
"""
from __future__ import annotations

import hashlib

import numpy as np

from bnmem.core.config import ConfigError
from bnmem.core.kinds import FLIPPED, OOD
from bnmem.data.images import Images, match_format


def n_of(rate: float, n: int) -> int:
    """round(rate * n), halves rounded up (not numpy's round-half-to-even)."""
    return int(np.floor(rate * n + 0.5))


def corrupt(x: np.ndarray, y: np.ndarray, ood_x: np.ndarray, noise_rate: float, ood_rate: float,
            num_classes: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Flip round(noise_rate*N) labels and replace round(ood_rate*N) images by foreign ones.

    Flipped labels are drawn uniformly among the *other* classes; OOD images get uniform
    random labels and y_clean = -1. Flipped and OOD samples are disjoint.

    Returns the pool in the contract format: x, y_train, y_clean, kind.
    """
    n = len(y)
    n_flip, n_ood = n_of(noise_rate, n), n_of(ood_rate, n)
    if n_ood > len(ood_x):
        raise ConfigError(f"ood_rate: needs {n_ood} foreign images, the OOD source has {len(ood_x)}")
    perm = rng.permutation(n)
    flip_idx, ood_idx = perm[:n_flip], perm[n_flip:n_flip + n_ood]
    x = x.copy()
    y_train = y.astype(np.int64).copy()
    y_clean = y.astype(np.int64).copy()
    kind = np.zeros(n, dtype=np.int8)
    y_train[flip_idx] = (y[flip_idx] + rng.integers(1, num_classes, size=n_flip)) % num_classes
    kind[flip_idx] = FLIPPED
    chosen = rng.choice(len(ood_x), size=n_ood, replace=False)
    x[ood_idx] = match_format(ood_x[chosen], x.shape[1], x.shape[2:])
    y_train[ood_idx] = rng.integers(0, num_classes, size=n_ood)
    y_clean[ood_idx] = -1
    kind[ood_idx] = OOD
    return {"x": x, "y_train": y_train, "y_clean": y_clean, "kind": kind}


def _digests(x: np.ndarray) -> np.ndarray:
    return np.array([hashlib.blake2b(row.tobytes(), digest_size=16).hexdigest() for row in x])


def split(train: Images, test: Images, pool_size: int, test_size: int,
          rng: np.random.Generator) -> tuple[Images, Images]:
    """A seeded pool of `pool_size` training images (0: all of them, in order) and
    `test_size` held-out test images (at most `test_size` when the test images are only
    as many: your own data). The pool keeps each image's source row (`Images.index`).

    Test images whose bytes equal a pool image (the datasets hold a few exact duplicates)
    are dropped before sampling, so the two sets share no image.
    """
    n = len(train.y)
    if pool_size > n:
        raise ConfigError(f"pool_size: {pool_size} is larger than the dataset's "
                          f"{n} training images; valid: 20 .. {n}")
    pool_idx = (np.arange(n) if pool_size == 0
                else np.sort(rng.choice(n, size=pool_size, replace=False)))
    index = np.arange(n, dtype=np.int64) if train.index is None else train.index
    pool = Images(train.x[pool_idx], train.y[pool_idx], index[pool_idx])
    fresh = ~np.isin(_digests(test.x), _digests(pool.x))
    candidates = np.flatnonzero(fresh)
    if test_size >= len(test.y):  # every test image asked for: keep the fresh ones
        test_size = len(candidates)
    if test_size > len(candidates):
        raise ConfigError(f"data.test_size: {test_size} is larger than the {len(candidates)} "
                          "usable test images")
    test_idx = np.sort(rng.choice(candidates, size=test_size, replace=False))
    return pool, Images(test.x[test_idx], test.y[test_idx])
