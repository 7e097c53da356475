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
    # where tracking queries: "checkpoints" (train.checkpoints and the final epoch, the
    # epochs the grads stage has norms for) | "every" (each epoch)
    track_at: str = "checkpoints"
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


TRACK_AT = ("checkpoints", "every")  # shadow.track_at
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


def config_from_dict(raw: dict) -> Config:
    """Build and validate a Config from a parsed params mapping (bnmem.core.validate)."""
    from bnmem.core.validate import validate  # the checks import this module's names
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
