"""Atomic writes and safe loads: a killed stage never leaves a half-written file that a
later stage would read as valid, and nothing read from disk is unpickled."""
from __future__ import annotations

import csv
import json
import os
import pickle
import tempfile
import zipfile
from collections import OrderedDict
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np


class InputError(ValueError):
    """An input file that is missing, truncated or not what the stage expects."""


class DataError(FileNotFoundError):
    """A dataset that is missing or unreadable; the message says how to get it."""


class ClusterError(RuntimeError):
    """A compute cluster the stage cannot use or that went away (bnmem.train.scaleout); one line
    naming the setting or what was lost. Finished work is saved: a rerun resumes."""


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp" + path.suffix,
                               dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def save_npz(path: str | Path, **arrays: np.ndarray) -> None:
    with atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, **arrays)


def load_npz(path: str | Path, keys: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
    """Load an .npz without pickle; a missing/truncated/foreign file is an InputError."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; run the stage that writes it (dvc repro)")
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except Exception as exc:  # zipfile.BadZipFile, ValueError, EOFError, OSError ...
        raise InputError(f"{path}: not a readable .npz ({type(exc).__name__}); "
                         "re-run the stage that writes it") from None
    missing = [k for k in keys if k not in out]
    if missing:
        raise InputError(f"{path}: missing arrays {missing}; expected {list(keys)}")
    return out


def save_json(path: str | Path, obj: object) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def load_json(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; run the stage that writes it (dvc repro)")
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise InputError(f"{path}: not valid JSON; re-run the stage that writes it") from None


def save_csv(path: str | Path, columns: dict[str, np.ndarray], float_format: str = "%.6g") -> None:
    """A table of equal-length columns as CSV, byte for byte what pandas'
    `DataFrame(columns).to_csv(path, index=False, float_format=...)` writes (tests check it):
    floats through `float_format` with NaN empty, other values as str, minimal quoting.
    Here so that stages writing one table do not import pandas (~0.35 s)."""
    cols = {k: np.asarray(v) for k, v in columns.items()}
    sizes = {len(v) for v in cols.values()}
    if len(sizes) > 1:
        raise ValueError(f"columns: lengths differ {sorted(sizes)}")

    def cells(v: np.ndarray) -> list[str]:
        if v.dtype.kind == "f":
            return ["" if np.isnan(x) else float_format % x for x in v.tolist()]
        return [str(x) for x in v.tolist()]

    table = [cells(v) for v in cols.values()]
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(list(cols))
        w.writerows(zip(*table))


def save_state(path: str | Path, state: dict) -> None:
    import torch  # here, so stages that never touch weights start without torch

    # through a file object: torch names the archive's folder after a *path* it is given
    # (here a random temp name), which would make the bytes differ from run to run
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(state, f)


def load_state(path: str | Path) -> dict:
    """torch.load(weights_only=True); a missing/truncated/foreign file is an InputError."""
    import torch

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; run the stage that writes it (dvc repro)")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise InputError(f"{path}: not a readable weights file ({type(exc).__name__}); "
                         "re-run the stage that writes it") from None


# torch.save's storage classes -> numpy dtypes (the ones a plain state_dict holds)
# (little-endian: the byteorder torch.save records is checked)
_STORAGES = {"FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2",
             "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2",
             "CharStorage": "i1", "ByteStorage": "u1", "BoolStorage": "?"}


class _NotPlain(Exception):
    """The file holds something other than plain CPU tensors in a dict."""


def read_state_arrays(path: str | Path) -> dict[str, np.ndarray] | None:
    """A state_dict that torch.save wrote (zip format), as numpy arrays, without importing
    torch (~2 s of a stage's start): the archive's pickle is read by an unpickler that knows
    only an OrderedDict, `torch._utils._rebuild_tensor_v2` and the storage classes, as
    torch.load(weights_only=True) allows them, and nothing else is ever constructed. Values
    equal torch.load's bit for bit (tests). None where the file holds anything else (a
    parameter class, another dtype or layout, a legacy format, a damaged file): load_state
    reads those or says in one line what is wrong. A missing file is an InputError."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: file not found; run the stage that writes it (dvc repro)")
    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            pkl = [n for n in names if n.endswith("/data.pkl")]
            if len(pkl) != 1:
                return None
            prefix = pkl[0][: -len("data.pkl")]
            if prefix + "byteorder" in names and z.read(prefix + "byteorder") != b"little":
                return None
            storages: dict[str, np.ndarray] = {}

            def storage(pid: tuple) -> np.ndarray:
                if (not isinstance(pid, tuple) or len(pid) != 5 or pid[0] != "storage"
                        or pid[3] != "cpu" or not isinstance(pid[1], type)):
                    raise _NotPlain
                key, dtype = str(pid[2]), np.dtype(pid[1].dtype)
                if key not in storages:
                    info = z.getinfo(f"{prefix}data/{key}")  # stored as torch.save stores:
                    if (info.compress_type != zipfile.ZIP_STORED  # no inflating (zip bombs)
                            or info.file_size != int(pid[4]) * dtype.itemsize):
                        raise _NotPlain
                    storages[key] = np.frombuffer(z.read(info), dtype=dtype)  # read-only
                return storages[key]

            if z.getinfo(pkl[0]).file_size > 1 << 24:  # a state_dict's pickle is kilobytes
                return None
            state = _StateUnpickler(z.open(pkl[0]), storage).load()
    except Exception:  # noqa: BLE001 -- _NotPlain, a damaged or crafted file: whatever it is,
        return None    # load_state (weights_only) reads it or names what is wrong in one line
    if not isinstance(state, dict) or not all(isinstance(v, np.ndarray) for v in state.values()):
        return None
    return dict(state)


