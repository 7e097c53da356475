"""Shadow-model training throughput: plain per-model loop (pipeline.fit) vs train_stack.

Usage: python bench/bench_train.py [--pool data/prepared/pool.npz] [--epochs 2]
           [--repeats 2] [--arms none batchnorm batchnorm_reg] [--out bench/results/train.md]

LeNet, default shadow recipe (batch 64, SGD momentum 0.9, wd 5e-4, cosine) on the
1000-sample subsets of the balanced keep matrix (16 models). Every setup runs in a fresh
spawned process (own thread setting and allocator state). Figures: samples/s per model =
models x subset size x epochs / wall seconds, best of `--repeats` interleaved rounds (the
2 cores are shared with other jobs, so the best round is the least disturbed), and
samples per CPU-second (robust to that sharing for single-thread setups). Ratios are
against the plain loop at torch's default threads (what the shadow stage runs today),
measured in the same run.
"""
from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import os
import resource
import time
from concurrent.futures import ProcessPoolExecutor
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
N_MODELS = 16


def load_data(pool: str) -> tuple[torch.Tensor, torch.Tensor, str]:
    if Path(pool).is_file():
        return *tensors(load_pool(pool), "fashion_mnist"), pool
    rng = np.random.default_rng(0)  # random images in the real format
    x = preprocess(rng.integers(0, 256, (2000, 1, 28, 28), dtype=np.uint8), "fashion_mnist")
    return x, torch.as_tensor(rng.integers(0, 10, 2000)), "random uint8 images"


