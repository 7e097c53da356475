"""Normalization layers by name (timm's create_norm pattern): building an arm's layer,
the `norm_layer` callable a model factory gets, and swapping a built model's BatchNorm
layers for another norm (Opacus' ModuleValidator.fix pattern)."""
from __future__ import annotations

from typing import Callable

from torch import nn

from bnmem.core.config import NORMS


def _groups(channels: int) -> int:
    """Largest of 8, 4, 2, 1 that divides `channels` (GroupNorm groups)."""
    return next(g for g in (8, 4, 2, 1) if channels % g == 0)


def make_norm(norm: str, channels: int, dims: int = 2) -> nn.Module:
    """A normalization layer over `channels` for 2-d (conv) or 1-d (linear) features.

    Args:
        norm: one of `none`, `batchnorm`, `groupnorm`, `layernorm`.
        channels: number of channels / features.
        dims: 2 for [B, C, H, W] inputs, 1 for [B, C].
    """
    if norm not in NORM_LAYERS:
        raise ValueError(f"norm: {norm!r} is invalid; valid: {' | '.join(NORMS)}")
    return NORM_LAYERS[norm](channels, dims)


# name -> layer (timm's _NORM_MAP); the names themselves live in bnmem.core.config, which
# validates params without importing torch (tests/test_models.py checks the two agree)
NORM_LAYERS: dict[str, Callable[[int, int], nn.Module]] = {
    "none": lambda c, dims: nn.Identity(),
    "batchnorm": lambda c, dims: nn.BatchNorm2d(c) if dims == 2 else nn.BatchNorm1d(c),
    "groupnorm": lambda c, dims: nn.GroupNorm(_groups(c), c),
    "layernorm": lambda c, dims: nn.GroupNorm(1, c),  # all of (C, H, W) per sample, per-channel affine
}


def norm_layer(norm: str) -> Callable[[int], nn.Module]:
    """The `norm_layer(num_channels)` a factory gets for an arm's norm."""
    return lambda channels: make_norm(norm, channels)


def swap_norms(model: nn.Module, norm: str) -> list[str]:
    """Replace every BatchNorm layer by the arm's norm, in place (none: Identity; groupnorm:
    GroupNorm with the largest of 8/4/2/1 groups dividing the channels; layernorm:
    GroupNorm(1, C)); batchnorm keeps them. Returns the swapped layers' names."""
    if norm == "batchnorm":
        return []
    swapped = []
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            parent, _, attr = name.rpartition(".")
            host = model.get_submodule(parent) if parent else model
            setattr(host, attr, make_norm(norm, module.num_features))
            swapped.append(name)
    return swapped
