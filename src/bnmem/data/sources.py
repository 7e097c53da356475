"""Where the prepare stage's images come from: a built-in dataset (bnmem.data.images) or your own
data, named by `dataset` as a path:

- a `.npz` with `x` (uint8 or float images, [N, C, H, W], [N, H, W, C] or [N, H, W]) and
  `y` (integer labels 0 .. data.num_classes-1), optionally `test_x` / `test_y`;
- an ImageFolder directory (`<dir>/<class>/<image>`, classes in sorted order, as
  torchvision reads it), or one holding `train/` and `test/` ImageFolders; images are
  converted to data.channels and resized to data.image_size once, here.

Without a test split, data.test_size images are held out at random (a fixed property of
the file, independent of `seed`). `Images.index` keeps every image's row in the source's
training images, so `audit.members` can name rows of your own file.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bnmem.core.config import DataConfig, user_dataset
from bnmem.data.images import NUM_CLASSES, OOD_SOURCE, Images, describe_source, load_dataset
from bnmem.core.io import DataError

IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm",
                    ".pgm")
HOLDOUT_SEED = 20240613  # your own data without a test split: a property of the file


def class_count(dataset: str, data: DataConfig) -> int:
    """Number of classes: the built-in dataset's, or data.num_classes for your own."""
    return NUM_CLASSES[dataset] if not user_dataset(dataset) else int(data.num_classes)


def _as_uint8(x: np.ndarray, key: str, path: str) -> np.ndarray:
    """Images as uint8 [N, C, H, W]; floats in [0, 1] are scaled by 255, floats in
    [0, 255] rounded."""
    if x.ndim == 3:
        x = x[:, None]
    if x.ndim != 4:
        raise DataError(f"{path}: `{key}` has shape {list(x.shape)}; expected [N, C, H, W], "
                        "[N, H, W, C] or [N, H, W] with C 1 or 3")
    if x.shape[1] not in (1, 3) and x.shape[3] in (1, 3):
        x = x.transpose(0, 3, 1, 2)
    if x.shape[1] not in (1, 3):
        raise DataError(f"{path}: `{key}` has shape {list(x.shape)}; expected 1 or 3 channels "
                        "in [N, C, H, W] or [N, H, W, C]")
    if x.dtype == np.uint8:
        return np.ascontiguousarray(x)
    if not np.issubdtype(x.dtype, np.number) or not np.isfinite(x).all():
        raise DataError(f"{path}: `{key}` must be finite numbers (uint8 or float), got {x.dtype}")
    lo, hi = float(x.min()), float(x.max())
    if lo < 0 or hi > 255:
        raise DataError(f"{path}: `{key}` spans [{lo:g}, {hi:g}]; expected uint8, floats in "
                        "[0, 1] or floats in [0, 255]")
    scale = 255.0 if hi <= 1.0 else 1.0
    return np.ascontiguousarray(np.round(x.astype(np.float64) * scale).astype(np.uint8))


def _labels(y: np.ndarray, key: str, path: str, n: int, num_classes: int) -> np.ndarray:
    if y.ndim != 1 or y.size != n:
        raise DataError(f"{path}: `{key}` has shape {list(y.shape)}; expected [{n}] (one label "
                        "per image)")
    if not np.issubdtype(y.dtype, np.integer):
        raise DataError(f"{path}: `{key}` is {y.dtype}; expected integer class labels")
    if n and (y.min() < 0 or y.max() >= num_classes):
        raise DataError(f"{path}: `{key}` spans [{y.min()}, {y.max()}]; labels must lie in "
                        f"[0, data.num_classes={num_classes}) - fix the labels or data.num_classes")
    return y.astype(np.int64)


def load_npz_images(path: Path, num_classes: int, param: str = "dataset"
                    ) -> tuple[Images, Images | None]:
    """(train, test or None) from your own .npz (see the module docstring); errors name
    `param` (the params key that points at the file) and the file."""
    where = f"{param}: {path}"
    if not path.is_file():
        raise DataError(f"{where}: file not found")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as exc:
        raise DataError(f"{where}: not a readable .npz without pickled objects "
                        f"({type(exc).__name__})") from None
    if param == "data.ood_source" and "y" not in arrays:  # foreign images: labels unused
        arrays["y"] = np.zeros(len(arrays.get("x", ())), np.int64)
    missing = [k for k in ("x", "y") if k not in arrays]
    if missing:
        raise DataError(f"{where}: missing arrays {missing}; a dataset .npz holds `x` "
                        "(images) and `y` (labels), optionally `test_x` and `test_y`")
    if ("test_x" in arrays) != ("test_y" in arrays):
        raise DataError(f"{where}: has only one of `test_x` / `test_y`; give both or "
                        "neither")
    x = _as_uint8(arrays["x"], "x", where)
    if x.shape[2] != x.shape[3] or len(x) == 0:
        raise DataError(f"{where}: `x` is {list(x.shape)}; bnmem needs a non-empty set "
                        "of square images [N, C, S, S] (resize or crop them first)")
    train = Images(x, _labels(arrays["y"], "y", where, len(x), num_classes),
                   np.arange(len(x), dtype=np.int64))
    if "test_x" not in arrays:
        return train, None
    tx = _as_uint8(arrays["test_x"], "test_x", where)
    if tx.shape[1:] != x.shape[1:]:
        raise DataError(f"{where}: `test_x` images are {list(tx.shape[1:])}, `x` images "
                        f"{list(x.shape[1:])}; every image needs the same [C, H, W]")
    return train, Images(tx, _labels(arrays["test_y"], "test_y", where, len(tx), num_classes))


