"""Your own model: `arch: <module>:<function>`.

A factory is called with `num_classes` and `in_channels` (and `image_size` if it takes
it). If it takes `norm_layer`, that is a callable `norm_layer(num_channels) -> nn.Module`
for [B, C, H, W] features (torchvision's convention); otherwise bnmem builds the model
once and swaps its BatchNorm layers for the arm's norm. Either way no BatchNorm is left in
a non-BN arm (`swap_norms` runs after a norm_layer factory too, for layers it did not
route through norm_layer). Every failure is one ConfigError line naming `arch`.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from bnmem.core.config import ARCHS, FACTORY_RE, ConfigError
from bnmem.models.norms import norm_layer, swap_norms


def factory_module(arch: str) -> str:
    return arch.split(":")[0]


def resolve_factory(arch: str) -> Callable[..., nn.Module]:
    """Import `<module>:<function>`; the project root (cwd) is on the path, as for
    `python -m`. Any failure is one ConfigError line naming `arch`."""
    if not FACTORY_RE.match(arch):
        raise ConfigError(f"arch: {arch!r} is invalid; valid: {' | '.join(ARCHS)} | "
                          "<module>:<function>, e.g. mypkg.models:make_net")
    mod_name, fn_name = arch.split(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(mod_name)
    except Exception as exc:  # ImportError, or the module failing while it imports
        raise ConfigError(f"arch: cannot import {mod_name!r} ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''}); put it under the "
                          "project root or pip install it") from None
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ConfigError(f"arch: {mod_name!r} has no function {fn_name!r}")
    return fn


def factory_file(arch: str) -> Path:
    """The source file of the factory's module (a DVC dependency of the model stages)."""
    resolve_factory(arch)  # imports the module, or one ConfigError line
    path = getattr(sys.modules[factory_module(arch)], "__file__", None)
    if path is None:
        raise ConfigError(f"arch: module {factory_module(arch)!r} has no source file")
    return Path(path).resolve()


def build_factory_model(arch: str, norm: str, num_classes: int, in_channels: int,
                        image_size: int) -> tuple[nn.Module, list[str]]:
    """(model for the arm's `norm`, names of the BatchNorm layers swapped), checked to
    give [2, num_classes] logits on a batch of two zero images."""
    fn = resolve_factory(arch)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        raise ConfigError(f"arch: {arch} has no inspectable signature; wrap it in a plain "
                          "function taking num_classes and in_channels") from None
    open_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    missing = [k for k in ("num_classes", "in_channels") if k not in params and not open_kw]
    if missing:
        raise ConfigError(f"arch: {arch}{inspect.signature(fn)} must accept keyword "
                          f"arguments num_classes and in_channels (missing {', '.join(missing)}); "
                          "optionally norm_layer and image_size")
    kwargs: dict = {"num_classes": num_classes, "in_channels": in_channels}
    if "image_size" in params:
        kwargs["image_size"] = image_size
    takes_norm = "norm_layer" in params
    if takes_norm:
        kwargs["norm_layer"] = norm_layer(norm)
    try:
        model = fn(**kwargs)
    except Exception as exc:
        raise ConfigError(f"arch: {arch}(**{sorted(kwargs)}) failed ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(model, nn.Module):
        raise ConfigError(f"arch: {arch} returned {type(model).__name__}, not a torch.nn.Module")
    swapped = swap_norms(model, norm)
    try:
        with torch.no_grad():
            out = model.eval()(torch.zeros(2, in_channels, image_size, image_size))
    except Exception as exc:
        raise ConfigError(f"arch: {arch} fails on a [2, {in_channels}, {image_size}, "
                          f"{image_size}] batch ({type(exc).__name__}: "
                          f"{str(exc).splitlines()[0] if str(exc) else ''})") from None
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != (2, num_classes):
        shape = list(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ConfigError(f"arch: {arch} returns {shape} for a batch of 2; must be logits "
                          f"[2, num_classes={num_classes}]")
    return model.train(), swapped


def swapped_layers(arch: str, norm: str, num_classes: int, in_channels: int,
                   image_size: int) -> list[str]:
    """Names of the BatchNorm layers bnmem swaps for `norm` in a factory's model ([] for
    the built-in zoo, whose norm is injected)."""
    if arch in ARCHS:
        return []
    with torch.random.fork_rng(devices=[]):
        return build_factory_model(arch, norm, num_classes, in_channels, image_size)[1]