def _rebuild_tensor(storage: np.ndarray, offset: int, size: tuple, stride: tuple,
                    requires_grad=False, hooks=None, metadata=None) -> np.ndarray:
    """torch._utils._rebuild_tensor_v2 for a contiguous tensor, as a numpy copy in the
    host's byte order (the one copy of the file's bytes)."""
    n = int(np.prod(size, dtype=np.int64))
    expected = tuple(int(np.prod(size[i + 1:], dtype=np.int64)) for i in range(len(size)))
    if tuple(stride) != expected and n > 1 or offset + n > storage.size:
        raise _NotPlain
    return storage[offset:offset + n].reshape(size).astype(storage.dtype.newbyteorder("="))


class _StateUnpickler(pickle.Unpickler):
    def __init__(self, file, storage):
        super().__init__(file)
        self._storage = storage

    def find_class(self, module: str, name: str):
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if module == "torch" and name in _STORAGES:
            return type(name, (), {"dtype": _STORAGES[name]})
        raise _NotPlain

    def persistent_load(self, pid):
        return self._storage(pid)


SIG_DIGITS = 10  # float64 through BLAS and convolutions: the last bits differ by CPU vendor


def significant(obj, digits: int = SIG_DIGITS):
    """Every float in `obj` (dicts, lists, float arrays) rounded to `digits` significant
    digits, for float64 results of BLAS or PyTorch kernels (the theory stage): an AMD and
    an Intel run differed from about the 15th digit on, so the rounded values carry no
    bits that depend on the CPU vendor (a value within ~1e-15 of a rounding boundary
    still could)."""
    if isinstance(obj, dict):
        return {k: significant(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(significant(v, digits) for v in obj)
    if isinstance(obj, np.ndarray) and obj.dtype.kind == "f":
        flat = [float(f"{v:.{digits}g}") for v in obj.ravel().tolist()]
        return np.asarray(flat, dtype=obj.dtype).reshape(obj.shape)
    if isinstance(obj, (float, np.floating)):
        return float(f"{float(obj):.{digits}g}")
    return obj

