"""One-command device check for the zoo (ResNet / DenseNet cells and full scale on a GPU):
training throughput of the CPU-sized and paper-sized ResNet and DenseNet, every arm of the
grid, on the accelerator or the CPU, through the train stage's loop and one shadow-stage
stack. It measures speed, not fit: every arch runs He init (the paper-sized ResNet also
zero-init residual), batch 64, no warm-up, the default lr, for --epochs epochs (grid.yaml's
recipes set lr and epochs per arch; they do not change samples per second). Writes a
markdown table. No device has been lent to any session yet, so its GPU wall time is not
measured; on 2 CPU cores `--samples 256 --epochs 1` takes about a minute.

    python bench/bench_device.py --out bench/results/device.md          # cuda if present
    python bench/bench_device.py --device cpu --samples 256 --epochs 1  # a quick CPU run

Images: --pool (default data/prepared/pool.npz, which `dvc repro` makes; on the device
machine of the `device` tool pass carry=["data/prepared"] with a prepared checkout), else
Fashion-MNIST's training split where the dataset is installed (/usr/share/datasets).

Samples per second = samples x epochs / wall time of pipeline.fit (one model, the train
stage's loop) and of stacked.train_stack (the shadow stage's path, --models models).
"""
from __future__ import annotations

import argparse
import os
import sys
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

SETTINGS = {"resnet": {"zero_init_residual": True, "init": "kaiming"},
            "densenet": {"init": "kaiming"}, "resnet_cpu": {"init": "kaiming"},
            "densenet_cpu": {"init": "kaiming"}}


def images(pool: str, samples: int) -> tuple[np.ndarray, np.ndarray]:
    """(uint8 images [n,1,28,28], labels [n]): the prepared pool, else Fashion-MNIST's
    training split; one line naming both and exit 2 where neither is there."""
    if Path(pool).is_file():
        d = load_npz(pool, ("x", "y_train"))
        return d["x"][:samples], d["y_train"][:samples]
    from bnmem.data.images import load_dataset
    try:
        d = load_dataset("fashion_mnist", "train")
    except Exception as exc:  # noqa: BLE001 - one line, whatever the loader says
        print(f"bench_device: --pool {pool} is missing and Fashion-MNIST is not installed "
              f"({exc}); run `dvc repro prepare` and carry data/prepared, or apt-get install "
              "dataset-fashion-mnist", file=sys.stderr)
        sys.exit(2)
    return d.x[:samples], d.y[:samples]


def rate(device: str, arch: str, arm: str, x, y, epochs: int, models: int) -> tuple[float, float]:
    cfg = Config(arch=arch, arms=(arm,), model=ModelConfig(**SETTINGS.get(arch, {})),
                 train=TrainConfig(epochs=epochs, checkpoints=(epochs,), warmup_epochs=0,
                                   device=device))
    meta = model_spec(cfg, arm, x.shape[1], x.shape[2])
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    t0 = time.perf_counter()
    fit(cfg, arm, x, y, meta, 0, 0)
    sync()
    one = len(y) * epochs / (time.perf_counter() - t0)
    keep = np.zeros((models, len(y)), bool)
    for k in range(models):
        keep[k, np.random.default_rng(k).choice(len(y), len(y) // 2, replace=False)] = True
    t0 = time.perf_counter()
    train_stack(cfg, arm, x, y, keep, meta, list(range(models)), list(range(models)),
                workers=2 if device == "cpu" else 1)
    sync()
    stack = models * (len(y) // 2) * epochs / (time.perf_counter() - t0)
    return one, stack


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--models", type=int, default=4)
    p.add_argument("--archs", nargs="+", default=["resnet_cpu", "densenet_cpu", "resnet", "densenet"])
    p.add_argument("--pool", default="data/prepared/pool.npz")
    p.add_argument("--arms", nargs="+", default=["none", "batchnorm", "groupnorm"])
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "bench/results"), "device.md"))
    args = p.parse_args()
    raw, labels = images(args.pool, args.samples)
    x = preprocess(raw, "fashion_mnist")
    y = torch.as_tensor(labels)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    lines = [f"# Device check: {name}", "",
             f"{args.samples} samples, {args.epochs} epochs, batch 64; stack: {args.models} "
             "models on half the samples each. Samples/s.", "",
             "| arch | arm | train stage loop | shadow stage stack |", "|---|---|---|---|"]
    for arch in args.archs:
        for arm in args.arms:
            one, stack = rate(args.device, arch, arm, x, y, args.epochs, args.models)
            lines.append(f"| {arch} | {arm} | {one:.0f} | {stack:.0f} |")
            print(lines[-1], flush=True)
    lines += ["", f"*Command: `python bench/bench_device.py --device {args.device}`; torch "
              f"{torch.__version__}*", ""]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
