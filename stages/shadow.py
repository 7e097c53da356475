"""shadow@<arm>-<shard>: train one shard of an arm's shadow models and query them.

Finished models are kept in `<out>.partial/` so a killed run resumes where it stopped.
"""
import argparse
import hashlib
import logging
import shutil
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bnmem import cli
from bnmem.config import ConfigError, load_config
from bnmem.io import save_npz
from bnmem.pipeline import fit, load_pool, model_meta, tensors
from bnmem.shadow import fingerprint, keep_matrix, load_part, model_seeds, query, save_part, shard_ids

log = logging.getLogger("bnmem.shadow")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--recipe", required=True, help="data/recipes/<arm>.yaml from configure")
    p.add_argument("--pool", required=True)
    p.add_argument("--shard", type=int, required=True)
    p.add_argument("--out", required=True, help="output shard_<k>.npz")
    args = p.parse_args()
    cfg = load_config(args.recipe)
    s, arm = cfg.shadow, cfg.arms[0]
    if not 0 <= args.shard < s.shards:
        raise ConfigError(f"shadow.shards: shard {args.shard} outside 0 .. {s.shards - 1}")
    cli.setup(cfg.train.threads)
    pool = load_pool(args.pool)
    x, y = tensors(pool, cfg.dataset)
    meta = model_meta(cfg, arm, x.shape[1], x.shape[2])
    keep = keep_matrix(s.n_models, len(y), cfg.seed)
    ids = shard_ids(s.n_models, s.shards, args.shard)
    base = fingerprint(Path(args.recipe).read_text(),
                       hashlib.sha256(Path(args.pool).read_bytes()).hexdigest())
    parts = Path(args.out).with_suffix(".partial")
    logits = []
    for j in tqdm(ids, desc=f"shadow {arm} shard {args.shard}"):
        stamp, path = fingerprint(base, str(j)), parts / f"model_{j}.npz"
        out = load_part(path, stamp)
        if out is None:
            t0 = time.perf_counter()
            init_seed, order_seed = model_seeds(cfg.seed, int(j))
            model, hist = fit(cfg, arm, x[keep[j]], y[keep[j]], meta, init_seed, order_seed)
            out = query(model.cpu(), x, s.queries)
            save_part(path, out, stamp)
            log.info("%s model %d: %d samples, loss %.4f, %.1f s", arm, j, keep[j].sum(),
                     hist[-1]["loss"], time.perf_counter() - t0)
        else:
            log.info("%s model %d: resumed from %s", arm, j, path)
        logits.append(out)
    save_npz(args.out, logits=np.stack(logits).astype(np.float32), keep=keep[ids], model_ids=ids)
    shutil.rmtree(parts, ignore_errors=True)


if __name__ == "__main__":
    cli.run(main, "shadow")
