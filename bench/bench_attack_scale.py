"""What the attack stage costs at scale: one arm of synthetic shadow shards (m models x N
samples x 2 queries x 10 classes, per-epoch tracking), through the attack stage's own
entry point (bnmem.attack.stage.attack_arms), at a few (N, draws) to fit a cost model and
extrapolate to the full-scale protocol (64 models x 59 000 samples x 200 draws).

    python bench/bench_attack_scale.py --models 64 --sizes 4000 8000 --draws 20 40

One process (shadow.workers 1: the stage splits draws over 2 processes, halving wall time
on 2 cores); the synthetic signals carry no membership signal, which changes no cost.
"""
from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import bnmem  # noqa: F401  (pins the CPU kernels first)
import numpy as np

from bnmem.core.config import AttackConfig, Config, ShadowConfig
from bnmem.core.io import save_npz
from bnmem.attack.stage import attack_arms
from bnmem.core.keep import keep_matrix


def shard(path: Path, m: int, n: int, epochs: int, rng: np.random.Generator) -> np.ndarray:
    labels = rng.integers(0, 10, n)
    logits = rng.normal(size=(m, n, 2, 10)).astype(np.float32)
    logits[np.arange(m)[:, None], np.arange(n)[None, :], :, labels[None, :]] += 2.0
    save_npz(path, logits=logits, keep=keep_matrix(m, n, 0), model_ids=np.arange(m),
             epoch_phi=rng.normal(size=(m, epochs, n)).astype(np.float32),
             epoch_correct=rng.random((m, epochs, n)) < 0.8)
    return labels


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=int, default=64)
    p.add_argument("--sizes", type=int, nargs="+", default=[4000, 8000])
    p.add_argument("--draws", type=int, nargs="+", default=[20, 40])
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--target-n", type=int, default=59000)
    p.add_argument("--target-draws", type=int, default=200)
    p.add_argument("--out", default="bench/results/attack_scale.md")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            path = Path(tmp) / f"shard_{n}.npz"
            labels = shard(path, args.models, n, args.epochs, rng)
            kind = np.zeros(n, np.int8)
            kind[rng.choice(n, n // 20, replace=False)] = 1
            for draws in args.draws:
                cfg = Config(shadow=ShadowConfig(n_models=args.models, workers=1),
                             attack=AttackConfig(model_bootstrap=draws, bootstrap=200))
                t0 = time.perf_counter()
                attack_arms(cfg, labels, kind, {"batchnorm": [path]})
                rows.append((n, draws, time.perf_counter() - t0))
                print(f"N={n} draws={draws}: {rows[-1][2]:.1f} s", flush=True)
    # cost = a * N + b * N * draws (fixed part per sample, bootstrap part per sample x draw)
    A = np.array([[n, n * d] for n, d, _ in rows], float)
    (a, b), *_ = np.linalg.lstsq(A, np.array([t for *_, t in rows]), rcond=None)
    full = a * args.target_n + b * args.target_n * args.target_draws
    lines = [f"# Attack stage at scale (bench/bench_attack_scale.py): one arm, {args.models} "
             f"shadow models, {args.epochs} tracked epochs, one process", "",
             "| pool samples N | models+samples draws | wall (s) |", "|---|---|---|"]
    lines += [f"| {n} | {d} | {t:.1f} |" for n, d, t in rows]
    lines += ["", f"Least-squares fit: {a * 1e3:.2f} ms per sample + {b * 1e6:.0f} us per "
              f"sample and draw. Extrapolated to N = {args.target_n}: "
              f"{full / 60:.1f} min per arm at {args.target_draws} draws, "
              f"{(a + b * 20) * args.target_n / 60:.1f} min at 20 draws (one process; the stage "
              "runs two). Peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB."]
    print("\n".join(lines))
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
