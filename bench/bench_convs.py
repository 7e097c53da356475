"""Micro-benchmark: the convolutions of one stacked LeNet training step, in the layouts
and formulations that could replace what bnmem.train.stacked uses (grouped, channels-last).

    python bench/bench_convs.py [--models 16] [--batch 64] [--threads 1] [--rounds 10]
                                [--out bench/results/convs.md]

Convolutions are ~65 % of a stacked training step (bench_train's profile), so they bound
what any rearrangement of PyTorch ops can gain. Each row times the four convolution calls
of one step for K models x B samples: conv1 forward, conv1 weight gradient, conv2 forward,
conv2 input + weight gradient; median of `--rounds` calls after one warm-up, set-ups
timed one after another. All set-ups compute convolutions of the same shapes on random
tensors (the padded set-up also carries conv1's 2 extra channels into conv2's input, and
its GFLOP/s counts LeNet's useful work only); the input gradient computed as a forward
convolution is checked equal to the backward op before timing.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bnmem.train.stacked import retain_heap

CL = torch.channels_last
BACKWARD = torch.ops.aten.convolution_backward


def _time(fn, rounds: int) -> float:
    fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1e3


def _grad(d, a, w, pad, groups, mask):
    return BACKWARD(d, a, w, None, [1, 1], [pad, pad], [1, 1], False, [0, 0], groups, mask)


def grouped(k: int, b: int, c1: int, fmt, g: torch.Generator) -> dict:
    """The stacked step as bnmem.train.stacked runs it: K models as groups, c1 conv1 channels
    per model (6 = LeNet; 8 pads each group to one AVX2 vector)."""
    x = torch.randn(b, k, 28, 28, generator=g).contiguous(memory_format=fmt)
    w1 = torch.randn(k * c1, 1, 5, 5, generator=g).contiguous(memory_format=fmt)
    p1 = torch.randn(b, k * c1, 14, 14, generator=g).contiguous(memory_format=fmt)
    w2 = torch.randn(k * 16, c1, 5, 5, generator=g).contiguous(memory_format=fmt)
    d1 = torch.randn(b, k * c1, 28, 28, generator=g).contiguous(memory_format=fmt)
    d2 = torch.randn(b, k * 16, 10, 10, generator=g).contiguous(memory_format=fmt)
    return {"conv1 fwd": lambda: F.conv2d(x, w1, padding=2, groups=k),
            "conv1 wgrad": lambda: _grad(d1, x, w1, 2, k, [False, True, False]),
            "conv2 fwd": lambda: F.conv2d(p1, w2, groups=k),
            "conv2 igrad+wgrad": lambda: _grad(d2, p1, w2, 0, k, [True, True, False])}


def per_model(k: int, b: int, fmt, g: torch.Generator) -> dict:
    """K dense (ungrouped) convolutions of batch B, one per model: the plain loop's calls."""
    def r(*shape):
        return [torch.randn(*shape, generator=g).contiguous(memory_format=fmt) for _ in range(k)]
    x, w1, d1 = r(b, 1, 28, 28), r(6, 1, 5, 5), r(b, 6, 28, 28)
    p1, w2, d2 = r(b, 6, 14, 14), r(16, 6, 5, 5), r(b, 16, 10, 10)
    return {"conv1 fwd": lambda: [F.conv2d(a, w, padding=2) for a, w in zip(x, w1)],
            "conv1 wgrad": lambda: [_grad(d, a, w, 2, 1, [False, True, False])
                                    for d, a, w in zip(d1, x, w1)],
            "conv2 fwd": lambda: [F.conv2d(a, w) for a, w in zip(p1, w2)],
            "conv2 igrad+wgrad": lambda: [_grad(d, a, w, 0, 1, [True, True, False])
                                          for d, a, w in zip(d2, p1, w2)]}


def igrad_as_forward(k: int, b: int, g: torch.Generator) -> dict:
    """conv2's input gradient as a forward convolution with flipped, transposed weights."""
    p1 = torch.randn(b, k * 6, 14, 14, generator=g).contiguous(memory_format=CL)
    w2 = torch.randn(k * 16, 6, 5, 5, generator=g).contiguous(memory_format=CL)
    d2 = torch.randn(b, k * 16, 10, 10, generator=g).contiguous(memory_format=CL)
    ref = _grad(d2, p1, w2, 0, k, [True, False, False])[0]
    wt = w2.view(k, 16, 6, 5, 5).transpose(1, 2).flip(-1, -2).reshape(k * 6, 16, 5, 5)
    wt = wt.contiguous(memory_format=CL)
    torch.testing.assert_close(F.conv2d(d2, wt, padding=4, groups=k), ref, rtol=1e-4, atol=1e-3)
    return {"conv2 igrad (backward op)": lambda: _grad(d2, p1, w2, 0, k, [True, False, False]),
            "conv2 igrad as forward conv": lambda: F.conv2d(d2, wt, padding=4, groups=k)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--models", type=int, default=16)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--out", default="bench/results/convs.md")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    retain_heap()  # as the shadow stage does
    k, b, g = args.models, args.batch, torch.Generator().manual_seed(0)
    # one step's FLOPs: forward 2*MACs per conv; backward = igrad (conv2 only) + wgrad
    macs1, macs2 = b * k * 6 * 25 * 28 * 28, b * k * 16 * 150 * 10 * 10
    flops = {"conv1 fwd": 2 * macs1, "conv1 wgrad": 2 * macs1, "conv2 fwd": 2 * macs2,
             "conv2 igrad+wgrad": 4 * macs2}
    setups = {"grouped, channels-last (bnmem.train.stacked)": grouped(k, b, 6, CL, g),
              "grouped, NCHW": grouped(k, b, 6, torch.contiguous_format, g),
              "grouped, channels-last, conv1 padded to 8 channels": grouped(k, b, 8, CL, g),
              "per model (K dense convs), NCHW": per_model(k, b, torch.contiguous_format, g),
              "per model (K dense convs), channels-last": per_model(k, b, CL, g)}
    lines = [f"# bench_convs: the convolutions of one stacked LeNet step ({k} models x {b} "
             f"samples, {args.threads} thread(s), median of {args.rounds}, ms)", "",
             "| set-up | conv1 fwd | conv1 wgrad | conv2 fwd | conv2 igrad+wgrad | total | "
             "GFLOP/s |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, ops in setups.items():
        ms = {op: _time(fn, args.rounds) for op, fn in ops.items()}
        total = sum(ms.values())
        lines.append(f"| {name} | " + " | ".join(f"{ms[op]:.1f}" for op in flops)
                     + f" | {total:.1f} | {sum(flops.values()) / total / 1e6:.1f} |")
    alt = {op: _time(fn, args.rounds) for op, fn in igrad_as_forward(k, b, g).items()}
    lines += ["", "conv2 input gradient alone: " + "; ".join(f"{op} {v:.1f} ms"
                                                           for op, v in alt.items()) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
