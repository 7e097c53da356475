"""prepare: split the dataset into a pool and a test set, then corrupt the pool."""
import _boot  # noqa: F401, I001  (first: pins the CPU kernels; one-line error without bnmem)
import argparse
import logging

import numpy as np

from bnmem import cli
from bnmem.config import load_config
from bnmem.corrupt import corrupt, split
from bnmem.data import NUM_CLASSES, OOD_SOURCE, load_dataset
from bnmem.io import save_npz
from bnmem.rng import SALT

log = logging.getLogger("bnmem.prepare")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--pool", required=True)
    p.add_argument("--test", required=True)
    args = p.parse_args()
    cfg = load_config(args.params)
    cli.setup(cfg.train.threads)
    d = cfg.data
    train = load_dataset(cfg.dataset, "train", d.root, d.allow_download)
    test = load_dataset(cfg.dataset, "test", d.root, d.allow_download)
    ood_name = OOD_SOURCE[cfg.dataset]
    ood_root = d.root if ood_name.startswith("cifar") else None  # MNIST pair: packaged sources
    ood = load_dataset(ood_name, "train", ood_root, d.allow_download) if cfg.ood_rate > 0 else None
    rng = np.random.default_rng([cfg.seed, SALT["prepare"]])
    pool, held_out = split(train, test, cfg.pool_size, d.test_size, rng)
    ood_x = ood.x if ood is not None else pool.x[:0]
    out = corrupt(pool.x, pool.y, ood_x, cfg.noise_rate, cfg.ood_rate, NUM_CLASSES[cfg.dataset], rng)
    save_npz(args.pool, **out)
    save_npz(args.test, x=held_out.x, y=held_out.y)
    log.info("pool %s (%d flipped, %d ood), test %s, ood source %s", out["x"].shape,
             int((out["kind"] == 1).sum()), int((out["kind"] == 2).sum()), held_out.x.shape, ood_name)


if __name__ == "__main__":
    cli.run(main, "prepare")
