"""params.yaml -> frozen, validated config objects.

Every value is checked once, here, so a stage fails with one line naming the key before
any output is touched. The library never opens params.yaml itself: stages call
`load_config(path)` and pass the typed sections down.
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DATASETS = ("fashion_mnist", "mnist", "cifar10", "cifar100")
ARCHS = ("lenet", "resnet", "densenet", "resnet_cpu", "densenet_cpu")  # *_cpu: CPU-sized (bnmem.models.zoo)
NORMS = ("none", "batchnorm", "groupnorm", "layernorm")
ARMS = ("none", "batchnorm", "batchnorm_reg", "groupnorm", "layernorm", "groupnorm_dp")
# DP-SGD arms (bnmem.train.dp): groupnorm_dp at dp.epsilon, groupnorm_dp_eps<E> at ε = E
DP_ARM_RE = re.compile(r"^groupnorm_dp(?:_eps([1-9]\d*))?$")
ACCOUNTANTS = ("prv", "rdp")  # Opacus' accountants (dp.accountant)
SCHEDULES = ("cosine", "constant", "step")
DEVICES = ("auto", "cpu", "cuda")
GRAD_DEFINITIONS = ("eval", "batch")
OTHER_DEFINITION = ("final", "every", "never")  # grads.other_definition; not "off" (YAML: false)
INITS = ("default", "kaiming")
BACKENDS = ("local", "dask")  # shadow.backend: where shadow chunks train (bnmem.train.scaleout)
# shadow.* keys that choose where and how shadows run, never what they compute: arm recipes
# leave them out (bnmem.core.recipes.arm_recipe), so changing them leaves every stage up to date
EXECUTION_KEYS = ("backend", "resources", "retries", "tls")
QUERY_RE = re.compile(r"^(identity|hflip|shift_-?\d+_-?\d+)$")
FACTORY_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")  # your own model: module:function


def user_dataset(name: str) -> bool:
    """True for a dataset read from your own file (.npz) or ImageFolder directory."""
    return name not in DATASETS


class ConfigError(ValueError):
    """A bad params value; the message is one line naming the key."""


def arm_norm(arm: str) -> str:
    """The normalization layer an arm uses (`batchnorm_reg` is BN plus a penalty, the DP
    arms GroupNorm trained with DP-SGD)."""
    if dp_arm(arm):
        return "groupnorm"
    return "batchnorm" if arm == "batchnorm_reg" else arm


def dp_arm(arm: str) -> bool:
    """Whether an arm trains with DP-SGD (groupnorm_dp, groupnorm_dp_eps<E>)."""
    return bool(DP_ARM_RE.match(arm))


def valid_arm(arm: str) -> bool:
    return arm in ARMS or dp_arm(arm)


def arm_epsilon(cfg: "Config", arm: str) -> float | None:
    """The target ε of a DP arm's accountant (groupnorm_dp_eps<E>: E; groupnorm_dp:
    dp.epsilon); None for an arm without DP."""
    m = DP_ARM_RE.match(arm)
    if not m:
        return None
    return float(m.group(1)) if m.group(1) else cfg.dp.epsilon


@dataclass(frozen=True)
class DataConfig:
    root: str | None = None
    test_size: int = 1000
    allow_download: bool = False
    num_classes: int | None = None  # your own data: required (labels 0 .. num_classes-1)
    image_size: int | None = None   # ImageFolder: images resized to image_size x image_size
    channels: int = 3               # ImageFolder: 1 (greyscale) or 3 (RGB)
    ood_source: str | None = None   # your own data: OOD images from a dataset name / .npz / folder


@dataclass(frozen=True)
class ModelConfig:
    width: int = 16
    zero_init_residual: bool = False  # resnet: every residual branch starts at zero
    init: str = "default"  # conv/linear weights: default (PyTorch's) | kaiming (He-normal)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 12
    batch_size: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    schedule: str = "cosine"
    warmup_epochs: float = 0  # linear warm-up of the learning rate over the first epochs
    checkpoints: tuple[int, ...] = (1,)
    device: str = "auto"
    threads: int = 1


@dataclass(frozen=True)
class RegConfig:
    target: float = 1.0


@dataclass(frozen=True)
class GradsConfig:
    definition: str = "eval"
    chunk_size: int = 256
    other_definition: str = "final"  # BN arms: the other definition at the final checkpoint | every | never
    workers: int = 2


@dataclass(frozen=True)
class TlsConfig:
    """Dask TLS files (bnmem.train.scaleout); all null: Dask's own config (distributed.comm.tls)."""
    ca_file: str | None = None
    cert: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class ShadowConfig:
    n_models: int = 16
    shards: int = 1
    shard_ids: tuple[int, ...] = (0,)
    queries: tuple[str, ...] = ("identity", "hflip")
    workers: int = 2
    chunk: int = 8
    track_epochs: bool = True
    # annealed endpoints: every shadow model is also trained as a complete run of each of
    # these epoch counts (own schedule), besides its train.epochs run (bnmem.attack.frontier;
    # counts at or above train.epochs are that run itself: `budget_epochs`)
    budgets: tuple[int, ...] = (1, 2, 4)
    # per-sample gradient norms (eval definition) of grad_models shadow models, one per
    # complementary pair (at most n_models / 2), at every endpoint: the gradient claims
    # over training runs (0 = none)
    grad_models: int = 4
    backend: str = "local"  # local | dask (the scheduler DASK_SCHEDULER_ADDRESS names)
    resources: dict[str, float] = field(default_factory=dict)  # dask: per task, e.g. {GPU: 0.25}
    retries: int = 2  # dask: times a chunk whose task raised is run again
    tls: TlsConfig = field(default_factory=TlsConfig)


