"""An arm's model spec: the `<arm>.json` fields that rebuild its module (`model_meta`), and
the module built from them (`build`)."""
from __future__ import annotations

from pathlib import Path

from torch import nn

from bnmem.core.config import Config, ConfigError, arm_norm
from bnmem.data.sources import class_count
from bnmem.models.factory import factory_file, swapped_layers
from bnmem.models.zoo import make_model


def model_meta(cfg: Config, arm: str, in_channels: int, image_size: int) -> dict:
    """The `<arm>.json` fields make_model needs to rebuild the module; for your own model
    factory also `swapped`, the BatchNorm layers bnmem replaced by the arm's norm."""
    meta = {"arch": cfg.arch, "norm": arm_norm(arm), "arm": arm,
            "num_classes": class_count(cfg.dataset, cfg.data), "in_channels": in_channels,
            "width": cfg.model.width, "image_size": image_size, "dataset": cfg.dataset}
    if cfg.model.zero_init_residual:  # only then: default metadata stays byte-identical
        meta["zero_init_residual"] = True
    if cfg.model.init != "default":
        meta["init"] = cfg.model.init
    if ":" in cfg.arch:
        declared, actual = Path(cfg.audit.model_file).resolve(), factory_file(cfg.arch)
        if not (declared == actual or (declared.is_dir() and actual.is_relative_to(declared))):
            raise ConfigError(f"audit.model_file: {cfg.audit.model_file} is neither the file "
                              f"defining {cfg.arch} ({actual}) nor a folder holding it; set "
                              "it so, and editing the model reruns the stages that build it")
        meta["swapped"] = swapped_layers(cfg.arch, meta["norm"], meta["num_classes"],
                                         in_channels, image_size)
    return meta


def build(meta: dict, seed: int | None = None) -> nn.Module:
    return make_model(meta["arch"], meta["norm"], meta["num_classes"], meta["in_channels"],
                      meta["width"], meta["image_size"], seed=seed,
                      zero_init_residual=meta.get("zero_init_residual", False),
                      init=meta.get("init", "default"))
