"""Shadow-model training throughput: plain per-model loop (pipeline.fit) vs train_stack.

Usage: python bench/bench_train.py [--pool data/prepared/pool.npz] [--epochs 2]
           [--models 16] [--out bench/results/train.md]

LeNet, default shadow recipe (batch 64, SGD momentum, cosine), 1000-sample subsets from
the balanced keep matrix. Figures are samples/s per model (models x samples x epochs /
wall seconds), best of `--repeats` interleaved runs (the 2 cores are shared, so the best
run is the least disturbed one); CPU seconds are given too. Every ratio is against the
plain loop at torch's default threads, measured in the same run.
"""
from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from bnmem.config import Config
from bnmem.data import preprocess
from bnmem.pipeline import build, fit, load_pool, model_meta, tensors
from bnmem.shadow import keep_matrix, model_seeds
from bnmem.stacked import train_stack

ARMS = ("none", "batchnorm", "batchnorm_reg")


def sgemm_peak(threads: int, n: int = 2048, reps: int = 5) -> float:
    """Best-of-`reps` GFLOP/s of a float32 n x n matmul at `threads` threads."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t) / 1e9)
    return best


def flops_per_sample(arch: str, arm: str, batch: int = 64) -> float:
    """Forward + backward FLOPs per sample of one training step (FlopCounterMode)."""
    cfg = Config(arch=arch, arms=(arm,))
    model = build(model_meta(cfg, arm, 1, 28), seed=0)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    with FlopCounterMode(display=False) as fc:
        F.cross_entropy(model(x), y).backward()
    return fc.get_total_flops() / batch


def _job(args: tuple) -> tuple[float, float]:
    """(wall, cpu) seconds of one training job in a fresh setting of `threads` threads."""
    kind, threads, cfg, arm, x, y, keep, meta, seeds = args
    torch.set_num_threads(threads)
    t, c = time.perf_counter(), time.process_time()
    if kind == "plain":
        for j in range(len(keep)):
            m = torch.as_tensor(keep[j])
            fit(cfg, arm, x[m], y[m], meta, *seeds[j])
    else:
        train_stack(cfg, arm, x, y, keep, meta, [s[0] for s in seeds], [s[1] for s in seeds])
    return time.perf_counter() - t, time.process_time() - c


def _procs(pool: mp.pool.Pool, n_proc: int, cfg, arm, x, y, keep, meta, seeds) -> tuple[float, float]:
    """Stacks split over `n_proc` processes of one thread each: wall and summed CPU."""
    parts = np.array_split(np.arange(len(keep)), n_proc)
    jobs = [("stack", 1, cfg, arm, x, y, keep[p], meta, [seeds[i] for i in p]) for p in parts]
    t = time.perf_counter()
    res = pool.map(_job, jobs)
    return time.perf_counter() - t, sum(c for _, c in res)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pool", default="data/prepared/pool.npz")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--models", type=int, default=16)
    p.add_argument("--plain-models", type=int, default=4, help="models the plain loop trains")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--arms", nargs="+", default=list(ARMS))
    p.add_argument("--out", default="bench/results/train.md")
    args = p.parse_args()
    default_threads = torch.get_num_threads()
    if Path(args.pool).is_file():
        x, y, src = *tensors(load_pool(args.pool), "fashion_mnist"), args.pool
    else:  # random images in the real format
        rng = np.random.default_rng(0)
        x = preprocess(rng.integers(0, 256, (2000, 1, 28, 28), dtype=np.uint8), "fashion_mnist")
        y, src = torch.as_tensor(rng.integers(0, 10, 2000)), "random uint8 images"
    keep = keep_matrix(args.models, len(y), 0)
    seeds = [model_seeds(0, j) for j in range(args.models)]
    peaks = {t: sgemm_peak(t) for t in (1, default_threads)}
    flops = {a: flops_per_sample(a, "batchnorm") for a in ("lenet", "resnet", "densenet")}
    ctx = mp.get_context("spawn")
    rows = []
    with ctx.Pool(2) as workers:
        for arm in args.arms:
            cfg = Config(arms=(arm,), reg_strength=0.1 if arm != "batchnorm_reg" else 0.1,
                         train=dataclasses.replace(Config().train, epochs=args.epochs, device="cpu"))
            meta = model_meta(cfg, arm, 1, 28)
            kp, sp = keep[:args.plain_models], seeds[:args.plain_models]
            setups = {  # name -> (models trained, callable returning (wall, cpu))
                f"plain loop, {default_threads} threads (baseline)":
                    (len(kp), lambda: _job(("plain", default_threads, cfg, arm, x, y, kp, meta, sp))),
                "plain loop, 1 thread":
                    (len(kp), lambda: _job(("plain", 1, cfg, arm, x, y, kp, meta, sp))),
                f"train_stack, {default_threads} threads":
                    (len(keep), lambda: _job(("stack", default_threads, cfg, arm, x, y, keep, meta, seeds))),
                "train_stack, 1 thread":
                    (len(keep), lambda: _job(("stack", 1, cfg, arm, x, y, keep, meta, seeds))),
                "train_stack, 2 processes x 1 thread":
                    (len(keep), lambda: _procs(workers, 2, cfg, arm, x, y, keep, meta, seeds)),
            }
            _job(("stack", 1, cfg, arm, x, y, keep[:2, :300], meta, seeds[:2]))  # warm up
            best = {name: (np.inf, np.inf) for name in setups}
            for _ in range(args.repeats):
                for name, (_, fn) in setups.items():
                    wall, cpu = fn()
                    best[name] = min(best[name], (wall, cpu))
            n_samples = keep.sum(1).mean() * args.epochs
            base = None
            for name, (n_models, _) in setups.items():
                wall, cpu = best[name]
                sps = n_models * n_samples / wall
                base = base or sps
                gflops = sps * flops["lenet"] / 1e9
                rows.append((arm, name, sps, sps / base, n_models * n_samples / cpu, gflops,
                             100 * gflops / peaks[default_threads]))
                print(f"{arm:14s} {name:40s} {sps:8.0f} samples/s  x{sps / base:.2f}", flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = [
        "# Shadow training throughput (bench/bench_train.py)",
        "",
        f"LeNet, {args.models} models on {int(keep.sum(1).mean())}-sample subsets of {src}, "
        f"batch 64, {args.epochs} epochs; best of {args.repeats}. torch {torch.__version__}, "
        f"{os.cpu_count()} CPUs, default threads {default_threads}. Ratio: vs the plain loop at "
        "default threads in the same run.",
        "",
        "| arm | setup | samples/s per model | ratio | samples per CPU-second | GFLOP/s | % of sgemm peak |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {a} | {n} | {s:.0f} | {r:.2f}x | {c:.0f} | {g:.1f} | {pct:.0f}% |"
              for a, n, s, r, c, g, pct in rows]
    lines += ["", f"sgemm peak (2048^2 float32 mm): " +
              ", ".join(f"{t} thread(s) {v:.0f} GFLOP/s" for t, v in peaks.items()), "",
              "FLOPs per sample, forward + backward (FlopCounterMode, batchnorm, 28 px): " +
              ", ".join(f"{a} {v / 1e6:.2f} MFLOP" for a, v in flops.items()), "",
              f"Peak RSS of the driver process: {rss:.0f} MiB", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