def sgemm_peak(threads: int, n: int = 2048, reps: int = 5) -> float:
    """Best-of-`reps` GFLOP/s of a float32 n x n matmul."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = 0.0
    for _ in range(reps):
        t = time.perf_counter()
        a @ b
        best = max(best, 2 * n ** 3 / (time.perf_counter() - t) / 1e9)
    return best


def flops_per_sample(arch: str, batch: int = 64) -> float:
    """Forward + backward FLOPs per sample of one training step (batchnorm, 28 px)."""
    model = build(model_meta(Config(arch=arch, arms=("batchnorm",)), "batchnorm", 1, 28), seed=0)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    with FlopCounterMode(display=False) as fc:
        F.cross_entropy(model(x), y).backward()
    return fc.get_total_flops() / batch


def job(kind: str, threads: int, arm: str, pool: str, epochs: int, ids: list[int],
        workers: int = 1) -> tuple[float, float, float]:
    """Train models `ids` of `arm` in this (fresh) process: wall s, CPU s, peak RSS MiB."""
    torch.set_num_threads(threads)
    x, y, _ = load_data(pool)
    cfg = Config(arms=(arm,), train=dataclasses.replace(Config().train, epochs=epochs,
                                                         device="cpu"))
    meta = model_meta(cfg, arm, 1, 28)
    keep = keep_matrix(N_MODELS, len(y), 0)[ids]
    seeds = [model_seeds(0, j) for j in ids]
    fit(cfg, arm, x[:256], y[:256], meta, 0, 0)  # warm up kernels
    t, c = time.perf_counter(), time.process_time()
    if kind == "plain":
        for j in range(len(ids)):
            m = torch.as_tensor(keep[j])
            fit(cfg, arm, x[m], y[m], meta, *seeds[j])
    else:
        train_stack(cfg, arm, x, y, keep, meta, [s[0] for s in seeds], [s[1] for s in seeds],
                    workers=workers)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return wall, cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def in_fresh(n_proc: int, *jobs: tuple) -> tuple[float, float, float]:
    """Run `jobs` concurrently, one fresh spawned process each: wall s, summed CPU s,
    summed peak RSS MiB."""
    with ProcessPoolExecutor(n_proc, mp_context=mp.get_context("spawn")) as ex:
        futs = [ex.submit(job, *j) for j in jobs]
        res = [f.result() for f in futs]
    return max(r[0] for r in res), sum(r[1] for r in res), sum(r[2] for r in res)


def profile_table(arm: str, pool: str, rows: int = 12) -> str:
    """torch.profiler top ops of one epoch of a 16-model stack, 1 thread."""
    from torch.profiler import profile
    torch.set_num_threads(1)
    x, y, _ = load_data(pool)
    cfg = Config(arms=(arm,), train=dataclasses.replace(Config().train, epochs=1, device="cpu"))
    meta = model_meta(cfg, arm, 1, 28)
    keep, s = keep_matrix(N_MODELS, len(y), 0), list(range(N_MODELS))
    train_stack(cfg, arm, x, y, keep[:, :400], meta, s, s)
    with profile() as prof:
        train_stack(cfg, arm, x, y, keep, meta, s, s)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pool", default="data/prepared/pool.npz")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--plain-models", type=int, default=2, help="models the plain loop trains")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--arms", nargs="+", default=list(ARMS))
    p.add_argument("--out", default="bench/results/train.md")
    args = p.parse_args()
    dt = torch.get_num_threads()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    src = load_data(args.pool)[2]
    load0 = os.getloadavg()[0]
    peaks = {t: sgemm_peak(t) for t in (1, dt)}
    flops = {a: flops_per_sample(a) for a in ("lenet", "resnet", "densenet")}
    allm, half = list(range(N_MODELS)), N_MODELS // 2
    pm = list(range(args.plain_models))
    rows = []
    for arm in args.arms:
        a = (arm, args.pool, args.epochs)
        setups = {  # name -> (models, threads used, jobs for in_fresh)
            f"plain loop, {dt} threads (baseline: shadow stage today)":
                (len(pm), dt, [("plain", dt, *a, pm)]),
            "plain loop, 1 thread": (len(pm), 1, [("plain", 1, *a, pm)]),
            f"train_stack, 1 process x {dt} threads": (N_MODELS, dt, [("stack", dt, *a, allm)]),
            "train_stack, 1 thread": (N_MODELS, 1, [("stack", 1, *a, allm)]),
            f"train_stack, workers={dt} (threads of 1)":
                (N_MODELS, dt, [("stack", 1, *a, allm, dt)]),
            f"train_stack, {dt} processes x 1 thread":
                (N_MODELS, dt, [("stack", 1, *a, allm[i::dt]) for i in range(dt)]),
        }
        best = {name: (np.inf, np.inf, np.inf) for name in setups}
        for _ in range(args.repeats):
            for name, (_, _, jobs) in setups.items():
                best[name] = min(best[name], in_fresh(len(jobs), *jobs))
        per_model = 1000 * args.epochs
        base = None
        for name, (n_models, threads, _) in setups.items():
            wall, cpu, rss = best[name]
            sps = n_models * per_model / wall
            base = base or sps
            gf = sps * flops["lenet"] / 1e9
            rows.append((arm, name, sps, sps / base, n_models * per_model / cpu, gf,
                         100 * gf / peaks[dt], rss))
            print(f"{arm:14s} {name:52s} {sps:7.0f}/s  x{sps / base:5.2f}  "
                  f"{n_models * per_model / cpu:6.0f}/CPU-s", flush=True)
    table = profile_table("batchnorm", args.pool)
    load1 = os.getloadavg()[0]
    lines = [
        "# Shadow training throughput (bench/bench_train.py)", "",
        f"LeNet, {N_MODELS} models on 1000-sample subsets of {src}, batch 64, "
        f"{args.epochs} epochs; best of {args.repeats} rounds, each setup in a fresh process. "
        f"torch {torch.__version__}, {os.cpu_count()} CPUs (default threads {dt}); 1-min load "
        f"average {load0:.1f} at start, {load1:.1f} at end (other jobs share the cores). "
        f"Ratio: samples/s per model vs the plain loop at {dt} threads, same run. GFLOP/s: "
        f"samples/s x {flops['lenet'] / 1e6:.2f} MFLOP; % of the {dt}-thread sgemm peak.", "",
        "| arm | setup | samples/s per model | ratio | samples per CPU-second | GFLOP/s "
        "| % of peak | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [f"| {a} | {n} | {s:.0f} | {r:.2f}x | {c:.0f} | {g:.1f} | {pct:.0f}% | {m:.0f} |"
              for a, n, s, r, c, g, pct, m in rows]
    lines += ["", "sgemm peak (2048^2 float32 mm, best of 5): " +
              ", ".join(f"{t} thread(s) {v:.0f} GFLOP/s" for t, v in peaks.items()), "",
              "FLOPs per sample, one training step forward + backward (FlopCounterMode, "
              "batchnorm, 28 px, batch 64): " +
              ", ".join(f"{a} {v / 1e6:.2f} MFLOP" for a, v in flops.items()), "",
              f"Peak RSS is per process, summed over processes; importing torch alone takes "
              f"{rss0:.0f} MiB here.", "",
              "Top ops, one epoch of a 16-model batchnorm stack, 1 thread (torch.profiler):", "",
              "```", table, "```", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
