"""train@<arm>: train one arm on the whole pool, evaluating memorization every epoch."""
import _boot  # noqa: F401, I001  (first: pins the CPU kernels; one-line error without bnmem)
import argparse
import logging
from pathlib import Path

import pandas as pd
import torch

from bnmem import cli
from bnmem.config import load_config
from bnmem.io import atomic_path, load_npz, save_json, save_state
from bnmem.pipeline import load_pool, train_target

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
    kernels = cli.setup(cfg.train.threads)
    pool, test = load_pool(args.pool), load_npz(args.test, ("x", "y"))
    ckpt_dir = Path(args.checkpoints)
    ckpt_dir.mkdir(parents=True, exist_ok=True)

    def on_epoch(epoch: int, model: torch.nn.Module, rec: dict) -> None:
        if epoch in cfg.train.checkpoints:
            save_state(ckpt_dir / f"epoch_{epoch}.pt", model.state_dict())
        log.info("%s epoch %d loss %.4f clean %.3f flipped %.3f ood %.3f test %.3f (%.1f s)",
                 arm, epoch, rec["loss"], rec["clean_train_acc"] or 0,
                 rec["flipped_mem_acc"] or 0, rec["ood_mem_acc"] or 0, rec["test_acc"],
                 rec["seconds"])

    model, history, meta = train_target(cfg, arm, pool, test, on_epoch, progress=True)
    save_state(ckpt_dir / f"epoch_{cfg.train.epochs}.pt", model.state_dict())
    save_state(args.model, model.state_dict())
    save_json(Path(args.model).with_suffix(".json"), {**meta, "cpu_kernels": kernels})
    with atomic_path(args.curves) as tmp:
        pd.DataFrame(history).drop(columns=["seconds"]).to_csv(tmp, index=False, float_format="%.6g")


if __name__ == "__main__":
    cli.run(main, "train")
