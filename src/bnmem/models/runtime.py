"""Where a model runs and how work spreads over threads: the device rule, a single-threaded
map over worker threads, and batched inference."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn


def resolve_device(device: str) -> torch.device:
    """`auto` -> CUDA when present, else CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def map_single_threaded(fn: Callable, items: list, workers: int) -> list:
    """list(map(fn, items)) on `workers` OS threads that each run torch single-threaded.

    torch ops release the GIL, so threads use the cores without a process pool, and one
    intra-op thread per worker avoids OpenMP barrier stalls on shared cores. torch's
    thread count is restored afterwards. workers <= 1: a plain map in this thread.
    """
    if workers <= 1:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    def one(item):
        torch.set_num_threads(1)  # per OS thread too (OpenMP keeps it per thread)
        return fn(item)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers) as pool:
            return list(pool.map(one, items))
    finally:
        torch.set_num_threads(threads)


@torch.no_grad()
def predict(model: nn.Module, x: torch.Tensor, batch_size: int = 1024) -> torch.Tensor:
    """Logits in eval mode (running BN statistics), float32 [N, C], on the CPU."""
    model.eval()
    device = next(model.parameters()).device
    out = [model(x[i:i + batch_size].to(device)).float().cpu() for i in range(0, len(x), batch_size)]
    return torch.cat(out) if out else torch.zeros(0)
