"""Recipes: the validated config one arm's stages (or the whole run) need, as a plain dict
that DVC hashes, and the runs a config implies (annealed budgets, the identity view)."""
from __future__ import annotations

import dataclasses
from typing import Any

from bnmem.core.config import EXECUTION_KEYS, Config, ConfigError, arm_epsilon, dp_arm


def tracked_epochs(cfg: Config) -> tuple[int, ...]:
    """The epochs after which shadow.track_epochs queries every shadow model (identity
    view): every epoch, or (shadow.track_at: checkpoints) the first epoch, train.checkpoints
    below train.epochs and the final epoch; () without tracking. Without annealed
    endpoints (no shadow.budgets below train.epochs) the within-run curve is what matched
    fit is judged on, so it is recorded at every epoch whatever track_at says."""
    if not cfg.shadow.track_epochs:
        return ()
    every = range(1, cfg.train.epochs + 1)
    if cfg.shadow.track_at == "every" or not budget_epochs(cfg):
        return tuple(every)
    return tuple(e for e in every
                 if e == 1 or e in cfg.train.checkpoints or e == cfg.train.epochs)


def budget_epochs(cfg: Config) -> tuple[int, ...]:
    """The extra annealed endpoints: shadow.budgets below train.epochs (a budget at or above
    it is the train.epochs run itself, already an endpoint; so `-S train.epochs=2` keeps
    working with the default [1, 2, 4])."""
    return tuple(b for b in cfg.shadow.budgets if b < cfg.train.epochs)


def budget_recipe(cfg: Config, epochs: int) -> Config:
    """The recipe of a complete run of `epochs` epochs: the same recipe with a shorter
    schedule (the cosine spans the budget), nothing else changed. Warm-up keeps its length
    in epochs, at most half the budget: what it guards against, divergence in the first
    steps at the full learning rate, depends on how many steps run at that rate, not on
    the schedule's length (scaling it with the budget rounded a 1-epoch warm-up of a
    12-epoch recipe to none for budgets 1, 2 and 4, and the no-norm ResNet diverged)."""
    t = cfg.train
    warm = min(t.warmup_epochs, epochs / 2) if t.warmup_epochs else t.warmup_epochs
    return dataclasses.replace(cfg, train=dataclasses.replace(
        t, epochs=epochs, checkpoints=(), warmup_epochs=warm))


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
