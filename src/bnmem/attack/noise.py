"""How training noise is shared between arms and between annealed endpoints, measured on real
shadow models: the numbers the coverage simulations (bnmem.attack.coverage,
bnmem.attack.coverage_matched) must reproduce for their intervals to be calibrated on real
runs (bench/bench_noise_structure.py writes the table from the default run's shadows).

A model's residual on sample i is its logit-scaled confidence minus the mean over the
models with the same membership of i (IN or OUT), so sample difficulty and the membership
effect drop out and what is left is model-to-model variation. Two arms' shadows with the
same id share seed, keep mask and batch order; the correlation of their residuals is how
much of that variation a paired difference cancels (1: all of it).
"""
from __future__ import annotations

import numpy as np


def residuals(phi: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """[m, N] residual of phi [m, N] about the mean of the models with the same membership."""
    phi = np.asarray(phi, np.float64)
    out = np.empty_like(phi)
    for side in (True, False):
        sel = keep == side
        mean = np.where(sel, phi, 0.0).sum(0) / np.maximum(sel.sum(0), 1)
        out = np.where(sel, phi - mean[None], out)
    return out


def correlation(a: np.ndarray, b: np.ndarray, keep: np.ndarray) -> dict:
    """Correlation of two [m, N] residual arrays of the same models and samples: per
    (model, sample) pair over IN and OUT pairs, and of the per-model mean residual (a
    model's overall shift)."""
    return {"in": float(np.corrcoef(a[keep], b[keep])[0, 1]),
            "out": float(np.corrcoef(a[~keep], b[~keep])[0, 1]),
            "model_shift": float(np.corrcoef(a.mean(1), b.mean(1))[0, 1])}


def structure(arms: dict[str, np.ndarray], keep: np.ndarray,
              endpoints: dict[str, list[np.ndarray]] | None = None) -> dict:
    """{arms: {a|b: correlation}, spread: {arm: residual SD, model-shift SD / residual SD},
    endpoints: {arm: [[corr(i, j)]]}} from phi [m, N] per arm (same models, same keep) and
    optionally every arm's endpoints' phi (budget order, the full run last)."""
    res = {a: residuals(p, keep) for a, p in arms.items()}
    names = list(res)
    out = {"arms": {f"{a}|{b}": correlation(res[a], res[b], keep)
                    for i, a in enumerate(names) for b in names[i + 1:]},
           "spread": {a: {"sd": float(r.std()), "model_shift_ratio": float(r.mean(1).std() / r.std())}
                      for a, r in res.items()}}
    if endpoints:
        out["endpoints"] = {}
        for arm, phis in endpoints.items():
            rs = [residuals(p, keep).ravel() for p in phis]
            out["endpoints"][arm] = np.corrcoef(np.stack(rs)).round(6).tolist()
    return out
