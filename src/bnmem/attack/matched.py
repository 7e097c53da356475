"""Matched fit: compare arms where they fit the clean data equally well, not at the same
epoch.

BN models fit faster, so at equal epochs part of "BN leaks more" may be "BN has fitted
more". Every figure is a function of fit, linear between recorded epochs (`at_fit`); two
arms are compared at their common fit (the lower of their final fits) and over the range
of fits both pass through (`fit_grid`). The shadow stage records every shadow model's
identity-query signal after the epochs of shadow.track_at (`load_epochs`: by default
train.checkpoints and the final epoch; `epoch_at` reads a matched point's epoch on them);
bnmem.attack.resample computes the per-epoch fit and attack inside every bootstrap draw.
"""
from __future__ import annotations

import numpy as np

from bnmem.core.io import InputError, load_npz


def at_fit(fit: np.ndarray, values: np.ndarray, target: float) -> tuple[float, float]:
    """(value, fractional epoch) where `fit` first reaches `target`, linear between
    recorded epochs (1-based); (nan, nan) when the target lies below the first recorded
    fit or is never reached (no extrapolation)."""
    fit, values = np.asarray(fit, float), np.asarray(values, float)
    hit = np.flatnonzero(fit >= target - 1e-12)
    if hit.size == 0 or not np.isfinite(target):
        return np.nan, np.nan
    e = hit[0]
    if e == 0:
        return (float(values[0]), 1.0) if fit[0] <= target + 1e-12 else (np.nan, np.nan)
    w = (target - fit[e - 1]) / (fit[e] - fit[e - 1])
    return float(values[e - 1] + w * (values[e] - values[e - 1])), float(e + w)


def epoch_at(position: float, epochs) -> float:
    """The epoch at_fit's fractional position (1-based, between recorded epochs) stands for
    when the curve was recorded at `epochs` (e.g. 1, 2, 3, 4, 6, 8, 12), linear between
    them; nan stays nan."""
    if not np.isfinite(position):
        return float("nan")
    return float(np.interp(position - 1.0, np.arange(len(epochs)), np.asarray(epochs, float)))


def common_fit(fit_a: np.ndarray, fit_b: np.ndarray) -> float:
    """The fit both arms reach: the lower of their final fits."""
    return float(min(fit_a[-1], fit_b[-1]))


def fit_grid(fit_a: np.ndarray, fit_b: np.ndarray, points: int = 21) -> np.ndarray:
    """Fits both arms pass through: from the higher first-epoch fit to the common fit."""
    lo, hi = max(fit_a[0], fit_b[0]), common_fit(fit_a, fit_b)
    return np.linspace(lo, hi, points) if hi > lo else np.array([hi])


def load_epochs(paths: list, n_samples: int) -> dict[str, np.ndarray] | None:
    """epoch_phi / epoch_correct / keep of an arm's shards, models in id order, and the
    epochs they were recorded at (`epochs` [E]); None when a shard was trained without
    shadow.track_epochs. Bad shapes are a one-line InputError."""
    parts = [load_npz(p, ("keep", "model_ids")) for p in paths]
    if not all("epoch_phi" in z and "epoch_correct" in z for z in parts):
        return None
    for path, z in zip(paths, parts):
        m = len(z["model_ids"])
        ph, co = z["epoch_phi"], z["epoch_correct"]
        if ph.ndim != 3 or ph.shape[0] != m or ph.shape[2] != n_samples or co.shape != ph.shape:
            raise InputError(f"{path}: epoch_phi {ph.shape} / epoch_correct {co.shape} do not "
                             f"fit [m={m}, epochs, N={n_samples}]; re-run the shadow stage")
        if not np.isfinite(ph).all():
            raise InputError(f"{path}: non-finite epoch_phi; re-run the shadow stage")
    if len({z["epoch_phi"].shape[1] for z in parts}) > 1:
        raise InputError(f"{paths[0]}: shards disagree on the number of epochs")
    # the epochs they were recorded at; shards from before shadow.track_at: every epoch
    epochs = [tuple(z["tracked_epochs"].tolist()) if "tracked_epochs" in z
              else tuple(range(1, z["epoch_phi"].shape[1] + 1)) for z in parts]
    if len(set(epochs)) > 1 or len(epochs[0]) != parts[0]["epoch_phi"].shape[1]:
        raise InputError(f"{paths[0]}: tracked_epochs do not fit epoch_phi or differ between "
                         "shards; re-run the shadow stage")
    order = np.argsort(np.concatenate([z["model_ids"] for z in parts]))
    out = {k: np.concatenate([z[k] for z in parts])[order]
           for k in ("epoch_phi", "epoch_correct", "keep")}
    out["epochs"] = np.asarray(epochs[0], dtype=np.int64)
    return out
