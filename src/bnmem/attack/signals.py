"""Per-model signals of one arm's shadow models, read from the shadow stage's shards: the
logit-scaled confidence every attack scores, the log-probability RMIA reads, correctness
and membership; and the Feldman-Zhang memorization score over them (numpy only)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bnmem.core.io import InputError, load_npz
from bnmem.core.margin import log_prob_from_margin, logit_margin


@dataclass(frozen=True)
class Signals:
    """Per-model signals of one arm, models sorted by id."""
    phi: np.ndarray        # [m, N, Q] float64 logit margin
    logp: np.ndarray       # [m, N] float64 log Pr(y | x, model), averaged over queries
    correct: np.ndarray    # [m, N] bool, argmax of the identity query == y
    keep: np.ndarray       # [m, N] bool membership
    model_ids: np.ndarray  # [m] int64, ascending


def signals(logits: np.ndarray, labels: np.ndarray, identity_query: int = 0,
            chunk: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(phi [m,N,Q], logp [m,N], correct [m,N]) from logits [m,N,Q,C]; `chunk` models at a
    time, so no float64 copy of the whole logits array is ever made."""
    m, n, q, _ = logits.shape
    phi, logp, correct = np.empty((m, n, q)), np.empty((m, n)), np.empty((m, n), bool)
    for a in range(0, m, chunk):
        part = logits[a:a + chunk]
        phi[a:a + chunk] = logit_margin(part, labels[None, :, None])
        # log of the query-mean probability of the label
        logp[a:a + chunk] = np.logaddexp.reduce(log_prob_from_margin(phi[a:a + chunk]), axis=2)
        correct[a:a + chunk] = part[:, :, identity_query].argmax(axis=-1) == labels[None, :]
    return phi, logp - np.log(q), correct


def load_shadow(paths: list[Path], labels: np.ndarray, identity_query: int = 0) -> Signals:
    """Read shadow shards, check them, and return their signals sorted by model id.

    Raises InputError (one line, naming the file) on a missing or unreadable shard,
    inconsistent shapes, non-finite logits or duplicate model ids.
    """
    fields = ("model_ids", "keep", "phi", "logp", "correct")
    parts, shape = [], None
    for path in paths:
        z = load_npz(path, ("logits", "keep", "model_ids"))
        lg, keep, ids = z["logits"], z["keep"], z["model_ids"]
        m = ids.shape[0] if ids.ndim == 1 else -1
        if lg.ndim != 4 or keep.shape != (m, labels.size) or lg.shape[:2] != (m, labels.size):
            raise InputError(f"{path}: logits {lg.shape}, keep {keep.shape}, model_ids "
                             f"{ids.shape} do not fit [m, N={labels.size}, Q, C], [m, N], [m]")
        if shape is not None and lg.shape[2:] != shape:
            raise InputError(f"{path}: queries x classes {lg.shape[2:]} differ from {shape} "
                             f"in {paths[0]}")
        if keep.dtype != bool:
            raise InputError(f"{path}: keep is {keep.dtype}, expected bool")
        if not np.isfinite(lg).all():
            bad = ids[~np.isfinite(lg).reshape(m, -1).all(axis=1)]
            raise InputError(f"{path}: non-finite logits from models {bad.tolist()}")
        if labels.min() < 0 or labels.max() >= lg.shape[3]:
            raise InputError(f"{path}: {lg.shape[3]} classes, but labels span "
                             f"[{labels.min()}, {labels.max()}]")
        shape = lg.shape[2:]
        parts.append(dict(zip(fields, (ids.astype(np.int64), keep,
                                       *signals(lg, labels, identity_query)))))
    if not parts:
        raise InputError("no shadow shards given")
    ids = np.concatenate([p["model_ids"] for p in parts])
    uniq, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise InputError(f"duplicate model ids {uniq[counts > 1].tolist()} across "
                         f"{[str(p) for p in paths]}")
    order = np.argsort(ids)  # global id order, never file order
    return Signals(**{f: np.concatenate([p[f] for p in parts])[order] for f in fields})


def memorization(correct: np.ndarray,
                 keep: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Feldman-Zhang score [N]: accuracy over IN models minus over OUT models (all models,
    not leave-one-out), with the IN and OUT model counts; nan where a count is 0."""
    n_in, n_out = keep.sum(0), (~keep).sum(0)
    with np.errstate(invalid="ignore", divide="ignore"):
        acc_in = (correct & keep).sum(0) / n_in
        acc_out = (correct & ~keep).sum(0) / n_out
    return acc_in - acc_out, n_in, n_out
