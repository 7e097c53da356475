"""Atomic writes and safe loads: a killed stage never leaves a half-written file that a
later stage would read as valid, and nothing read from disk is unpickled."""
from __future__ import annotations

import csv
import json
import os
import tempfile
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

