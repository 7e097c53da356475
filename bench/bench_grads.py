"""Benchmark: per-sample gradient norms, the C kernel, the PyTorch closed forms and
torch.func vmap against a per-example autograd loop.

    python bench/bench_grads.py [--pool data/prepared/pool.npz] [--models data/models]
                                [--arm batchnorm] [--loop-subset 200] [--big 60000]
                                [--threads 1] [--out bench/results/grads.md]

Speed: every eval path over the whole pool (cold = first call, including one-off set-up
such as compiling the C kernel or torch's per-shape work, and warm = a later call) against
a loop of one forward/backward per sample in eval mode, timed on the first
`--loop-subset` samples and scaled linearly to the pool; then per core and per machine,
the loop given the same threads as each path. Memory: peak RSS (getrusage ru_maxrss) of a fresh child process that computes all
norms, for the real pool and for `--big` synthetic images (uniform random uint8 of the
pool's shape, same preprocessing), next to the child's RSS just before computing (inputs,
model and torch loaded), so the difference is what the gradient computation itself costs.
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from bnmem import native
from bnmem.grads.per_sample import grad_norms
from bnmem.core.io import load_state
from bnmem.core.records import TargetRecord
from bnmem.models.spec import build
from bnmem.data.pool import load_pool, tensors
from bnmem.core.schedule import batch_order
from bnmem.models.runtime import map_single_threaded


def load(pool_path: str, models: str, arm: str) -> tuple[torch.nn.Module, dict, dict]:
    meta = TargetRecord.load(Path(models) / f"{arm}.json").spec
    model = build(meta)
    model.load_state_dict(load_state(Path(models) / f"{arm}.pt"))
    return model, meta, load_pool(pool_path)


def loop_norms(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """The baseline: zero_grad / backward one sample at a time, eval mode."""
    model.eval()
    params = [p for p in model.parameters() if p.requires_grad]
    out = np.zeros(len(x))
    for i in range(len(x)):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        out[i] = float(torch.sqrt(sum(p.grad.double().pow(2).sum() for p in params)))
    return out


def rss_mib(field: str = "VmRSS") -> float:
    """Current (VmRSS) or peak (VmHWM) resident set of this process, from /proc."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # not Linux: peak so far


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0), so the peak excludes earlier phases
    (torch's import alone peaks ~0.7 GiB here, with its CUDA libraries mapped)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _spread(v: list[float]) -> str:
    return f"{np.median(v):.3f} [{min(v):.3f}, {max(v):.3f}]"


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects CPU affinity limits
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _loop_workers(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                  workers: int) -> None:
    """The per-example loop split over `workers` threads of one torch thread each, a model
    copy per thread: the loop given the same parallelism as the stage's fast path."""
    parts = np.array_split(np.arange(len(y)), workers)
    map_single_threaded(lambda i: loop_norms(copy.deepcopy(model), x[parts[i]], y[parts[i]]),
                        list(range(workers)), workers)


def thread_scan(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, k: int,
                chunk_size: int, rounds: int, methods: list[str]) -> dict[str, list[float]]:
    """Seconds for the whole pool per set-up: the per-example loop (timed on k samples,
    scaled) at 1 torch thread, at all cores as torch threads and as workers; each eval
    method (warm) at 1 thread and as worker threads of one torch thread each (how the grads
    stage runs with `grads.workers` = cores and `train.threads: 1`). Rounds alternate the
    set-ups so that load from other jobs hits all alike."""
    n, threads, cores = len(y), torch.get_num_threads(), _cores()
    setups = {"loop, 1 thread": ("loop", 1, 1),
              f"loop, {cores} threads": ("loop", cores, 1),
              f"loop, {cores} workers x 1 thread": ("loop", 1, cores)}
    for method in methods:
        setups[f"{method}, 1 thread"] = (method, 1, 1)
        setups[f"{method}, {cores} workers x 1 thread"] = (method, 1, cores)
    out: dict[str, list[float]] = {name: [] for name in setups}
    try:
        for r in range(rounds + 1):  # round 0 warms every set-up up
            for name, (method, t, workers) in setups.items():
                torch.set_num_threads(t)
                t0 = time.perf_counter()
                if method == "loop":
                    _loop_workers(model, x[:k], y[:k], workers)
                    sec = (time.perf_counter() - t0) * n / k
                else:
                    grad_norms(model, x, y, "eval", chunk_size, workers=workers, method=method)
                    sec = time.perf_counter() - t0
                if r:
                    out[name].append(sec)
    finally:
        torch.set_num_threads(threads)
    return out


def scan_lines(scan: dict[str, list[float]], rounds: int, k: int, n: int) -> list[str]:
    """Markdown: the scan table and the per-core / per-machine ratios it implies."""
    cores = _cores()
    med = {name: float(np.median(v)) for name, v in scan.items()}
    loop1 = med["loop, 1 thread"]
    best_loop = min(v for name, v in med.items() if name.startswith("loop"))
    lines = ["", f"Per core and per machine (same run, {rounds} rounds alternating the "
             f"set-ups, median [min, max]; the loop timed on the first {k} samples and "
             f"scaled to {n}):", "",
             "| set-up | seconds for the pool | vs loop, 1 thread | vs the fastest loop |",
             "|---|---:|---:|---:|"]
    for name, v in scan.items():
        lines.append(f"| {name} | {_spread(v)} | {loop1 / med[name]:.1f}x | "
                     f"{best_loop / med[name]:.1f}x |")
    fast = min((name for name in med if name.endswith(", 1 thread") and
                not name.startswith("loop")), key=med.get).split(",")[0]
    fast_all = med[f"{fast}, {cores} workers x 1 thread"]
    lines += ["", f"Fastest path `{fast}`: per core (both 1 thread) "
              f"**{loop1 / med[f'{fast}, 1 thread']:.1f}x**; all {cores} cores, both as "
              f"{cores} workers of one thread, "
              f"**{med[f'loop, {cores} workers x 1 thread'] / fast_all:.1f}x**; vs the "
              f"single-process loop at its best thread count "
              f"{min(loop1, med[f'loop, {cores} threads']) / fast_all:.1f}x."]
    return lines


def child(args: argparse.Namespace) -> None:
    """One measurement in a fresh process: prints JSON {n, before_mib, peak_mib, seconds}.

    before_mib: RSS with torch, model and inputs loaded; peak_mib: the peak from there on.
    """
    model, meta, pool = load(args.pool, args.models, args.arm)
    x, y = tensors(pool, meta.dataset)
    if args.n != len(y):  # synthetic images of the pool's shape, labels uniform
        rng = np.random.default_rng([0, args.n])
        raw = rng.integers(0, 256, (args.n, *pool["x"].shape[1:]), dtype=np.uint8)
        x, y = tensors({"x": raw, "y_train": rng.integers(0, meta.num_classes, args.n)},
                       meta.dataset)
        del raw
    before = rss_mib()
    reset_peak()
    batches = batch_order(args.n, 64, 1, 0)[0]
    t0 = time.perf_counter()
    grad_norms(model, x, y, args.definition, args.chunk_size, batches)
    print(json.dumps({"n": args.n, "before_mib": before, "peak_mib": rss_mib("VmHWM"),
                      "seconds": time.perf_counter() - t0}))


def measure(args: argparse.Namespace, n: int, definition: str) -> dict:
    cmd = [sys.executable, __file__, "--child", "--n", str(n), "--definition", definition,
           "--pool", args.pool, "--models", args.models, "--arm", args.arm,
           "--chunk-size", str(args.chunk_size), "--threads", str(args.threads)]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pool", default="data/prepared/pool.npz")
    p.add_argument("--models", default="data/models")
    p.add_argument("--arm", default="batchnorm")
    p.add_argument("--chunk-size", type=int, default=256)
    p.add_argument("--loop-subset", type=int, default=200)
    p.add_argument("--big", type=int, default=60000)
    p.add_argument("--threads", type=int, default=0, help="torch threads, 0 = torch default")
    p.add_argument("--rounds", type=int, default=5, help="rounds of the per-thread scan")
    p.add_argument("--out", default=None, help="also write the markdown here")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--definition", default="eval", help=argparse.SUPPRESS)
    args = p.parse_args()
    native.setup_process(args.threads)  # threads (0: torch's default) and allocator
    if args.child:
        return child(args)
    model, meta, pool = load(args.pool, args.models, args.arm)
    x, y = tensors(pool, meta.dataset)
    n, k = len(y), min(args.loop_subset, len(y))
    labels = {"vmap": "vmap(grad)", "hooks": "closed forms after one autograd backward "
              "(bnmem.grads.fastgrad)", "native": "C kernel (bnmem.native, the default for LeNet)"}
    methods = [m for m in labels if m != "native" or native.supported(model)]
    timed, norms = {}, {}
    for method in methods:
        times = []
        for _ in range(3):  # cold, then the best of two warm calls
            t0 = time.perf_counter()
            norms[method] = grad_norms(model, x, y, "eval", args.chunk_size, method=method).norms
            times.append(time.perf_counter() - t0)
        timed[method] = [times[0], min(times[1:])]
    loop_norms(model, x[:5], y[:5])  # warm-up
    t0 = time.perf_counter()
    ref = loop_norms(model, x[:k], y[:k])
    t_loop = (time.perf_counter() - t0) * n / k
    scan = thread_scan(model, x, y, k, args.chunk_size, args.rounds, methods)
    rows = [("eval", n), ("eval", args.big), ("batch", n)]
    mem = [measure(args, m, d) for d, m in rows]
    lines = [
        f"# bench_grads: per-sample gradient norms ({meta.arch}/{meta.norm}, arm "
        f"`{args.arm}`, {n} pool samples, chunk_size {args.chunk_size}, "
        f"{torch.get_num_threads()} torch threads, CPU)", "",
        "| path | seconds for the pool | samples / s | speed-up vs loop |",
        "|---|---:|---:|---:|",
        f"| per-example loop (timed on {k}, scaled x{n / k:g}) | {t_loop:.2f} | "
        f"{n / t_loop:.0f} | 1.0x |"]
    for method in methods:
        for label, sec in zip(("cold (first call)", "warm"), timed[method]):
            lines.append(f"| {labels[method]}, {label} | {sec:.2f} | {n / sec:.0f} | "
                         f"{t_loop / sec:.1f}x |")
    # float32 rounding: every path against a float64 computation of the same norms
    exact = grad_norms(copy.deepcopy(model).double(), x[:k].double(), y[:k], "eval",
                       method="vmap").norms
    lines += ["", f"Max relative difference from a float64 computation (first {k} samples, "
              "float32 paths): " + "; ".join(
                  f"{m} {np.max(np.abs(v[:k] - exact) / exact):.1e}"
                  for m, v in [("per-example loop", ref), *norms.items()]), ""]
    lines += [
        "| definition | samples | RSS before (MiB) | peak RSS during (MiB) | grads cost (MiB) | "
        "seconds (cold) | peak vs pool-size eval |", "|---|---:|---:|---:|---:|---:|---:|"]
    for (d, m), r in zip(rows, mem):
        lines.append(f"| {d} | {m} | {r['before_mib']:.0f} | {r['peak_mib']:.0f} | "
                     f"{r['peak_mib'] - r['before_mib']:.0f} | {r['seconds']:.1f} | "
                     f"{r['peak_mib'] / mem[0]['peak_mib']:.2f}x |")
    lines += scan_lines(scan, args.rounds, k, n)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
