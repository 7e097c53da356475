"""An arm's training recipe in the plain loop (`fit`): the model built from its spec, the
γ/σ regularizer for batchnorm_reg, DP-SGD for the DP arms (bnmem.train.dp). Target models
train through bnmem.train.target; shadows through bnmem.train.stacked, which is tested
equal to `fit` (and runs `fit` itself for the DP arms and non-LeNet archs)."""
from __future__ import annotations

import torch
from torch import nn

from bnmem.core.config import Config, arm_epsilon, dp_arm
from bnmem.core.records import ModelSpec
from bnmem.models.spec import build
from bnmem.train.loop import Regularizer, train_model
from bnmem.models.runtime import resolve_device


def regularizer(cfg: Config, arm: str) -> Regularizer | None:
    return Regularizer(cfg.reg_strength, cfg.reg.target) if arm == "batchnorm_reg" else None


def fit(cfg: Config, arm: str, x: torch.Tensor, y: torch.Tensor, spec: ModelSpec, init_seed: int,
        order_seed: int, on_epoch=None, progress: bool = False) -> tuple[nn.Module, list[dict]]:
    """Build the arm's model from `init_seed` and train it on (x, y) with the arm's recipe."""
    device = resolve_device(cfg.train.device)
    model = build(spec, seed=init_seed).to(device)
    if dp_arm(arm):
        from bnmem.train.dp import train_dp
        return model, train_dp(model, x, y, cfg.train, cfg.dp, arm_epsilon(cfg, arm),
                               order_seed, on_epoch=on_epoch)
    history = train_model(model, x, y, cfg.train, order_seed, regularizer(cfg, arm),
                          on_epoch=on_epoch, progress=progress)
    return model, history
