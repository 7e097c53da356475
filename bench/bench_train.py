"""Shadow-model training throughput: plain per-model loop (pipeline.fit) vs train_stack.

Usage: python bench/bench_train.py [--pool data/prepared/pool.npz] [--epochs 3]
           [--repeats 2] [--arms none batchnorm batchnorm_reg] [--out bench/results/train.md]

LeNet, default shadow recipe (batch 64, SGD momentum 0.9, wd 5e-4, cosine) on the
1000-sample subsets of the balanced keep matrix (16 models). Every setup runs in a fresh
spawned process (own thread setting and allocator state). Figures: samples/s per model =
models x subset size x epochs / wall seconds, best of `--repeats` interleaved rounds (the
2 cores are shared with other jobs, so the best round is the least disturbed), and
samples per CPU-second (robust to that sharing for single-thread setups). Ratios are
against the plain per-model loop at torch's default threads, measured in the same run.
train_stack runs its C step kernel (bnmem.native, the shadow stage's default on the CPU)
or, with BNMEM_NATIVE=0, autograd on the stacked network; the table also gives the
kernel's time per phase (a build with -DBNMEM_PROFILE) and a torch.profiler table of the
autograd path.
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

from bnmem.core.config import Config
from bnmem.data.images import preprocess
from bnmem.models.spec import build, model_spec
from bnmem.train.recipe import fit
from bnmem.data.pool import load_pool, tensors
from bnmem.core.keep import keep_matrix
from bnmem.train.shadow import model_seeds
from bnmem.train.stacked import train_stack

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
    model = build(model_spec(Config(arch=arch, arms=("batchnorm",)), "batchnorm", 1, 28), seed=0)
    x, y = torch.randn(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    with FlopCounterMode(display=False) as fc:
        F.cross_entropy(model(x), y).backward()
    return fc.get_total_flops() / batch


def job(kind: str, threads: int, arm: str, pool: str, epochs: int, ids: list[int],
        workers: int = 1, native: bool = True) -> tuple[float, float, float]:
    """Train models `ids` of `arm` in this (fresh) process: wall s, CPU s, peak RSS MiB.
    native=False: train_stack's autograd path instead of the C step kernel."""
    os.environ["BNMEM_NATIVE"] = "1" if native else "0"
    torch.set_num_threads(threads)
    x, y, _ = load_data(pool)
    cfg = Config(arms=(arm,), train=dataclasses.replace(Config().train, epochs=epochs,
                                                         device="cpu"))
    meta = model_spec(cfg, arm, 1, 28)
    keep = keep_matrix(N_MODELS, len(y), 0)[ids]
    seeds = [model_seeds(0, j) for j in ids]
    fit(cfg, arm, x[:256], y[:256], meta, 0, 0)  # warm up kernels (and compile the C one)
    if kind == "stack":
        train_stack(cfg, arm, x, y, keep[:2, :256], meta, [0, 1], [0, 1], workers=workers)
    _reset_peak_rss()
    t, c = time.perf_counter(), time.process_time()
    if kind == "plain":
        for j in range(len(ids)):
            m = torch.as_tensor(keep[j])
            fit(cfg, arm, x[m], y[m], meta, *seeds[j])
    else:
        train_stack(cfg, arm, x, y, keep, meta, [s[0] for s in seeds], [s[1] for s in seeds],
                    workers=workers)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return wall, cpu, _peak_rss()


