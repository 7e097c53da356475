"""Replicates over training seeds: each seed's headline figures per arm, the arm - base
deltas per seed, and their mean with a 95 % t-interval across seeds.

The pool (split and corruption) is fixed by `seed`; a replicate changes what training
randomness changes: the init, the batch order, and the shadow models' seeds and keep
masks. Bootstrap CIs elsewhere in the report are over pool samples within one run; the
intervals here are over runs, so they include seed-to-seed variation.
"""
from __future__ import annotations

import math

import numpy as np

from bnmem.core.kinds import SUBSETS as KIND_SUBSETS
from bnmem.attack.matched import at_fit, common_fit

SUBSETS = tuple(KIND_SUBSETS)
TRAIN_KEYS = ("clean_train_acc", "flipped_mem_acc", "ood_mem_acc", "test_acc")


def arm_record(history: list[dict], grads: dict, lira: dict, shadow_curve: list[dict] | None,
               gamma: dict | None) -> dict:
    """One arm's figures in one seed, as the report and the replicate stage both build them.

    Args:
        history: the target model's per-epoch records (train stage curves).
        grads: `bnmem.grads.summary.summarize` of the final-epoch norms (configured definition).
        lira: the headline attack's metrics {subset: {"auc", "tpr_at_fpr_1e-3", ...}}.
        shadow_curve: the shadows' per-epoch {"fit", "auc_all", ...} lists, or None.
        gamma: `bnmem.report.summary.gamma_sigma_summary` of the target model, or None.
    """
    curve = [{k: _num(r.get(k)) for k in ("epoch", *TRAIN_KEYS)} for r in history]
    return {"final": {k: _num(history[-1].get(k)) for k in TRAIN_KEYS}, "curve": curve,
            "grad_ratio_flipped_clean": grads.get("ratio_flipped_clean"),
            "lira_auc": {s: (lira.get(s) or {}).get("auc") for s in SUBSETS},
            "lira_tpr_at_fpr_1e-3": (lira.get("all") or {}).get("tpr_at_fpr_1e-3"),
            "shadow_curve": shadow_curve, "gamma_sigma": gamma}


def _num(v):
    """None for an absent value (the curves CSV holds NaN where a kind is absent)."""
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def _sub(a, b):
    return None if a is None or b is None else a - b


def seed_deltas(records: dict[str, dict], arm: str, base: str) -> dict[str, float | None]:
    """arm - base for one seed: final memorization and accuracy, LiRA AUC per subset and
    TPR@1e-3, the gradient ratio of ratios (arm / base), and both matched-utility views
    (target models: flipped_mem_acc; shadows: LiRA AUC, identity query), matched over
    all arms of `records` as in the single-seed report."""
    a, b = records[arm], records[base]
    out = {k: _sub(a["final"][k], b["final"][k]) for k in TRAIN_KEYS}
    out.update({f"auc_{s}": _sub(a["lira_auc"][s], b["lira_auc"][s]) for s in SUBSETS})
    out["tpr_at_fpr_1e-3_all"] = _sub(a["lira_tpr_at_fpr_1e-3"], b["lira_tpr_at_fpr_1e-3"])
    ra, rb = a["grad_ratio_flipped_clean"], b["grad_ratio_flipped_clean"]
    out["grad_ratio_flipped_clean_ratio"] = ra / rb if ra and rb else None
    fa, fb = ([r["clean_train_acc"] for r in records[k]["curve"]] for k in (arm, base))
    target = common_fit(fa, fb)
    va, vb = ([r["flipped_mem_acc"] if r["flipped_mem_acc"] is not None else np.nan
               for r in records[k]["curve"]] for k in (arm, base))
    out["matched_flipped_mem_acc"] = _finite(at_fit(fa, va, target)[0] - at_fit(fb, vb, target)[0])
    ca, cb = records[arm]["shadow_curve"], records[base]["shadow_curve"]
    if ca and cb:  # shadows: headline attack (identity query) at their common fit
        t = common_fit(ca["fit"], cb["fit"])
        out["matched_auc_all"] = _finite(at_fit(ca["fit"], ca["auc_all"], t)[0]
                                         - at_fit(cb["fit"], cb["auc_all"], t)[0])
    else:
        out["matched_auc_all"] = None
    return out


def _finite(v: float) -> float | None:
    return float(v) if np.isfinite(v) else None


def across_seeds(per_seed: dict[int, dict[str, float | None]]) -> dict[str, dict]:
    """{key: {mean, lo, hi, sd, n, values}}: mean over seeds with a Student-t 95 % CI
    (lo/hi are None with fewer than two seeds, or where a seed lacks the value); values
    is {"seed_<s>": value} so DVC shows each seed as its own metric. A ratio (a key ending
    in "_ratio", e.g. BN's / none's median norm ratio) is averaged on the log scale: its
    mean is the geometric mean, its interval exp(mean log ± t sd / sqrt(n)) and its sd the
    log values' ("scale": "log"), so the interval is symmetric on the scale the claims read
    ratios on (`verdict.p_values(log=True)`); a non-positive ratio has no mean or interval."""
    keys = next(iter(per_seed.values())).keys()
    out = {}
    for key in keys:
        vals = [d[key] for d in per_seed.values()]
        named = {f"seed_{s}": d[key] for s, d in per_seed.items()}
        if any(v is None for v in vals):
            out[key] = {"mean": None, "lo": None, "hi": None, "sd": None, "n": len(vals),
                        "values": named}
            continue
        v = np.asarray(vals, dtype=float)
        log = key.endswith("_ratio")
        if log and not (v > 0).all():
            out[key] = {"mean": None, "lo": None, "hi": None, "sd": None, "n": v.size,
                        "values": named}  # a ratio that is not positive: no mean on its scale
            continue
        u = np.log(v) if log else v
        mean, n = float(u.mean()), v.size
        if n > 1:
            sd = float(u.std(ddof=1))
            from scipy import stats  # here: scipy.stats is ~0.4 s of the report's start
            half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)
            lo, hi = mean - half, mean + half
        else:
            sd = lo = hi = None
        if log:
            mean, lo, hi = math.exp(mean), *(None if x is None else math.exp(x) for x in (lo, hi))
        out[key] = {"mean": mean, "lo": lo, "hi": hi, "sd": sd, "n": n, "values": named,
                    **({"scale": "log"} if log else {})}
    return out
