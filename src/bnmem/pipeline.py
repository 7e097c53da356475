"""Glue shared by the train and shadow stages, and the train stage's entry point
(`train_arm`): load the prepared pool, build an arm's model, and train it with the arm's
recipe. Targets train through `train_target` (the plain
loop, with per-epoch evaluation); shadows through bnmem.stacked, which is tested equal to
the same plain loop (`fit`)."""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from bnmem.config import Config, ConfigError, arm_norm
from bnmem.data import preprocess
from bnmem.io import load_npz, save_state
from bnmem.factory import factory_file, swapped_layers
from bnmem.models import make_model
from bnmem.sources import class_count
from bnmem.target_metrics import accuracy_by_kind, epochs_to, gamma_sigma
from bnmem.train import Regularizer, predict, resolve_device, train_model

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


def train_target(cfg: Config, arm: str, pool: dict[str, np.ndarray], test: dict[str, np.ndarray],
                 on_epoch=None, progress: bool = False) -> tuple[nn.Module, list[dict], dict]:
    """Train an arm's target model on the whole pool (init and batch order from cfg.seed),
    measuring memorization and gamma/sigma after every epoch (eval mode).

    `on_epoch(epoch, model, record)` runs after the measurements (e.g. to save a
    checkpoint). Returns (model, history, meta): meta is the `<arm>.json` content, with
    the final metrics and the per-channel gamma/sigma.
    """
    x, y = tensors(pool, cfg.dataset)
    x_test = preprocess(test["x"], cfg.dataset, pool["x"])
    meta = model_meta(cfg, arm, x.shape[1], x.shape[2])

    def measure(epoch: int, model: nn.Module, rec: dict) -> None:
        rec.update(accuracy_by_kind(predict(model, x), pool["y_train"], pool["kind"],
                                predict(model, x_test), test["y"]))
        bn = gamma_sigma(model)
        if bn:
            # torch median: the lower middle value for an even number of layers
            rec["median_gamma_sigma"] = float(torch.tensor([v["median_ratio"] for v in bn.values()]).median())
            # layers whose channels are mostly above 1 (bnmem.summary.gamma_sigma_summary)
            rec["gamma_sigma_layers_mostly_above_1"] = sum(v["share_above_1"] > 0.5 for v in bn.values())
        if on_epoch is not None:
            on_epoch(epoch, model, rec)

    model, history = fit(cfg, arm, x, y, meta, init_seed=cfg.seed, order_seed=cfg.seed,
                         on_epoch=measure, progress=progress)
    final = {k: v for k, v in history[-1].items() if k not in ("epoch", "lr", "seconds")}
    final["epochs_to_mem_50"] = epochs_to(history, "flipped_mem_acc", 0.5)
    # no wall time in any output: outputs are bit-identical across runs and machines
    meta.update(metrics=final,
                checkpoints=sorted(set(cfg.train.checkpoints) | {cfg.train.epochs}),
                gamma_sigma=gamma_sigma(model))
    return model, history, meta


def train_arm(cfg: Config, pool: dict, test: dict, checkpoint_dir: Path | None = None,
              progress: bool = True,
              on_record: Callable[[int, dict], None] | None = None
              ) -> tuple[torch.nn.Module, list[dict], dict]:
    """Train the recipe's arm on the whole pool; the epochs in train.checkpoints and the
    final one are saved to `checkpoint_dir` as epoch_<k>.pt; `on_record(epoch, record)`
    sees each epoch's record as it is made (dvclive). Returns (model, per-epoch records,
    metadata)."""
    arm = cfg.arms[0]
    if checkpoint_dir is not None:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)

    def on_epoch(epoch: int, model: torch.nn.Module, rec: dict) -> None:
        if checkpoint_dir is not None and epoch in cfg.train.checkpoints:
            save_state(checkpoint_dir / f"epoch_{epoch}.pt", model.state_dict())
        log.info("%s epoch %d loss %.4f clean %.3f flipped %.3f ood %.3f test %.3f (%.1f s)",
                 arm, epoch, rec["loss"], rec["clean_train_acc"] or 0,
                 rec["flipped_mem_acc"] or 0, rec["ood_mem_acc"] or 0, rec["test_acc"],
                 rec["seconds"])
        if on_record is not None:
            on_record(epoch, rec)

    model, history, meta = train_target(cfg, arm, pool, test, on_epoch, progress=progress)
    if checkpoint_dir is not None:
        save_state(checkpoint_dir / f"epoch_{cfg.train.epochs}.pt", model.state_dict())
    return model, history, meta
