"""prepare: split the dataset into a pool and a test set, then corrupt the pool."""
import argparse
import logging

import numpy as np

from bnmem.core import cli
from bnmem.core.config import ConfigError, load_config, user_dataset
from bnmem.data.corrupt import corrupt, split
from bnmem.core.io import save_npz
from bnmem.core.rng import SALT
from bnmem.data.sources import class_count, load_splits, ood_images

log = logging.getLogger("bnmem.prepare")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--pool", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--ood-source", help="data.ood_source when it is your file (a DVC dep)")
    args = p.parse_args()
    cfg = load_config(args.params)
    ood = cfg.data.ood_source
    if ood is not None and user_dataset(ood) and args.ood_source != ood:
        raise ConfigError(f"data.ood_source: {ood!r} is your file, but the stage got "
                          f"--ood-source {args.ood_source!r}: it must be a dependency of "
                          "prepare (python tools/audit_project.py <project> writes both)")
    cli.setup(torch=False)  # a loader that needs torch (torchvision) imports it itself
    train, test = load_splits(cfg.dataset, cfg.data)
    ood_name, ood = ood_images(cfg.dataset, cfg.data) if cfg.ood_rate > 0 else ("none", None)
    rng = np.random.default_rng([cfg.seed, SALT["prepare"]])
    pool, held_out = split(train, test, cfg.pool_size, cfg.data.test_size, rng)
    ood_x = ood.x if ood is not None else pool.x[:0]
    out = corrupt(pool.x, pool.y, ood_x, cfg.noise_rate, cfg.ood_rate,
                  class_count(cfg.dataset, cfg.data), rng)
    save_npz(args.pool, **out, index=pool.index)
    save_npz(args.test, x=held_out.x, y=held_out.y)
    log.info("pool %s (%d flipped, %d ood), test %s, ood source %s", out["x"].shape,
             int((out["kind"] == 1).sum()), int((out["kind"] == 2).sum()), held_out.x.shape, ood_name)


if __name__ == "__main__":
    cli.run(main, "prepare")
