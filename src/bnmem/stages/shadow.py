"""shadow@<arm>-<shard>: train one shard of an arm's shadow models and query them.

Models train `shadow.chunk` at a time as one stacked network (bnmem.train.stacked, LeNet; other
archs fall back to the plain loop), here or, with shadow.backend: dask in --params, as tasks
on a Dask cluster (bnmem.train.scaleout). Each finished model's logits are kept in
`<out>.partial/` so a killed run resumes without retraining them.
"""
import argparse
import logging
import shutil
import time
from pathlib import Path

from bnmem.core import cli
from bnmem.core.config import ConfigError, load_config
from bnmem.core.io import save_npz
from bnmem.data.pool import load_pool
from bnmem.train.shadow import resume_key, shadow_shard

log = logging.getLogger("bnmem.train.shadow")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--recipe", required=True, help="data/recipes/<arm>.yaml from configure")
    p.add_argument("--pool", required=True)
    p.add_argument("--shard", type=int, required=True)
    p.add_argument("--out", required=True, help="output shard_<k>.npz")
    p.add_argument("--params", help="params.yaml, read only for where shadows run "
                   "(shadow.backend, resources, retries, tls): not a dependency, since the "
                   "backend never changes the bits; absent: the local backend")
    args = p.parse_args()
    cfg = load_config(args.recipe)
    if not 0 <= args.shard < cfg.shadow.shards:
        raise ConfigError(f"shadow.shards: shard {args.shard} outside 0 .. {cfg.shadow.shards - 1}")
    execution = load_config(args.params).shadow if args.params else None
    cli.setup(cfg.train.threads)
    parts = Path(args.out).with_suffix(".partial")
    t0 = time.perf_counter()
    arrays = shadow_shard(cfg, load_pool(args.pool), args.shard, parts,
                          resume_key(Path(args.recipe), Path(args.pool)),
                          progress=f"shard {args.shard}", execution=execution)
    save_npz(args.out, **arrays)  # no wall time: outputs are bit-identical across runs
    log.info("%s: %.1f s", args.out, time.perf_counter() - t0)
    shutil.rmtree(parts, ignore_errors=True)


if __name__ == "__main__":
    cli.run(main, "shadow")
