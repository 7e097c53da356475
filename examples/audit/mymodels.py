"""A user's model file, as it would look in your own project: a plain factory that knows
nothing about bnmem. It takes no `norm_layer`, so bnmem swaps its BatchNorm layers for each
arm's norm (and lists them in the report)."""
from torch import nn


def make_net(num_classes: int = 10, in_channels: int = 1) -> nn.Module:
    """A small CNN with BatchNorm for 16 x 16 images."""
    return nn.Sequential(
        nn.Conv2d(in_channels, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.MaxPool2d(2),                                        # (B, 16, 8, 8)
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),                                        # (B, 32, 4, 4)
        nn.Flatten(),
        nn.Linear(32 * 4 * 4, 64), nn.BatchNorm1d(64), nn.ReLU(),
        nn.Linear(64, num_classes),
    )
