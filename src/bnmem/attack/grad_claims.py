"""The gradient-norm claims with training randomness: per-sample gradient norms (eval
definition) of `shadow.grad_models` shadow models of every arm, one per complementary pair
(ids 0, 2, 4, ...: different pairs are independent halves of the pool), at every annealed
endpoint (bnmem.train.shadow), so "flipped samples have larger gradient norms under BN" is judged
over several training runs, at equal epochs and at matched held-out accuracy.

Per model j and endpoint: the ratio median(norm | IN flipped) / median(norm | IN clean) on the
samples the model trained on (as the target model, trained on all of them). Arms are paired
by model id (same keep mask and seeds), so per j the ratio of ratios arm / base is one
training run's measurement; at matched held-out accuracy every model's log ratio is read
where its arm's mean held-out accuracy reaches one common level (the lower of the two arms'
best), linear between endpoints in budget order (a ratio is no leakage: no Pareto minimum). The estimate is the geometric mean over the g models with a
t-interval on the log scale (g - 1 degrees of freedom): the spread between training runs
(which also carries their different samples) is the interval's whole source.
"""
from __future__ import annotations

import numpy as np

from bnmem.core.kinds import CLEAN
from bnmem.core.io import InputError, load_npz
from bnmem.attack.matched import at_fit


def load_norms(paths: list) -> tuple[np.ndarray, np.ndarray] | None:
    """(grad_norms [g, E, N] in model-id order, their ids [g]) over an arm's shards; None
    when the shards hold none (shadow.grad_models: 0)."""
    parts = [load_npz(p, ("model_ids",)) for p in paths]
    have = [z for z in parts if "grad_norms" in z]
    if not have:
        return None
    norms = np.concatenate([z["grad_norms"] for z in have])
    ids = np.concatenate([z["grad_model_ids"] for z in have])
    if norms.ndim != 3 or norms.shape[0] != ids.size or np.isinf(norms).any():
        raise InputError(f"{paths[0]}: grad_norms {norms.shape} malformed or infinite; "
                         "re-run the shadow stage")
    order = np.argsort(ids)
    return norms[order], ids[order]


def ratios(norms: np.ndarray, keep: np.ndarray, kind: np.ndarray, code: int) -> np.ndarray:
    """[g, E]: median(norm | IN & kind) / median(norm | IN & clean) per model and endpoint;
    nan where a model has no IN sample of the kind. `keep` [g, N]: those models' rows."""
    out = np.full(norms.shape[:2], np.nan)
    for j in range(norms.shape[0]):
        sk, sc = keep[j] & (kind == code), keep[j] & (kind == CLEAN)
        if sk.any() and sc.any():
            nk, nc = norms[j][:, sk], norms[j][:, sc]
            if np.isnan(nk).any() or np.isnan(nc).any():
                raise InputError("grad_norms: nan on a model's IN sample; re-run the shadow stage")
            out[j] = np.median(nk, 1) / np.median(nc, 1)
    return out


def heldout(correct: list[np.ndarray], keep: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """[g, E]: each model's accuracy on the clean samples it did not train on, per endpoint
    (`correct`: per endpoint, [g, N] bool with the training labels)."""
    sel = ~keep & (kind == CLEAN)[None]
    return np.stack([(c & sel).sum(1) / sel.sum(1) for c in correct], axis=1)


def _geo(logs: np.ndarray) -> dict:
    """Geometric mean and t-interval (95 %, log scale) over models, with its df (models - 1,
    so that a claim's p-value reads the t it was built with: verdict.Evidence); None values
    if any is nan."""
    logs = np.asarray(logs, float)
    if logs.size < 2 or not np.isfinite(logs).all():
        return {"value": None, "lo": None, "hi": None, "interval": "models", "models": int(logs.size)}
    m, se = logs.mean(), logs.std(ddof=1) / np.sqrt(logs.size)
    # Student's t quantile: stdtrit is scipy.stats.t.ppf bit for bit (tests/test_grad_claims.py)
    from scipy.special import stdtrit
    h = stdtrit(logs.size - 1, 0.975) * se
    return {"value": float(np.exp(m)), "lo": float(np.exp(m - h)), "hi": float(np.exp(m + h)),
            "df": int(logs.size - 1), "interval": "models", "models": int(logs.size)}


def _position(u: np.ndarray, level: float) -> float:
    """The fractional endpoint index (0-based, budget order) where the arm's mean held-out
    accuracy `u` [E] first reaches `level`, linear between endpoints; nan if it never does."""
    return at_fit(u, np.arange(u.size, dtype=float), level)[0]


def compare(ra: np.ndarray, ua: np.ndarray, rb: np.ndarray, ub: np.ndarray) -> dict:
    """Ratio of ratios a / b over the paired models: at the train.epochs endpoint and at
    matched held-out accuracy: one common level for every model (the lower of the two
    arms' best mean held-out accuracies), where each arm's mean reaches it (fractional
    endpoint, budget order), each model's log ratio read there (module docstring)."""
    la, lb = np.log(ra), np.log(rb)
    equal = la[:, -1] - lb[:, -1]
    ma, mb = ua.mean(0), ub.mean(0)
    level = float(min(ma.max(), mb.max()))
    ta, tb = _position(ma, level), _position(mb, level)
    if np.isfinite(ta) and np.isfinite(tb):
        e = np.arange(la.shape[1], dtype=float)
        matched = np.array([np.interp(ta, e, la[j]) - np.interp(tb, e, lb[j])
                            for j in range(la.shape[0])])
    else:
        matched = np.full(la.shape[0], np.nan)
    return {"equal_epochs": _geo(equal),
            "matched_heldout": {**_geo(matched), "level": level, "positions": [ta, tb]}}
