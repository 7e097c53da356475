"""shadow@<arm>-<shard>: train one shard of an arm's shadow models and query them.

Models train `shadow.chunk` at a time as one stacked network (bnmem.stacked, LeNet; other
archs fall back to the plain loop). Each finished model's logits are kept in
`<out>.partial/` so a killed run resumes without retraining them.
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
from bnmem.pipeline import build, load_pool, model_meta, tensors
from bnmem.shadow import fingerprint, keep_matrix, load_part, model_seeds, query, save_part, shard_ids
from bnmem.stacked import train_stack

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
    stamp = {int(j): fingerprint(base, str(j)) for j in ids}
    logits = {int(j): load_part(parts / f"model_{j}.npz", stamp[int(j)]) for j in ids}
    todo = [j for j in logits if logits[j] is None]
    log.info("%s shard %d: %d models, %d resumed", arm, args.shard, len(ids), len(ids) - len(todo))
    bar = tqdm(total=len(todo), desc=f"shadow {arm} shard {args.shard}")
    for k in range(0, len(todo), s.chunk):
        chunk, t0 = todo[k:k + s.chunk], time.perf_counter()
        seeds = [model_seeds(cfg.seed, j) for j in chunk]
        states, hists = train_stack(cfg, arm, x, y, keep[chunk], meta, [a for a, _ in seeds],
                                    [b for _, b in seeds], workers=s.workers)
        for j, state, hist in zip(chunk, states, hists):
            model = build(meta)
            model.load_state_dict(state)
            logits[j] = query(model, x, s.queries)
            save_part(parts / f"model_{j}.npz", logits[j], stamp[j])
            log.info("%s model %d: %d samples, final loss %.4f", arm, j, keep[j].sum(), hist[-1]["loss"])
        log.info("%s: %d models in %.1f s", arm, len(chunk), time.perf_counter() - t0)
        bar.update(len(chunk))
    bar.close()
    save_npz(args.out, logits=np.stack([logits[int(j)] for j in ids]).astype(np.float32),
             keep=keep[ids], model_ids=ids)
    shutil.rmtree(parts, ignore_errors=True)


if __name__ == "__main__":
    cli.run(main, "shadow")