def _read_folder(root: Path, channels: int, size: int) -> tuple[Images, list[str]]:
    from PIL import Image, UnidentifiedImageError

    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    if not classes:
        raise DataError(f"dataset: {root}: no class folders; an ImageFolder holds "
                        "<class>/<image> files")
    xs, ys = [], []
    for label, name in enumerate(classes):
        for f in sorted((root / name).rglob("*")):
            if f.suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            try:
                with Image.open(f) as im:
                    im = im.convert("L" if channels == 1 else "RGB").resize(
                        (size, size), Image.Resampling.BILINEAR)
                    a = np.asarray(im, dtype=np.uint8)
            except (OSError, UnidentifiedImageError):
                raise DataError(f"dataset: {f}: not a readable image") from None
            xs.append(a[None] if channels == 1 else a.transpose(2, 0, 1))
            ys.append(label)
    if not xs:
        raise DataError(f"dataset: {root}: no images ({', '.join(IMAGE_EXTENSIONS)})")
    return Images(np.stack(xs), np.asarray(ys, dtype=np.int64)), classes


def load_image_folder(root: Path, data: DataConfig) -> tuple[Images, Images | None]:
    """(train, test or None) from an ImageFolder, or from `train/` + `test/` ImageFolders."""
    if data.image_size is None:
        raise DataError("data.image_size: required for an ImageFolder dataset (images are "
                        "resized to image_size x image_size)")
    split = (root / "train").is_dir() and (root / "test").is_dir()
    train, classes = _read_folder(root / "train" if split else root, data.channels, data.image_size)
    if len(classes) != data.num_classes:
        raise DataError(f"data.num_classes: {data.num_classes}, but {root} has {len(classes)} "
                        f"class folders ({', '.join(classes[:5])}{', ...' if len(classes) > 5 else ''})")
    train = Images(train.x, train.y, np.arange(len(train.y), dtype=np.int64))
    if not split:
        return train, None
    test, test_classes = _read_folder(root / "test", data.channels, data.image_size)
    if test_classes != classes:
        raise DataError(f"dataset: {root}/test has classes {test_classes[:5]}..., train/ has "
                        f"{classes[:5]}...; both need the same class folders")
    return train, test


def hold_out(train: Images, test_size: int) -> tuple[Images, Images]:
    """Split `test_size` random images off `train` (rows keep their source index)."""
    if test_size >= len(train.y):
        raise DataError(f"data.test_size: {test_size} leaves no training images of "
                        f"{len(train.y)}; make it smaller or add test_x / test_y")
    mask = np.zeros(len(train.y), bool)
    mask[np.random.default_rng(HOLDOUT_SEED).choice(len(train.y), test_size, replace=False)] = True
    return (Images(train.x[~mask], train.y[~mask], train.index[~mask]),
            Images(train.x[mask], train.y[mask]))


def load_user(dataset: str, data: DataConfig) -> tuple[Images, Images]:
    """(train, test) of your own dataset (a .npz or an ImageFolder directory)."""
    path = Path(dataset)
    if path.suffix == ".npz":
        train, test = load_npz_images(path, data.num_classes)
    elif path.is_dir():
        train, test = load_image_folder(path, data)
    else:
        raise DataError(f"dataset: {path}: neither a .npz file nor an ImageFolder directory")
    return (train, test) if test is not None else hold_out(train, data.test_size)


def load_splits(dataset: str, data: DataConfig) -> tuple[Images, Images]:
    """(train, test) images of `dataset`: built-in or your own."""
    if user_dataset(dataset):
        return load_user(dataset, data)
    train = load_dataset(dataset, "train", data.root, data.allow_download)
    train = Images(train.x, train.y, np.arange(len(train.y), dtype=np.int64))
    return train, load_dataset(dataset, "test", data.root, data.allow_download)


def ood_images(dataset: str, data: DataConfig) -> tuple[str, Images]:
    """(description, images) of the OOD source: data.ood_source (a built-in name, a .npz or a
    folder), else the built-in partner of a built-in dataset (OOD_SOURCE)."""
    name = data.ood_source or OOD_SOURCE.get(dataset)
    if name is None:
        raise DataError("data.ood_source: needed for ood_rate > 0 with your own dataset; set "
                        "it to a dataset name, a .npz or an ImageFolder, or set ood_rate: 0")
    if not user_dataset(name):
        root = data.root if name.startswith("cifar") else None  # MNIST pair: packaged sources
        return describe_source(name, root), load_dataset(name, "train", root, data.allow_download)
    path = Path(name)  # foreign images: their labels are never used
    if path.suffix == ".npz":
        return f"your file {path}", load_npz_images(path, np.iinfo(np.int64).max, "data.ood_source")[0]
    if not path.is_dir():
        raise DataError(f"data.ood_source: {path}: neither a .npz file nor an ImageFolder directory")
    if data.image_size is None:
        raise DataError("data.image_size: required to read the ImageFolder data.ood_source")
    return f"your folder {path}", _read_folder(path, data.channels, data.image_size)[0]


def describe(dataset: str, data: DataConfig) -> tuple[str, str | None]:
    """(where `dataset` is read from, where its OOD images come from), in words."""
    if user_dataset(dataset):
        kind = "ImageFolder" if Path(dataset).is_dir() else ".npz"
        ood = data.ood_source
        return f"your {kind} {dataset}", (None if ood is None else
                                            ood if user_dataset(ood) else describe_source(ood, None))
    ood = data.ood_source or OOD_SOURCE[dataset]
    return (describe_source(dataset, data.root),
            describe_source(ood, data.root if ood.startswith("cifar") else None))
