"""train@<arm>: train one arm on the whole pool, evaluating memorization every epoch."""
import argparse
from pathlib import Path

import pandas as pd

from bnmem import cli
from bnmem.config import load_config
from bnmem.io import atomic_path, load_npz, save_json, save_state
from bnmem.pipeline import load_pool, train_arm


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
    kernels = cli.setup(cfg.train.threads)
    model, history, meta = train_arm(cfg, load_pool(args.pool), load_npz(args.test, ("x", "y")),
                                     Path(args.checkpoints))
    save_state(args.model, model.state_dict())
    save_json(Path(args.model).with_suffix(".json"), {**meta, "cpu_kernels": kernels})
    with atomic_path(args.curves) as tmp:
        pd.DataFrame(history).drop(columns=["seconds"]).to_csv(tmp, index=False, float_format="%.6g")


if __name__ == "__main__":
    cli.run(main, "train")
