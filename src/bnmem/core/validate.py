"""Range and cross-field checks of a built Config (`validate`): every bad key raises one
ConfigError line naming the key, the value and what would be valid."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from bnmem.core.config import (
    ACCOUNTANTS, ARCHS, ARMS, BACKENDS, DATASETS, DEVICES, FACTORY_RE, GRAD_DEFINITIONS, INITS,
    INTERVAL_PROCEDURES, OTHER_DEFINITION, QUERY_RE, SCHEDULES, TRACK_AT, Config, ConfigError,
    user_dataset, valid_arm,
)


def _check(ok: bool, key: str, valid: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: {value!r} is invalid; valid: {valid}")


def validate(cfg: Config) -> Config:
    """Range and cross-field checks; raises ConfigError on the first bad key."""
    _check(cfg.dataset in DATASETS or cfg.dataset.endswith(".npz") or "/" in cfg.dataset
           or Path(cfg.dataset).is_dir(), "dataset",
           f"{' | '.join(DATASETS)} | a .npz file | an ImageFolder directory", cfg.dataset)
    _check(cfg.arch in ARCHS or bool(FACTORY_RE.match(cfg.arch)), "arch",
           f"{' | '.join(ARCHS)} | <module>:<function> (your own model factory)", cfg.arch)
    d = cfg.data
    if user_dataset(cfg.dataset):
        _check(d.num_classes is not None and d.num_classes >= 2, "data.num_classes",
               "an integer >= 2 (required for your own dataset)", d.num_classes)
    else:
        _check(d.num_classes is None, "data.num_classes",
               f"null for the built-in {cfg.dataset} (its own class count)", d.num_classes)
    _check(d.image_size is None or d.image_size >= 4, "data.image_size", "null or an integer >= 4",
           d.image_size)
    _check(d.channels in (1, 3), "data.channels", "1 | 3", d.channels)
    _check(cfg.audit.top_k >= 1, "audit.top_k", "an integer >= 1", cfg.audit.top_k)
    _check((cfg.audit.model_file is not None) == (":" in cfg.arch), "audit.model_file",
           "the path of the file defining arch's factory (only with a factory arch)",
           cfg.audit.model_file)
    _check(valid_arm(cfg.audit.target_arm), "audit.target_arm",
           " | ".join(ARMS) + " | groupnorm_dp_eps<E>", cfg.audit.target_arm)
    _check(cfg.audit.target_weights is None or cfg.noise_rate == cfg.ood_rate == 0,
           "noise_rate / ood_rate", "0 and 0 when audit.target_weights is set (your model "
           "trained on your labels and images, not on bnmem's corrupted copies)",
           [cfg.noise_rate, cfg.ood_rate])
    _check(cfg.audit.members is None or cfg.audit.target_weights is not None, "audit.members",
           "null unless audit.target_weights is set (members of your trained model)",
           cfg.audit.members)
    arm_names = f"{', '.join(ARMS)}, groupnorm_dp_eps<E> (E an integer >= 1)"
    _check(len(cfg.arms) > 0, "arms", f"a non-empty list of {arm_names}", list(cfg.arms))
    for arm in cfg.arms:
        _check(valid_arm(arm), "arms", f"a list of {arm_names}", arm)
    _check(len(set(cfg.arms)) == len(cfg.arms), "arms", "a list without repeats", list(cfg.arms))
    _check(0 <= cfg.noise_rate < 1, "noise_rate", "a number in [0, 1)", cfg.noise_rate)
    _check(0 <= cfg.ood_rate < 1, "ood_rate", "a number in [0, 1)", cfg.ood_rate)
    _check(cfg.noise_rate + cfg.ood_rate < 1, "noise_rate + ood_rate", "a sum below 1",
           cfg.noise_rate + cfg.ood_rate)
    _check(cfg.reg_strength >= 0, "reg_strength", "a number >= 0", cfg.reg_strength)
    _check(cfg.seed >= 0, "seed", "an integer >= 0", cfg.seed)
    _check(all(v >= 0 for v in cfg.seeds), "seeds", "a list of integers >= 0", list(cfg.seeds))
    _check(len(set(cfg.seeds)) == len(cfg.seeds) and cfg.seed not in cfg.seeds, "seeds",
           f"distinct extra seeds, none equal to seed={cfg.seed}", list(cfg.seeds))
    _check(cfg.pool_size >= 20 or (cfg.pool_size == 0 and user_dataset(cfg.dataset)), "pool_size",
           "an integer >= 20 (0 = every training image, for your own dataset)", cfg.pool_size)
    _check(cfg.data.test_size >= 10, "data.test_size", "an integer >= 10", cfg.data.test_size)
    _check(cfg.model.width >= 1, "model.width", "an integer >= 1", cfg.model.width)
    _check(cfg.model.init in INITS, "model.init", " | ".join(INITS), cfg.model.init)
    _check(not cfg.model.zero_init_residual or cfg.arch in ("resnet", "resnet_cpu"),
           "model.zero_init_residual",
           "false unless arch is resnet or resnet_cpu (the zoo's residual architectures)",
           cfg.model.zero_init_residual)
    t = cfg.train
    _check(t.epochs > 0, "train.epochs", "an integer > 0", t.epochs)
    _check(t.batch_size >= 2, "train.batch_size", "an integer >= 2 (BN needs two samples)",
           t.batch_size)
    _check(t.lr > 0, "train.lr", "a number > 0", t.lr)
    _check(0 <= t.momentum < 1, "train.momentum", "a number in [0, 1)", t.momentum)
    _check(t.weight_decay >= 0, "train.weight_decay", "a number >= 0", t.weight_decay)
    _check(t.schedule in SCHEDULES, "train.schedule", " | ".join(SCHEDULES), t.schedule)
    _check(0 <= t.warmup_epochs < t.epochs, "train.warmup_epochs",
           f"a number in [0, train.epochs={t.epochs})", t.warmup_epochs)
    _check(all(1 <= e <= t.epochs for e in t.checkpoints), "train.checkpoints",
           f"epochs in [1, train.epochs={t.epochs}]", list(t.checkpoints))
    _check(t.device in DEVICES, "train.device", " | ".join(DEVICES), t.device)
    _check(t.threads >= 0, "train.threads", "an integer >= 0", t.threads)
    _check(cfg.reg.target > 0, "reg.target", "a number > 0", cfg.reg.target)
    g = cfg.grads
    _check(g.definition in GRAD_DEFINITIONS, "grads.definition", " | ".join(GRAD_DEFINITIONS),
           g.definition)
    _check(g.other_definition in OTHER_DEFINITION, "grads.other_definition",
           " | ".join(OTHER_DEFINITION), g.other_definition)
    _check(g.chunk_size >= 1, "grads.chunk_size", "an integer >= 1", g.chunk_size)
    _check(g.workers >= 1, "grads.workers", "an integer >= 1", g.workers)
    s = cfg.shadow
    # balanced leave-one-out keeps n_models/2 - 1 shadows per side; LiRA needs 2 for a spread
    _check(s.n_models >= 6 and s.n_models % 2 == 0, "shadow.n_models", "an even integer >= 6",
           s.n_models)
    _check(s.shards >= 1 and s.n_models % s.shards == 0, "shadow.shards",
           f"a positive divisor of shadow.n_models={s.n_models}", s.shards)
    _check(list(s.shard_ids) == list(range(s.shards)), "shadow.shard_ids",
           f"{list(range(s.shards))} (0 .. shadow.shards-1)", list(s.shard_ids))
    _check(len(s.queries) > 0, "shadow.queries", "a non-empty list", list(s.queries))
    for q in s.queries:
        _check(bool(QUERY_RE.match(q)), "shadow.queries", "identity | hflip | shift_<dx>_<dy>", q)
    _check(s.workers >= 1, "shadow.workers", "an integer >= 1", s.workers)
    _check(s.chunk >= 1, "shadow.chunk", "an integer >= 1", s.chunk)
    _check(s.grad_models >= 0 and s.grad_models != 1, "shadow.grad_models",
           "0 or an integer >= 2 (models, one per complementary pair; at most "
           "shadow.n_models / 2 are used)", s.grad_models)
    _check(s.track_at in TRACK_AT, "shadow.track_at", " | ".join(TRACK_AT), s.track_at)
    _check(all(b >= 1 for b in s.budgets) and list(s.budgets) == sorted(set(s.budgets)),
           "shadow.budgets", "increasing epoch counts >= 1, e.g. [1, 2, 4]; [] = no frontier",
           list(s.budgets))
    _check(s.backend in BACKENDS, "shadow.backend", " | ".join(BACKENDS), s.backend)
    for name, amount in s.resources.items():
        _check(amount > 0, f"shadow.resources.{name}", "a number > 0 (an amount of a resource "
               "the Dask workers were started with, e.g. --resources GPU=1)", amount)
    _check(s.retries >= 0, "shadow.retries", "an integer >= 0", s.retries)
    tls = dataclasses.asdict(s.tls)
    _check(all(v is None for v in tls.values()) or all(v is not None for v in tls.values()),
           "shadow.tls", "all of ca_file, cert, key, or none of them (Dask's own config)", tls)
    a = cfg.attack
    _check(a.rmia_gamma >= 1, "attack.rmia_gamma", "a number >= 1", a.rmia_gamma)
    _check(0 <= a.rmia_a <= 1, "attack.rmia_a", "a number in [0, 1]", a.rmia_a)
    _check(a.rmia_population >= 1, "attack.rmia_population", "an integer >= 1",
           a.rmia_population)
    _check(a.bootstrap >= 10, "attack.bootstrap", "an integer >= 10", a.bootstrap)
    _check(a.model_bootstrap >= 20, "attack.model_bootstrap", "an integer >= 20",
           a.model_bootstrap)
    _check(a.null_masks >= 1, "attack.null_masks", "an integer >= 1", a.null_masks)
    _check(a.interval in INTERVAL_PROCEDURES, "attack.interval",
           " | ".join(INTERVAL_PROCEDURES), a.interval)
    dp = cfg.dp
    _check(dp.epsilon > 0, "dp.epsilon", "a number > 0", dp.epsilon)
    _check(0 < dp.delta < 1, "dp.delta", "a number in (0, 1), e.g. 1e-5 (below 1 / pool_size)",
           dp.delta)
    _check(dp.max_grad_norm > 0, "dp.max_grad_norm", "a number > 0", dp.max_grad_norm)
    _check(dp.accountant in ACCOUNTANTS, "dp.accountant", " | ".join(ACCOUNTANTS), dp.accountant)
    _check(0 <= cfg.report.fit_rule <= 1, "report.fit_rule", "a number in [0, 1]",
           cfg.report.fit_rule)
    return cfg
