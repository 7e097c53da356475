"""Glue shared by the train and shadow stages: load the prepared pool, build an arm's
model, and train it with the arm's recipe in the plain loop (`fit`). Target models train
through bnmem.targets; shadows through bnmem.stacked, which is tested equal to `fit`."""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import torch
from torch import nn

from bnmem.config import Config, ConfigError, arm_norm
from bnmem.data import preprocess
from bnmem.io import load_npz
from bnmem.factory import factory_file, swapped_layers
from bnmem.models import make_model
from bnmem.sources import class_count
from bnmem.train import Regularizer, resolve_device, train_model

POOL_KEYS = ("x", "y_train", "y_clean", "kind")

log = logging.getLogger(__name__)


def load_pool(path: str | Path) -> dict[str, np.ndarray]:
    return load_npz(path, POOL_KEYS)


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


def regularizer(cfg: Config, arm: str) -> Regularizer | None:
    return Regularizer(cfg.reg_strength, cfg.reg.target) if arm == "batchnorm_reg" else None


def fit(cfg: Config, arm: str, x: torch.Tensor, y: torch.Tensor, meta: dict, init_seed: int,
        order_seed: int, on_epoch=None, progress: bool = False) -> tuple[nn.Module, list[dict]]:
    """Build the arm's model from `init_seed` and train it on (x, y) with the arm's recipe."""
    device = resolve_device(cfg.train.device)
    model = build(meta, seed=init_seed).to(device)
    history = train_model(model, x, y, cfg.train, order_seed, regularizer(cfg, arm),
                          on_epoch=on_epoch, progress=progress)
    return model, history


def tensors(pool: dict[str, np.ndarray], dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The pool's preprocessed images [N, C, H, W] and training labels [N]."""
    return preprocess(pool["x"], dataset, pool["x"]), torch.as_tensor(pool["y_train"])
