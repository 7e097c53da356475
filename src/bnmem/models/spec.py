"""An arm's model from its spec: `model_spec` (what `<arm>.json` records) and `build`."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from torch import nn

from bnmem.core.config import Config, ConfigError, arm_norm, dp_arm
from bnmem.core.io import load_state
from bnmem.core.records import ModelSpec
from bnmem.data.sources import class_count
from bnmem.models.factory import factory_file, swapped_layers
from bnmem.models.zoo import make_model


def model_spec(cfg: Config, arm: str, in_channels: int, image_size: int) -> ModelSpec:
    """The spec of `arm`'s model under `cfg` for images [in_channels, image_size, image_size]."""
    norm, num_classes = arm_norm(arm), class_count(cfg.dataset, cfg.data)
    swapped = None
    if ":" in cfg.arch:
        declared, actual = Path(cfg.audit.model_file).resolve(), factory_file(cfg.arch)
        if not (declared == actual or (declared.is_dir() and actual.is_relative_to(declared))):
            raise ConfigError(f"audit.model_file: {cfg.audit.model_file} is neither the file "
                              f"defining {cfg.arch} ({actual}) nor a folder holding it; set "
                              "it so, and editing the model reruns the stages that build it")
        swapped = tuple(swapped_layers(cfg.arch, norm, num_classes, in_channels, image_size))
    spec = ModelSpec(cfg.arch, norm, arm, num_classes, in_channels, cfg.model.width, image_size,
                     cfg.dataset, cfg.model.zero_init_residual, cfg.model.init, swapped)
    if dp_arm(arm):  # Opacus' hooks cannot see through in-place activations: switched off
        off = inplace_modules(build(spec))
        spec = replace(spec, inplace_off=tuple(off) if off else None)
    return spec


def inplace_modules(model: nn.Module) -> list[str]:
    """Names of the modules computing in place (ReLU(inplace=True) and the like)."""
    return [name for name, m in model.named_modules() if getattr(m, "inplace", False) is True]


def build(spec: ModelSpec, seed: int | None = None) -> nn.Module:
    model = make_model(spec.arch, spec.norm, spec.num_classes, spec.in_channels, spec.width,
                       spec.image_size, seed=seed, zero_init_residual=spec.zero_init_residual,
                       init=spec.init)
    for name in spec.inplace_off or ():
        model.get_submodule(name).inplace = False
    return model


def load_model(spec: ModelSpec, path: str | Path) -> nn.Module:
    """A trained arm's module: built from its spec, weights from `path` (a state_dict)."""
    model = build(spec)
    model.load_state_dict(load_state(path))
    return model
