"""Model zoo: LeNet, a small ResNet-18-style net and a small DenseNet-BC, plus your own
model factory (`arch: <module>:<function>`).

The normalization layer is injected by name (timm's pattern), `none` being nn.Identity,
so every arm has the same module names and the same conv/linear shapes. `init_params`
draws those weights from one explicit generator in module order; norm layers draw
nothing, so with the same seed every layer the arms share starts identical.

Norm layers by name: bnmem.models.norms; your own factory: bnmem.models.factory.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch import nn
import torch.nn.functional as F

from bnmem.core.config import ARCHS, NORMS
from bnmem.models.factory import build_factory_model
from bnmem.models.norms import make_norm


class LeNet(nn.Module):
    """LeNet-5 with a norm after every hidden layer. Input [B, C, 28|32, 28|32]."""

    def __init__(self, norm: str, num_classes: int, in_channels: int, image_size: int = 28):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 5, padding=2 if image_size == 28 else 0)
        self.norm1 = make_norm(norm, 6)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.norm2 = make_norm(norm, 16)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.norm3 = make_norm(norm, 120, dims=1)
        self.fc2 = nn.Linear(120, 84)
        self.norm4 = make_norm(norm, 84, dims=1)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.norm1(self.conv1(x))), 2)  # (B, 6, 14, 14)
        x = F.max_pool2d(F.relu(self.norm2(self.conv2(x))), 2)  # (B, 16, 5, 5)
        x = x.flatten(1)
        x = F.relu(self.norm3(self.fc1(x)))
        x = F.relu(self.norm4(self.fc2(x)))
        return self.fc3(x)


class BasicBlock(nn.Module):
    def __init__(self, norm: str, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1)
        self.norm1 = make_norm(norm, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1)
        self.norm2 = make_norm(norm, c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride), make_norm(norm, c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """ResNet-18 layout (2-2-2-2 basic blocks) with a 3x3 stem for 28-32 px images; the
    CPU size (arch resnet_cpu) is a ResNet-8: a stride-2 stem, then one basic block per
    stage at widths w, 2w, 4w (README "The zoo": depth, width and FLOPs per sample)."""

    def __init__(self, norm: str, num_classes: int, in_channels: int, width: int = 16,
                 stages: tuple[int, ...] = (1, 2, 4, 8), blocks_per_stage: int = 2,
                 stem_stride: int = 1):
        super().__init__()
        self.stem = nn.Conv2d(in_channels, width, 3, stem_stride, 1)
        self.stem_norm = make_norm(norm, width)
        blocks, c = [], width
        for i, mult in enumerate(stages):
            c_out = mult * width
            for j in range(blocks_per_stage):
                blocks.append(BasicBlock(norm, c, c_out, 2 if (i > 0 and j == 0) else 1))
                c = c_out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem_norm(self.stem(x)))
        x = self.blocks(x)
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class DenseLayer(nn.Module):
    """BN-ReLU-Conv1x1 (bottleneck, 4k) then BN-ReLU-Conv3x3 (k); output concatenated."""

    def __init__(self, norm: str, c_in: int, growth: int):
        super().__init__()
        self.norm1 = make_norm(norm, c_in)
        self.conv1 = nn.Conv2d(c_in, 4 * growth, 1)
        self.norm2 = make_norm(norm, 4 * growth)
        self.conv2 = nn.Conv2d(4 * growth, growth, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv1(F.relu(self.norm1(x)))
        out = self.conv2(F.relu(self.norm2(out)))
        return torch.cat([x, out], dim=1)


class DenseNet(nn.Module):
    """Small DenseNet-BC: 3 dense blocks of 4 layers, growth width/2, compression 0.5; the
    CPU size (arch densenet_cpu): a stride-2 stem and 2 layers per block."""

    def __init__(self, norm: str, num_classes: int, in_channels: int, width: int = 16,
                 layers_per_block: int = 4, stem_stride: int = 1):
        super().__init__()
        growth = max(width // 2, 2)
        c = 2 * growth
        self.stem = nn.Conv2d(in_channels, c, 3, stem_stride, 1)
        stages: list[nn.Module] = []
        for b in range(3):
            for _ in range(layers_per_block):
                stages.append(DenseLayer(norm, c, growth))
                c += growth
            if b < 2:  # transition: norm-relu-conv1x1 (compress 0.5) - avgpool
                c_out = c // 2
                stages += [make_norm(norm, c), nn.ReLU(), nn.Conv2d(c, c_out, 1), nn.AvgPool2d(2)]
                c = c_out
        self.features = nn.Sequential(*stages)
        self.final_norm = make_norm(norm, c)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.features(self.stem(x))
        x = F.relu(self.final_norm(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


# name -> builder(norm, num_classes, in_channels, width, image_size); names as in config.ARCHS
ARCH_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "lenet": lambda norm, nc, ic, width, size: LeNet(norm, nc, ic, size),
    "resnet": lambda norm, nc, ic, width, size: ResNet(norm, nc, ic, width),
    "densenet": lambda norm, nc, ic, width, size: DenseNet(norm, nc, ic, width),
    # CPU-sized: one 12-min replicate of a grid cell on 2 cores (README "The zoo")
    "resnet_cpu": lambda norm, nc, ic, width, size: ResNet(
        norm, nc, ic, width, stages=(1, 2, 4), blocks_per_stage=1, stem_stride=2),
    "densenet_cpu": lambda norm, nc, ic, width, size: DenseNet(
        norm, nc, ic, width, layers_per_block=2, stem_stride=2),
}


@torch.no_grad()
def init_params(model: nn.Module, generator: torch.Generator, scheme: str = "default") -> nn.Module:
    """Re-draw every conv/linear weight and bias from `generator`, in module order.

    `default`: PyTorch's own scheme (Kaiming-uniform, a=sqrt(5): weight variance
    1/(3 fan_in), a shrinking signal in deep nets without normalization); `kaiming`:
    He-normal weights (variance 2/fan_in, ReLU-preserving) and zero biases. Norm layers
    get weight 1, bias 0 and draw nothing, so arms that differ only in normalization get
    identical conv/linear weights.
    """
    for m in model.modules():
        if isinstance(m, (nn.modules.conv._ConvNd, nn.Linear)):
            fan_in = m.weight[0].numel()
            if scheme == "kaiming":
                m.weight.normal_(0.0, math.sqrt(2.0 / fan_in), generator=generator)
                if m.bias is not None:
                    m.bias.zero_()
                continue
            bound = 1.0 / math.sqrt(fan_in)  # kaiming_uniform(a=sqrt(5)) gives this bound
            m.weight.uniform_(-bound, bound, generator=generator)
            if m.bias is not None:
                m.bias.uniform_(-bound, bound, generator=generator)
        elif isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.GroupNorm)) and m.affine:
            m.weight.fill_(1.0)
            m.bias.zero_()
    return model


@torch.no_grad()
def zero_residual(model: nn.Module) -> nn.Module:
    """Start every residual branch of a ResNet at zero (Goyal et al. 2017; Fixup's idea
    for nets without normalization): the branch's last norm gets gamma 0, or, with no
    norm, its last convolution weight and bias 0. The net starts as its shortcut path."""
    for block in model.modules():
        if isinstance(block, BasicBlock):
            if isinstance(block.norm2, nn.Identity):
                block.conv2.weight.zero_()
                block.conv2.bias.zero_()
            else:
                block.norm2.weight.zero_()
    return model


def make_model(arch: str, norm: str, num_classes: int, in_channels: int, width: int = 16,
               image_size: int = 28, seed: int | None = None,
               zero_init_residual: bool = False, init: str = "default") -> nn.Module:
    """Build a model; with `seed`, weights come from `torch.Generator().manual_seed(seed)`.

    Args:
        arch: `lenet`, `resnet_cpu`, `densenet_cpu` (the zoo's CPU-sized nets), `resnet`,
            `densenet` (paper-sized), or `<module>:<function>` (your own factory).
        norm: `none`, `batchnorm`, `groupnorm` or `layernorm`.
        num_classes: output logits.
        in_channels: 1 (greyscale) or 3 (colour).
        width: base channels of resnet / densenet.
        image_size: 28 or 32 (LeNet pads 28 px inputs to keep its 5x5 feature map).
        seed: if given, deterministic initialisation independent of torch's global RNG.
        zero_init_residual: ResNet only: residual branches start at zero (`zero_residual`).
        init: `default` or `kaiming` weights (`init_params`; used only with `seed`).
    """
    if norm not in NORMS:
        raise ValueError(f"norm: {norm!r} is invalid; valid: {' | '.join(NORMS)}")
    if arch in ARCH_BUILDERS:
        model = ARCH_BUILDERS[arch](norm, num_classes, in_channels, width, image_size)
    elif ":" in arch:
        # the factory's own init may use torch's global RNG: seed it, without touching it
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0 if seed is None else seed)
            model = build_factory_model(arch, norm, num_classes, in_channels, image_size)[0]
    else:
        raise ValueError(f"arch: {arch!r} is invalid; valid: {' | '.join(ARCHS)} | "
                         "<module>:<function>")
    if seed is not None:
        init_params(model, torch.Generator().manual_seed(seed), init)
    if zero_init_residual:
        zero_residual(model)
    return model


@contextmanager
def mode(model: nn.Module, training: bool) -> Iterator[nn.Module]:
    """Set train/eval for the duration, then restore the caller's flag."""
    was = model.training
    model.train(training)
    try:
        yield model
    finally:
        model.train(was)


def bn_layers(model: nn.Module) -> list[tuple[str, nn.modules.batchnorm._BatchNorm]]:
    """(name, module) of every BatchNorm layer, in module order."""
    return [(n, m) for n, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm)]
