"""train@<arm>: train one arm on the whole pool, evaluating memorization every epoch."""
import argparse
import logging
from pathlib import Path

import pandas as pd
import torch

from bnmem import cli
from bnmem.config import load_config
from bnmem.data import preprocess
from bnmem.evaluate import epochs_to, gamma_sigma, memorization
from bnmem.io import atomic_path, load_npz, save_json, save_state
from bnmem.pipeline import fit, load_pool, model_meta, tensors
from bnmem.train import predict

log = logging.getLogger("bnmem.train")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--recipe", required=True, help="data/recipes/<arm>.yaml from configure")
    p.add_argument("--pool", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--model", required=True, help="output state_dict (.pt); .json beside it")
    p.add_argument("--checkpoints", required=True, help="output folder of epoch_<k>.pt")
    p.add_argument("--curves", required=True, help="output per-epoch CSV")
    args = p.parse_args()
    cfg = load_config(args.recipe)
    arm = cfg.arms[0]
    cli.setup(cfg.train.threads)
    pool, test = load_pool(args.pool), load_npz(args.test, ("x", "y"))
    x, y = tensors(pool, cfg.dataset)
    x_test = preprocess(test["x"], cfg.dataset)
    meta = model_meta(cfg, arm, x.shape[1], x.shape[2])
    ckpt_dir = Path(args.checkpoints)
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    def on_epoch(epoch: int, model: torch.nn.Module, rec: dict) -> None:
        rec.update(memorization(predict(model, x), pool["y_train"], pool["kind"],
                                predict(model, x_test), test["y"]))
        bn = gamma_sigma(model)
        if bn:
            rec["median_gamma_sigma"] = float(torch.tensor([v["median_ratio"] for v in bn.values()]).median())
            rec["share_gamma_sigma_above_1"] = sum(v["share_above_1"] for v in bn.values()) / len(bn)
        if epoch in cfg.train.checkpoints:
            save_state(ckpt_dir / f"epoch_{epoch}.pt", model.state_dict())
        log.info("%s epoch %d loss %.4f clean %.3f flipped %.3f ood %.3f test %.3f (%.1f s)",
                 arm, epoch, rec["loss"], rec["clean_train_acc"] or 0,
                 rec["flipped_mem_acc"] or 0, rec["ood_mem_acc"] or 0, rec["test_acc"],
                 rec["seconds"])

    model, history = fit(cfg, arm, x, y, meta, init_seed=cfg.seed, order_seed=cfg.seed,
                         on_epoch=on_epoch, progress=True)
    save_state(ckpt_dir / f"epoch_{cfg.train.epochs}.pt", model.state_dict())
    save_state(args.model, model.state_dict())
    final = {k: v for k, v in history[-1].items() if k not in ("epoch", "lr", "seconds")}
    final["epochs_to_mem_50"] = epochs_to(history, "flipped_mem_acc", 0.5)
    meta.update(metrics=final,  # wall time kept out of metrics: metrics must be byte-stable
                train_seconds=round(sum(r["seconds"] for r in history), 2),
                checkpoints=sorted(set(cfg.train.checkpoints) | {cfg.train.epochs}),
                gamma_sigma=gamma_sigma(model))
    save_json(Path(args.model).with_suffix(".json"), meta)
    with atomic_path(args.curves) as tmp:
        pd.DataFrame(history).drop(columns=["seconds"]).to_csv(tmp, index=False, float_format="%.6g")


if __name__ == "__main__":
    cli.run(main, "train")
