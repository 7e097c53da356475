"""The DP arm's shadow training against the non-DP GroupNorm arm, in one run, on the same
models: the shadow stage's path (bnmem.train.stacked.train_stack, `workers` side by side,
one torch thread each) for `groupnorm` (stacked autograd LeNet) and `groupnorm_dp_eps8`
(DP-SGD through Opacus: per-sample gradients, clipping, noise; one model at a time per
worker), on real Fashion-MNIST pool samples, the default recipe (12 epochs, batch 64).

    python bench/bench_dp.py --models 4 --samples 1000 --out bench/results/dp.md

The DP arm's time includes its accountant (the noise multiplier's search, once per
training-set size and step count: cached across models). Sample-steps per second =
models x samples x epochs / wall time (all models together).
"""
from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import bnmem  # noqa: F401  (pins the CPU kernels first)
import lscpu  # noqa: E402  (bench/lscpu.py: the machine line)
import numpy as np
import torch
import yaml

from bnmem.core.config import config_from_dict
from bnmem.core.recipes import arm_recipe
from bnmem.core.io import load_npz
from bnmem.data.pool import tensors
from bnmem.models.spec import model_spec
from bnmem.train.stacked import train_stack

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("groupnorm", "groupnorm_dp_eps8")


def cpu() -> str:
    return lscpu.model_name()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--samples", type=int, default=1000, help="training-set size per model")
    p.add_argument("--epochs", type=int, default=12)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pool", default=str(ROOT / "data/prepared/pool.npz"))
    p.add_argument("--out", default=None)
    args = p.parse_args()
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(arms=list(ARMS))
    params["train"]["epochs"] = args.epochs
    base = config_from_dict(params)
    pool = load_npz(args.pool)
    x, y = tensors(pool, base.dataset)
    rng = np.random.default_rng(0)
    keep = np.zeros((args.models, len(y)), bool)
    for k in range(args.models):
        keep[k, rng.choice(len(y), args.samples, replace=False)] = True
    rows = {}
    for arm in ARMS:
        cfg = config_from_dict(arm_recipe(base, arm))
        spec = model_spec(cfg, arm, x.shape[1], x.shape[2])
        seeds = list(range(args.models))
        t0 = time.perf_counter()
        _, hists, _ = train_stack(cfg, arm, x, y, keep, spec, seeds, seeds, workers=args.workers)
        rows[arm] = (time.perf_counter() - t0, hists[0][-1])
        print(f"{arm}: {rows[arm][0]:.1f} s", flush=True)
    ratio = rows[ARMS[1]][0] / rows[ARMS[0]][0]
    steps = args.models * args.samples * args.epochs
    lines = ["# DP-SGD shadow training vs the GroupNorm arm", "",
             f"`python bench/bench_dp.py --models {args.models} --samples {args.samples} "
             f"--epochs {args.epochs} --workers {args.workers}` on {cpu()} "
             f"({torch.get_num_threads()} torch threads in the parent, {args.workers} workers "
             f"of one thread), torch {torch.__version__}, python {platform.python_version()}.", "",
             "| arm | wall (s) | sample-steps/s, all models | final loss |", "|---|---:|---:|---:|"]
    for arm, (sec, last) in rows.items():
        extra = (f" (noise multiplier {last['noise_multiplier']:.3f}, accountant ε "
                 f"{last['epsilon']:.2f})" if "noise_multiplier" in last else "")
        lines.append(f"| {arm}{extra} | {sec:.1f} | {steps / sec:.0f} | {last['loss']:.4f} |")
    lines += ["", f"DP arm / GroupNorm arm: **{ratio:.2f}×** the wall time."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
