"""What to use instead of BN: every arm against plain BatchNorm at matched held-out
accuracy, with empirical ε beside the AUC (issue: DP-SGD and empirical ε).

- `endpoint_epsilons`: per arm and annealed endpoint, the empirical ε lower bound
  (bnmem.attack.epsilon, 95 % Clopper–Pearson, simultaneous over thresholds, trials
  treated as independent) of the headline attack's scores on all samples and on the most vulnerable subsets (flipped,
  OOD), at dp.delta.
- `table`: for every arm but batchnorm, arm - batchnorm of AUC and TPR at FPR 1e-3 at the
  primary criterion (matched held-out accuracy, Pareto frontiers between annealed
  endpoints: bnmem.attack.frontier.compare, intervals over shadow models and samples), and
  each arm's empirical ε at the same held-out accuracy (the least over its real endpoints
  at or above it: bounds are not interpolated), with the DP arms' accountant ε.
"""
from __future__ import annotations

import numpy as np

from bnmem.attack import frontier, intervals
from bnmem.attack.epsilon import arm_epsilon
from bnmem.attack.lira import loo_lira
from bnmem.core.kinds import FLIPPED, HEADLINE, OOD

BASE = "batchnorm"


def subsets(kind: np.ndarray) -> dict[str, np.ndarray]:
    return {"all": np.ones(kind.size, bool), "flipped": kind == FLIPPED, "ood": kind == OOD}


def endpoint_scores(data: dict, final_scores: np.ndarray, variant: str,
                    one_sided: bool) -> list[np.ndarray]:
    """Per endpoint (budgets, then the train.epochs run): the headline attack's scores
    [m, N] (every model the target once, balanced leave-one-pair-out)."""
    return [loo_lira(b["phi"], b["keep"], b["model_ids"], one_sided, (variant,))[variant]
            for b in data["budgets"]] + [final_scores]


def endpoint_epsilons(data: dict, scores: list[np.ndarray], kind: np.ndarray,
                      delta: float) -> list[dict[str, dict]]:
    """Per endpoint (`endpoint_scores`' order): {subset: epsilon_lower_bound}."""
    rows = subsets(kind)
    return [arm_epsilon(s, data["keep"], rows, delta) for s in scores]


def mitigation_pairs(arms: list[str]) -> list[tuple[str, str]]:
    """(arm, batchnorm) for every other arm, when BN and at least one other arm are run."""
    return [(a, BASE) for a in arms if a != BASE] if BASE in arms else []


def compare_pairs(ends: dict[str, list], plan, arms: list[str], known: dict) -> dict:
    """frontier.compare of every mitigation pair (reusing `known` results, keyed
    "<a>_minus_<b>"), cut to the primary criterion's AUC and TPR at FPR 1e-3."""
    out = {}
    for a, b in mitigation_pairs(arms):
        key = f"{a}_minus_{b}"
        full = known.get(key) or frontier.compare(ends[a], ends[b], intervals.for_arms(plan, a, b))
        c = full["criteria"][frontier.PRIMARY]
        out[key] = {"level": c["level"],
                    **{f: {**c["figures"][f]["at_common"],
                           "arms_at_common": c["figures"][f]["arms_at_common"],
                           **({"support_at_common": c["figures"][f]["support_at_common"]}
                              if "support_at_common" in c["figures"][f] else {})}
                       for f in ("auc_all", "tpr_low_all")}}
    return out


def table(mitigations: dict, endpoints: dict[str, list[dict]], epsilons: dict[str, list],
          accountant: dict[str, dict | None]) -> list[dict]:
    """One row per arm against BN: the compared figures, the matched held-out accuracy,
    whether the two arms' held-out accuracy ranges overlap at all (else the common point
    is the lower arm's best and BN's value there is its least leaky endpoint above it),
    each side's empirical ε there (the least over its real endpoints at or above that
    accuracy: no interpolation, a bound is no linear quantity), the DP arm's accountant."""
    rows = []
    for key, m in mitigations.items():
        arm = key[: -len(f"_minus_{BASE}")]
        level = m["level"]
        u = {side: [e["out_acc_clean"]["value"] for e in endpoints[side]] for side in (arm, BASE)}
        eps = {side: {sub: least_at(u[side], [e[sub]["epsilon_lo"] for e in epsilons[side]], level)
                      for sub in HEADLINE} for side in (arm, BASE)}
        overlap = (None if any(v is None for v in u[arm] + u[BASE]) else
                   bool(min(max(u[arm]), max(u[BASE])) > max(min(u[arm]), min(u[BASE]))))
        rows.append({"arm": arm, "heldout": level, "overlap": overlap, "auc_all": m["auc_all"],
                     "tpr_low_all": m["tpr_low_all"], "epsilon_lo": eps[arm],
                     "epsilon_lo_base": eps[BASE], "accountant": accountant.get(arm)})
    return rows


def least_at(u: list, y: list, level: float | None) -> float | None:
    """The least y among endpoints whose utility u is at or above `level` (None if none)."""
    if level is None or not np.isfinite(level):
        return None
    vals = [b for a, b in zip(u, y) if a is not None and b is not None and a >= level - 1e-12]
    return float(min(vals)) if vals else None


def accountant_summary(shards: list) -> dict | None:
    """The DP arm's accountant, from its shards' dp_epsilon / dp_noise_multiplier [m,
    endpoints]: per endpoint the range over its shadow models; None for a non-DP arm."""
    from bnmem.core.io import load_npz
    parts = [load_npz(p, ("model_ids",)) for p in shards]
    if not all("dp_epsilon" in z for z in parts):
        return None
    eps = np.concatenate([z["dp_epsilon"] for z in parts])
    sub = np.concatenate([z["dp_epsilon_substitution"] for z in parts])
    sig = np.concatenate([z["dp_noise_multiplier"] for z in parts])
    return {"epsilon_max": eps.max(0).tolist(), "epsilon_min": eps.min(0).tolist(),
            # replace-one: the attack's in/out relation, what the empirical ε is held to
            "epsilon_substitution_max": sub.max(0).tolist(),
            "noise_multiplier_min": sig.min(0).tolist(),
            "noise_multiplier_max": sig.max(0).tolist()}
