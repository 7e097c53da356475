"""SGD with momentum and weight decay: torch.optim.SGD's CPU update, without torch.optim.

Constructing any torch.optim optimizer imports torch._dynamo (Optimizer.add_param_group is
wrapped by torch._disable_dynamo, which imports the compiler stack on first call): 1.3-1.6 s
of every train and shadow stage's start on a Zen 5 core (BENCHMARKS.md, "Stage start-up").
On the CPU torch.optim.SGD runs `_single_tensor_sgd` (foreach kernels are CUDA's); `SGD`
below runs the same tensor ops in the same order, so it computes the same bits
(tests/test_sgd.py compares both step for step). Elsewhere (CUDA, DP-SGD through Opacus)
torch.optim.SGD runs: `make_sgd` chooses.
"""
from __future__ import annotations

from typing import Iterable

import torch


class SGD:
    """SGD(params, lr, momentum, weight_decay) as torch.optim.SGD with dampening 0, no
    Nesterov, no maximize: d = g + wd * p; buf = d (first step) else momentum * buf + d;
    p -= lr * buf. `param_groups[0]["lr"]` is read at every step (schedules set it)."""

    def __init__(self, params: Iterable[torch.Tensor], lr: float, momentum: float = 0.0,
                 weight_decay: float = 0.0) -> None:
        self.param_groups = [{"params": list(params), "lr": lr, "momentum": momentum,
                              "weight_decay": weight_decay}]
        self.state: dict[torch.Tensor, torch.Tensor] = {}  # parameter -> momentum buffer

    @torch.no_grad()
    def step(self) -> None:
        for group in self.param_groups:
            lr, momentum, wd = group["lr"], group["momentum"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d = p.grad
                if wd != 0:
                    d = d.add(p, alpha=wd)
                if momentum != 0:
                    buf = self.state.get(p)
                    if buf is None:
                        buf = self.state[p] = d.detach().clone()
                    else:
                        buf.mul_(momentum).add_(d, alpha=1)  # alpha = 1 - dampening
                    d = buf
                p.add_(d, alpha=-lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.detach_().zero_()


def make_sgd(params: Iterable[torch.Tensor], device: torch.device | str, lr: float,
             momentum: float, weight_decay: float):
    """`SGD` on the CPU (the same bits as torch.optim.SGD there, without its start-up);
    torch.optim.SGD on any other device (its foreach kernels round as they do)."""
    cls = SGD if torch.device(device).type == "cpu" else torch.optim.SGD
    return cls(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
