"""Recipes: the validated config one arm's stages (or the whole run) need, as a plain dict
that DVC hashes, and the runs a config implies (annealed budgets, the identity view)."""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from bnmem.core.config import EXECUTION_KEYS, Config, ConfigError, arm_epsilon, dp_arm


def budget_epochs(cfg: Config) -> tuple[int, ...]:
    """The extra annealed endpoints: shadow.budgets below train.epochs (a budget at or above
    it is the train.epochs run itself, already an endpoint; so `-S train.epochs=2` keeps
    working with the default [1, 2, 4])."""
    return tuple(b for b in cfg.shadow.budgets if b < cfg.train.epochs)


def budget_recipe(cfg: Config, epochs: int) -> Config:
    """The recipe of a complete run of `epochs` epochs: the schedule (warm-up included)
    scaled to the budget, nothing else changed."""
    t = cfg.train
    warm = math.floor(t.warmup_epochs * epochs / t.epochs + 0.5) if t.warmup_epochs else 0
    return dataclasses.replace(cfg, train=dataclasses.replace(
        t, epochs=epochs, checkpoints=(), warmup_epochs=min(warm, epochs - 1)))


def arm_recipe(cfg: Config, arm: str) -> dict:
    """The full, validated config one arm's stages need, as a plain dict.

    Knobs that cannot affect this arm are reset to their defaults (reg_strength and reg for
    every arm but batchnorm_reg; `arms` becomes [arm]), so changing them leaves this
    recipe byte-identical and DVC reruns only the arms they touch.
    """
    if arm not in cfg.arms:
        raise ConfigError(f"arms: {arm!r} is not in arms {list(cfg.arms)}")
    raw = dataclasses.asdict(cfg)
    raw["arms"] = [arm]
    raw["seeds"] = []  # replicate stages pass their seed explicitly
    for key in EXECUTION_KEYS:  # where shadows run is not what they compute
        del raw["shadow"][key]
    default = Config()
    raw["audit"]["top_k"] = default.audit.top_k  # exposure / report only: no retraining
    raw["audit"]["target_arm"] = default.audit.target_arm
    raw["audit"]["target_weights"] = raw["audit"]["members"] = None
    if arm != "batchnorm_reg":
        raw["reg_strength"] = default.reg_strength
        raw["reg"] = dataclasses.asdict(default.reg)
    if dp_arm(arm):  # the recipe states the ε its accountant targets
        raw["dp"]["epsilon"] = arm_epsilon(cfg, arm)
    else:  # dp.* touches no other arm's models (the attack stage reads dp.delta from all.yaml)
        raw["dp"] = dataclasses.asdict(default.dp)
    return _plain(raw)


def pipeline_recipe(cfg: Config) -> dict:
    """The full, validated config of the whole run as a plain dict, every key resolved (the
    defaults included) but where shadows run (EXECUTION_KEYS): configure writes it as
    data/recipes/all.yaml, and the stages that read every arm (attack, exposure, report)
    read it instead of params.yaml, so switching shadow.backend leaves them up to date."""
    raw = dataclasses.asdict(cfg)
    for key in EXECUTION_KEYS:
        del raw["shadow"][key]
    return _plain(raw)


def _plain(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_plain(i) for i in v]
    if isinstance(v, dict):
        return {k: _plain(i) for k, i in v.items()}
    return v


def identity_index(queries: tuple[str, ...] | list[str]) -> int:
    """Which query view is the unaugmented image: `identity`'s position in shadow.queries
    (the first view when the list has none). Per-epoch tracking, memorization and the
    exposure null read this view only."""
    return list(queries).index("identity") if "identity" in queries else 0
