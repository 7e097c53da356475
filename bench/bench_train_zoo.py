"""Shadow training of the zoo's ResNet / DenseNet on the CPU: the shadow stage's path
(bnmem.train.stacked.train_stack: models side by side, one torch thread each) against the plain
per-model loop (pipeline.fit one model after another with 2 and 1 torch threads), in the
same run, on the same models.

    python bench/bench_train_zoo.py --models 4 --samples 500 --epochs 2

Samples per second per model = models x samples x epochs / wall time. The two paths give
bit-identical weights (tests/test_stacked.py::test_other_arch_falls_back_to_plain_loop).

The roofline columns say how far any faster path could go on this CPU: GFLOP/s = samples/s
x the model's forward + backward FLOPs per sample (FlopCounterMode), against a float32
matmul of 2048^2 on all threads (the best the CPU's kernels do on dense work); "ceiling" =
that peak / the baseline's GFLOP/s, the speed-up of a path running every FLOP at matmul
peak.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import bnmem  # noqa: F401  (pins the CPU kernels first)
import numpy as np
import torch

from bnmem.core.config import Config, ModelConfig, TrainConfig
from bnmem.data.images import preprocess
from bnmem.core.io import load_npz
from bnmem.train.recipe import fit
from bnmem.models.spec import model_spec
from bnmem.train.stacked import train_stack
from bench_train import flops_per_sample, sgemm_peak  # same folder: python bench/<this>.py


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--archs", nargs="+", default=["resnet", "densenet"])
    p.add_argument("--arm", default="batchnorm")
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--samples", type=int, default=500)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="bench/results/train_zoo.md")
    args = p.parse_args()
    pool = load_npz("data/prepared/pool.npz", ("x", "y_train"))
    x = preprocess(pool["x"][: 2 * args.samples], "fashion_mnist")
    y = torch.as_tensor(pool["y_train"][: 2 * args.samples])
    keep = np.zeros((args.models, len(y)), bool)
    rng = np.random.default_rng(0)
    for k in range(args.models):
        keep[k, rng.choice(len(y), args.samples, replace=False)] = True
    seeds = list(range(args.models))
    peak = sgemm_peak(args.workers)
    flops = {arch: flops_per_sample(arch) for arch in args.archs}
    lines = ["# ResNet / DenseNet shadow training on the CPU (bench/bench_train_zoo.py)", "",
             "| arch | arm | plain loop, 2 threads (baseline) | plain loop, 1 thread | "
             f"shadow stage path, {args.workers} workers x 1 thread | ratio to baseline | "
             "GFLOP/s baseline / path | ceiling at sgemm peak |",
             "|---|---|---|---|---|---|---|---|"]
    print("\n".join(lines))
    for arch in args.archs:
        cfg = Config(arch=arch, arms=(args.arm,), model=ModelConfig(),
                     train=TrainConfig(epochs=args.epochs, checkpoints=(args.epochs,)))
        meta = model_spec(cfg, args.arm, 1, 28)
        work = args.models * args.samples * args.epochs
        rates = {}
        for name, threads in (("plain2", 2), ("plain1", 1)):
            torch.set_num_threads(threads)
            t0 = time.perf_counter()
            for k in range(args.models):
                sel = torch.as_tensor(keep[k])
                fit(cfg, args.arm, x[sel], y[sel], meta, seeds[k], seeds[k])
            rates[name] = work / (time.perf_counter() - t0)
        torch.set_num_threads(2)
        t0 = time.perf_counter()
        train_stack(cfg, args.arm, x, y, keep, meta, seeds, seeds, workers=args.workers)
        rates["stack"] = work / (time.perf_counter() - t0)
        gflop = {k: r * flops[arch] / 1e9 for k, r in rates.items()}
        lines.append(f"| {arch} | {args.arm} | {rates['plain2']:.0f} | {rates['plain1']:.0f} | "
                     f"{rates['stack']:.0f} | {rates['stack'] / rates['plain2']:.2f}x | "
                     f"{gflop['plain2']:.0f} / {gflop['stack']:.0f} | "
                     f"{peak / gflop['plain2']:.2f}x |")
        print(lines[-1], flush=True)
    lines += ["", f"Samples/s per model; {args.models} models x {args.samples} samples x "
              f"{args.epochs} epochs, batch 64, the default pool's images; identical weights "
              "on both paths (tests/test_stacked.py::test_other_arch_falls_back_to_plain_loop).",
              "", f"sgemm peak (2048^2 float32 mm, best of 5, {args.workers} threads): "
              f"{peak:.0f} GFLOP/s; FLOPs per sample (forward + backward, FlopCounterMode): "
              + ", ".join(f"{a} {v / 1e6:.1f} MFLOP" for a, v in flops.items()) + ".",
              f"torch CPU kernels: {torch.backends.cpu.get_cpu_capability()}."]
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
