"""Which training defaults let every arm (no norm, BN, GroupNorm) of ResNet / DenseNet fit?

Trains one target model per (arch, arm, setting) on the committed default pool
(data/prepared/pool.npz: Fashion-MNIST, 2 000 images, 5 % flipped + 1 % OOD) with the
train stage's own code (bnmem.train.recipe.fit) and records final clean-train and test
accuracy. One JSON line per finished run in --out (a rerun skips finished runs), and a
markdown table beside it.

    python tools/arch_search.py --epochs 6 --out results/arch_search.jsonl

Fit rule (stated in README): an arm *trains* when its clean-train accuracy after the
search's epochs is at least --min-fit (default 0.80); a setting is usable for a cell when
every arm trains with the same hyper-parameters.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import bnmem  # noqa: F401  (pins the CPU kernels first)
import torch

from bnmem.core.config import Config, ModelConfig, TrainConfig
from bnmem.core.kinds import CLEAN
from bnmem.data.images import preprocess
from bnmem.core.io import load_npz
from bnmem.train.recipe import fit
from bnmem.models.spec import model_spec
from bnmem.models.runtime import predict

SETTINGS = {  # name -> (lr, warmup_epochs, zero_init_residual, init)
    "default": (0.05, 0, False, "default"),
    "lr0.02": (0.02, 0, False, "default"),
    "warmup+zero": (0.05, 1, True, "default"),
    "lr0.02+warmup+zero": (0.02, 1, True, "default"),
    "kaiming": (0.05, 0, False, "kaiming"),
    "kaiming+warmup": (0.05, 1, False, "kaiming"),
    "kaiming+warmup+zero": (0.05, 1, True, "kaiming"),
    "kaiming+lr0.1": (0.1, 0, False, "kaiming"),
    "kaiming+lr0.1+warmup": (0.1, 1, False, "kaiming"),
    "kaiming+warmup+lr0.08": (0.08, 1, False, "kaiming"),
}


def run(arch: str, arm: str, setting: str, epochs: int, pool: dict, test: dict) -> dict:
    lr, warmup, zero, init = SETTINGS[setting]
    zero = zero and arch in ("resnet", "resnet_cpu")  # the residual architectures
    cfg = Config(arch=arch, arms=(arm,), model=ModelConfig(zero_init_residual=zero, init=init),
                 train=TrainConfig(epochs=epochs, lr=lr, warmup_epochs=warmup,
                                   checkpoints=(epochs,), threads=1))
    x, y = preprocess(pool["x"], cfg.dataset), torch.as_tensor(pool["y_train"])
    meta = model_spec(cfg, arm, x.shape[1], x.shape[2])
    t0 = time.perf_counter()
    model, hist = fit(cfg, arm, x, y, meta, init_seed=0, order_seed=0)
    seconds = time.perf_counter() - t0
    pred = predict(model, x).argmax(1).numpy()
    clean = pool["kind"] == CLEAN
    test_pred = predict(model, preprocess(test["x"], cfg.dataset)).argmax(1).numpy()
    return {"arch": arch, "arm": arm, "setting": setting, "epochs": epochs, "lr": lr,
            "warmup_epochs": warmup, "zero_init_residual": zero, "init": init,
            "clean_train_acc": float((pred[clean] == pool["y_train"][clean]).mean()),
            "test_acc": float((test_pred == test["y"]).mean()),
            "final_loss": hist[-1]["loss"], "seconds": round(seconds, 1)}


def table(rows: list[dict], min_fit: float) -> str:
    out = ["| arch | setting | epochs | lr | warm-up | zero-init residual | init | " + " | ".join(
        f"{a}: clean train / test" for a in ("none", "batchnorm", "groupnorm")) + " | every arm trains |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    keyed = {(r["arch"], r["setting"], r["epochs"], r["arm"]): r for r in rows}
    order = list(SETTINGS)
    groups = sorted(dict.fromkeys((r["arch"], r["setting"], r["epochs"]) for r in rows),
                    key=lambda g: (g[0], g[2], order.index(g[1])))
    for arch, s, epochs in groups:
        cells = [keyed.get((arch, s, epochs, a)) for a in ("none", "batchnorm", "groupnorm")]
        lr, warm, zero, init = SETTINGS[s]
        ok = all(c and c["clean_train_acc"] >= min_fit for c in cells)
        zero = zero and arch in ("resnet", "resnet_cpu")
        out.append(f"| {arch} | {s} | {epochs} | {lr} | {warm} | {'yes' if zero else 'no'} | "
                   f"{init} | " + " | ".join(f"{c['clean_train_acc']:.3f} / {c['test_acc']:.3f}"
                                             if c else "—" for c in cells)
                   + f" | {'yes' if ok else 'no'} |")
    return "\n".join(out) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--archs", nargs="+", default=["resnet", "densenet"])
    p.add_argument("--arms", nargs="+", default=["none", "batchnorm", "groupnorm"])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS))
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--min-fit", type=float, default=0.80)
    p.add_argument("--out", default="results/arch_search.jsonl")
    args = p.parse_args()
    torch.set_num_threads(1)
    pool = load_npz("data/prepared/pool.npz", ("x", "y_train", "kind"))
    test = load_npz("data/prepared/test.npz", ("x", "y"))
    out = Path(args.out)
    rows = [json.loads(ln) for ln in out.read_text().splitlines()] if out.is_file() else []
    done = {(r["arch"], r["arm"], r["setting"], r["epochs"]) for r in rows}
    for arch in args.archs:
        for setting in args.settings:
            for arm in args.arms:
                if (arch, arm, setting, args.epochs) in done:
                    continue
                r = run(arch, arm, setting, args.epochs, pool, test)
                print(json.dumps(r), flush=True)
                rows.append(r)
                with out.open("a") as f:
                    f.write(json.dumps(r) + "\n")
                out.with_suffix(".md").write_text(table(rows, args.min_fit))
    out.with_suffix(".md").write_text(table(rows, args.min_fit))


if __name__ == "__main__":
    main()