def _reset_peak_rss() -> None:
    """Linux: restart the VmHWM high-water mark, so it measures training alone."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_rss() -> float:
    """Peak resident set size in MiB (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
    meta = model_spec(cfg, arm, 1, 28)
    keep, s = keep_matrix(N_MODELS, len(y), 0), list(range(N_MODELS))
    train_stack(cfg, arm, x, y, keep[:, :400], meta, s, s)
    os.environ["BNMEM_NATIVE"] = "0"
    try:
        with profile() as prof:
            train_stack(cfg, arm, x, y, keep, meta, s, s)
    finally:
        os.environ["BNMEM_NATIVE"] = "1"
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


# phases of lenet_train.c's PHASE() marks, and their FLOPs per sample (28 px, 1 channel)
PHASES = [("input transpose", 0), ("conv1", 2 * 6 * 25 * 784), ("bn1 statistics", 0),
          ("pool1 + conv2", 2 * 16 * 150 * 100), ("bn2 statistics + pool2", 0),
          ("fc forward (+ bn3, bn4)", 2 * (400 * 120 + 120 * 84 + 84 * 10)), ("loss", 0),
          ("fc backward (+ bn4, bn3)", 4 * (400 * 120 + 120 * 84 + 84 * 10)),
          ("unpool2 + bn2 backward", 0), ("conv2 weight gradient", 2 * 16 * 150 * 100),
          ("conv2 input gradient", 2 * 16 * 150 * 100), ("unpool1 + bn1 backward", 0),
          ("conv1 weight gradient", 2 * 6 * 25 * 784)]


def kernel_profile(arm: str, pool: str, peak1: float, steps: int = 20) -> str:
    """Microseconds per sample-model in each phase of the C step kernel (built with
    -DBNMEM_PROFILE into a temporary directory), 16 models x batch 64, 1 thread."""
    import ctypes
    import tempfile
    from bnmem import native
    from bnmem.train.stacked_lenet import StackedLeNet
    torch.set_num_threads(1)
    x, y, _ = load_data(pool)
    with tempfile.TemporaryDirectory() as tmp:  # the stage's build, plus the phase timers
        lib = native.build("lenet_train", torch.float32, Path(tmp), defines=("BNMEM_PROFILE",))
    meta = model_spec(Config(arms=(arm,)), arm, 1, 28)
    net = StackedLeNet([build(meta, seed=j) for j in range(N_MODELS)], meta.norm,
                       torch.device("cpu"))
    step = native.TrainStep(lib, net.params, net.state, F.pad(x, (2,) * 4), y,
                            meta.norm == "batchnorm", 1e-5, 0.1, 0.0, 0.0)
    rng = np.random.default_rng(0)
    rows = torch.as_tensor(np.stack([rng.permutation(len(y))[:64] for _ in range(N_MODELS)]))
    counts = torch.full((N_MODELS,), 64)
    step(rows, counts)
    before, after = (ctypes.c_double * 16)(), (ctypes.c_double * 16)()
    lib.lenet_train_profile(before)
    for _ in range(steps):
        step(rows, counts)
    lib.lenet_train_profile(after)
    per = [(a - b) / (steps * N_MODELS * 64) * 1e6 for a, b in zip(after, before)]
    total = sum(per)
    lines = [f"Phases of the C step kernel ({arm}, {N_MODELS} models x batch 64, 1 thread, "
             f"{steps} steps; lenet_train.c built with -DBNMEM_PROFILE): "
             f"{total:.1f} us per sample-model in all. GFLOP/s against the 1-thread sgemm "
             f"peak of {peak1:.0f}.", "",
             "| phase | us per sample-model | share | GFLOP/s |", "|---|---:|---:|---:|"]
    for (name, flop), us in zip(PHASES, per):
        gf = f"{flop / us / 1e3:.0f}" if flop and us > 0 else ""
        lines.append(f"| {name} | {us:.2f} | {100 * us / total:.0f}% | {gf} |")
    return "\n".join(lines)


def run_arm(arm: str, pool: str, epochs: int, plain_models: int, repeats: int,
            dt: int) -> dict[str, tuple[int, float, float, float]]:
    """{setup: (models, wall s, CPU s, peak RSS MiB)}, best (least wall) of `repeats`."""
    a, allm, pm = (arm, pool, epochs), list(range(N_MODELS)), list(range(plain_models))
    setups = {  # name -> (models trained, jobs run side by side in fresh processes)
        f"plain loop, {dt} threads (baseline)": (pm, [("plain", dt, *a, pm)]),
        "plain loop, 1 thread": (pm, [("plain", 1, *a, pm)]),
        "train_stack autograd, 1 thread": (allm, [("stack", 1, *a, allm, 1, False)]),
        f"train_stack autograd, workers={dt}": (allm, [("stack", 1, *a, allm, dt, False)]),
        "train_stack C kernel, 1 thread": (allm, [("stack", 1, *a, allm)]),
        f"train_stack C kernel, workers={dt} (shadow stage)": (allm, [("stack", 1, *a, allm, dt)]),
        f"train_stack C kernel, {dt} processes x 1 thread":
            (allm, [("stack", 1, *a, allm[i::dt]) for i in range(dt)]),
    }
    best = {name: (np.inf, np.inf, np.inf) for name in setups}
    for _ in range(repeats):  # interleaved rounds: a disturbance hits one round of each
        for name, (_, jobs) in setups.items():
            best[name] = min(best[name], in_fresh(len(jobs), *jobs))
    return {name: (len(setups[name][0]), *best[name]) for name in setups}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pool", default="data/prepared/pool.npz")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--plain-models", type=int, default=2, help="models the plain loop trains")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--arms", nargs="+", default=list(ARMS))
    p.add_argument("--out", default="bench/results/train.md")
    args = p.parse_args()
    dt, rss0 = torch.get_num_threads(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    src, load0 = load_data(args.pool)[2], os.getloadavg()[0]
    peaks = {t: sgemm_peak(t) for t in (1, dt)}
    flops = {a: flops_per_sample(a) for a in ("lenet", "resnet", "densenet")}
    rows, gains = [], []
    for arm in args.arms:
        res = run_arm(arm, args.pool, args.epochs, args.plain_models, args.repeats, dt)
        sps = {n: m * 1000 * args.epochs / wall for n, (m, wall, _, _) in res.items()}
        cps = {n: m * 1000 * args.epochs / cpu for n, (m, _, cpu, _) in res.items()}
        base, plain1 = sps[next(iter(res))], sps["plain loop, 1 thread"]
        for name, (_, _, _, rss) in res.items():
            gf = sps[name] * flops["lenet"] / 1e9
            rows.append(f"| {arm} | {name} | {sps[name]:.0f} | {sps[name] / base:.2f}x "
                        f"| {sps[name] / plain1:.2f}x | {cps[name]:.0f} | {gf:.1f} "
                        f"| {100 * gf / peaks[dt]:.0f}% | {rss:.0f} |")
            print(rows[-1], flush=True)
        gains.append(f"{arm} {cps['train_stack C kernel, 1 thread'] / cps['plain loop, 1 thread']:.2f}x"
                     f" (autograd {cps['train_stack autograd, 1 thread'] / cps['plain loop, 1 thread']:.2f}x)")
    table = profile_table("batchnorm", args.pool)
    phases = kernel_profile("batchnorm", args.pool, peaks[1])
    lines = [
        "# Shadow training throughput (bench/bench_train.py)", "",
        f"LeNet, {N_MODELS} models on 1000-sample subsets of {src}, batch 64, "
        f"{args.epochs} epoch(s); best of {args.repeats} rounds, each setup in a fresh process. "
        f"torch {torch.__version__}, {os.cpu_count()} CPUs (default threads {dt}); 1-min load "
        f"average {load0:.1f} at start, {os.getloadavg()[0]:.1f} at end (other jobs share the "
        f"cores). Ratio: samples/s per model vs the plain loop at {dt} threads, same run. "
        f"GFLOP/s: samples/s x {flops['lenet'] / 1e6:.2f} MFLOP; % of the {dt}-thread sgemm "
        "peak.", "",
        "| arm | setup | samples/s per model | ratio | vs plain, 1 thread | samples per "
        "CPU-second | GFLOP/s | % of peak | peak RSS MiB |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|", *rows, "",
        "Per-core gain of train_stack with the C kernel over the plain loop (samples per "
        "CPU-second, both 1 thread): " + ", ".join(gains) + ".", "",
        "sgemm peak (2048^2 float32 mm, best of 5): "
        + ", ".join(f"{t} thread(s) {v:.0f} GFLOP/s" for t, v in peaks.items()), "",
        "FLOPs per sample, one training step forward + backward (FlopCounterMode, batchnorm, "
        "28 px, batch 64): " + ", ".join(f"{a} {v / 1e6:.2f} MFLOP" for a, v in flops.items()),
        "",
        "Peak RSS: resident-memory high-water mark while training (VmHWM, reset after warm-up), "
        f"summed over processes; it includes the {rss0:.0f} MiB that importing torch takes here.",
        "", phases, "",
        "Top ops, one epoch of a 16-model batchnorm stack on the autograd path (BNMEM_NATIVE=0; "
        "the path for GPUs and group/layer norm), 1 thread (torch.profiler):", "",
        "```", table, "```", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
