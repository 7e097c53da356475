"""Corruption counts, determinism and disjointness; the split shares no image."""
import numpy as np
import pytest

from bnmem.core.config import ConfigError
from bnmem.core.kinds import CLEAN, FLIPPED, OOD
from bnmem.data.corrupt import corrupt, n_of, split
from bnmem.data.images import Images


def toy(n, rng, classes=10):
    return rng.integers(0, 256, (n, 1, 28, 28)).astype(np.uint8), rng.integers(0, classes, n)


@pytest.mark.parametrize("noise, ood, n", [(0.05, 0.01, 1000), (0.0, 0.0, 50), (0.25, 0.3, 333),
                                           (0.005, 0.015, 100)])
def test_exact_counts(noise, ood, n, rng):
    x, y = toy(n, rng)
    ood_x, _ = toy(500, rng)
    out = corrupt(x, y, ood_x, noise, ood, 10, np.random.default_rng(1))
    kind = out["kind"]
    assert (kind == FLIPPED).sum() == n_of(noise, n) == int(np.floor(noise * n + 0.5))
    assert (kind == OOD).sum() == n_of(ood, n)
    flipped = kind == FLIPPED
    assert np.all(out["y_train"][flipped] != y[flipped])       # flips always change the class
    assert np.all(out["y_clean"][flipped] == y[flipped])
    assert np.all(out["y_clean"][kind == OOD] == -1)
    clean = kind == CLEAN
    np.testing.assert_array_equal(out["y_train"][clean], y[clean])
    np.testing.assert_array_equal(out["x"][clean | flipped], x[clean | flipped])
    assert out["x"].dtype == np.uint8 and out["y_train"].dtype == np.int64 and kind.dtype == np.int8


def test_flips_uniform_over_other_classes(rng):
    n = 20000
    x, y = np.zeros((n, 1, 2, 2), np.uint8), np.zeros(n, dtype=np.int64)
    out = corrupt(x, y, x[:0], 0.5, 0.0, 5, np.random.default_rng(3))
    counts = np.bincount(out["y_train"][out["kind"] == FLIPPED], minlength=5)
    assert counts[0] == 0
    assert np.all(np.abs(counts[1:] / counts[1:].sum() - 0.25) < 0.02)


def test_deterministic_from_seed(rng):
    x, y = toy(300, rng)
    ood_x, _ = toy(50, rng)
    a = corrupt(x, y, ood_x, 0.1, 0.05, 10, np.random.default_rng(7))
    b = corrupt(x, y, ood_x, 0.1, 0.05, 10, np.random.default_rng(7))
    c = corrupt(x, y, ood_x, 0.1, 0.05, 10, np.random.default_rng(8))
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert not np.array_equal(a["kind"], c["kind"])


def test_ood_images_come_from_the_foreign_source(rng):
    x, y = toy(200, rng)
    ood_x = np.full((30, 1, 28, 28), 7, np.uint8)  # recognisable foreign images
    out = corrupt(x, y, ood_x, 0.0, 0.1, 10, np.random.default_rng(0))
    assert np.all(out["x"][out["kind"] == OOD] == 7)


def test_split_disjoint_even_with_duplicates(rng):
    x, y = toy(100, rng)
    test = Images(np.concatenate([x[:30], toy(40, rng)[0]]), np.arange(70))  # 30 duplicates
    pool, held = split(Images(x, y), test, 100, 40, np.random.default_rng(0))
    pool_set = {r.tobytes() for r in pool.x}
    assert not any(r.tobytes() in pool_set for r in held.x)
    with pytest.raises(ConfigError, match="pool_size"):
        split(Images(x, y), test, 101, 10, np.random.default_rng(0))
    with pytest.raises(ConfigError, match="data.test_size"):
        split(Images(x, y), test, 100, 41, np.random.default_rng(0))