INTERVAL_PROCEDURES = ("mixed", "both", "pairs", "samples", "sum", "twoway", "jackknife",
                       "jacksum")  # bnmem.attack.intervals


@dataclass(frozen=True)
class AttackConfig:
    offline_one_sided: bool = True
    rmia_gamma: float = 2.0
    rmia_a: float = 0.3
    rmia_population: int = 500
    bootstrap: int = 200  # sample-only resamples (every attack variant)
    model_bootstrap: int = 200  # draws over shadow pairs and samples (headline, matched fit)
    null_masks: int = 16  # fake balanced keep matrices of the real null (every variant)
    interval: str = "mixed"  # how the models+samples draws make an interval (bnmem.attack.intervals)


@dataclass(frozen=True)
class AuditConfig:
    top_k: int = 12                  # most exposed samples listed per arm
    model_file: str | None = None    # the file defining a factory `arch` (a DVC dependency)
    target_arm: str = "batchnorm"    # the arm whose recipe your own trained model follows
    target_weights: str | None = None  # your trained model's state_dict (.pt)
    members: str | None = None       # rows of your dataset it trained on (.npy / text)


@dataclass(frozen=True)
class DPConfig:
    epsilon: float = 8.0        # arm groupnorm_dp: the accountant's target ε (groupnorm_dp_eps<E>: E)
    delta: float = 1e-5         # δ of the DP arms' accountant and of every arm's empirical ε
    max_grad_norm: float = 1.0  # per-sample gradient clipping norm C
    accountant: str = "prv"     # prv | rdp (Opacus): finds the noise multiplier for ε over the run's steps


@dataclass(frozen=True)
class ReportConfig:
    fit_rule: float = 0.80  # target clean-train accuracy an arm needs for its comparisons to count


@dataclass(frozen=True)
class Config:
    dataset: str = "fashion_mnist"
    arch: str = "lenet"
    arms: tuple[str, ...] = ("none", "batchnorm", "batchnorm_reg")
    noise_rate: float = 0.05
    ood_rate: float = 0.01
    reg_strength: float = 1.0
    seed: int = 0
    seeds: tuple[int, ...] = ()
    pool_size: int = 2000
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    reg: RegConfig = field(default_factory=RegConfig)
    grads: GradsConfig = field(default_factory=GradsConfig)
    shadow: ShadowConfig = field(default_factory=ShadowConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    dp: DPConfig = field(default_factory=DPConfig)
    report: ReportConfig = field(default_factory=ReportConfig)


def _coerce(key: str, value: Any, tp: Any) -> Any:
    """Check `value` against the annotation `tp`; ints are accepted where floats are."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Union or origin is types.UnionType:
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(key, value, inner)
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return {_coerce(f"{key} (a key)", k, args[0]): _coerce(f"{key}.{k}", v, args[1])
                for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return tuple(_coerce(f"{key}[{i}]", v, args[0]) for i, v in enumerate(value))
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    raise TypeError(f"unsupported annotation {tp} for {key}")


def _build(cls: type, raw: Any, prefix: str = "") -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'params'}: expected a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if key not in names:
            where = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(f"{where}: unknown key; valid keys here: {', '.join(names)}")
    kwargs = {}
    for name in names:
        if name in raw:
            kwargs[name] = _coerce(f"{prefix}.{name}" if prefix else name, raw[name], hints[name])
    return cls(**kwargs)


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


def config_from_dict(raw: dict) -> Config:
    """Build and validate a Config from a parsed params mapping."""
    return validate(_build(Config, raw))


def load_config(path: str | Path) -> Config:
    """Read params.yaml; a missing or malformed file is a one-line ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return config_from_dict(raw or {})
