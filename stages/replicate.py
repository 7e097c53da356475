"""replicate@<arm>-<seed>: one extra training seed of one arm, end to end.

The same code as train@, grads@, shadow@ and attack, with `seed` replaced by --seed for
everything training draws (target init and batch order, shadow keep masks and seeds) on
the pool prepared with `seed`. Writes the target model, the shadow shard and one JSON
record (bnmem.seeds.arm_record) that the report turns into means and CIs across seeds.
"""
import _boot  # noqa: F401, I001  (first: pins the CPU kernels; one-line error without bnmem)
import argparse
import dataclasses
import hashlib
import logging
import shutil
from pathlib import Path

import numpy as np

from bnmem import cli
from bnmem.attack import PairSignals, loo_lira, signals
from bnmem.config import load_config
from bnmem.grads import grad_norms, summarize
from bnmem.io import load_npz, save_json, save_npz, save_state
from bnmem.membership import headline_variant
from bnmem.resample import arm_draw, epoch_pairs
from bnmem.pipeline import load_pool, tensors, train_target
from bnmem.roc import evaluate
from bnmem.seeds import arm_record
from bnmem.summary import gamma_sigma_summary
from bnmem.shadow import fingerprint, keep_matrix, train_shadows
from bnmem.train import batch_order

log = logging.getLogger("bnmem.replicate")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--recipe", required=True, help="data/recipes/<arm>.yaml from configure")
    p.add_argument("--seed", type=int, required=True, help="the replicate's training seed")
    p.add_argument("--pool", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--out", required=True, help="output seed_<s>.json; .pt and _shadow.npz beside it")
    args = p.parse_args()
    base_cfg = load_config(args.recipe)
    cfg, arm = dataclasses.replace(base_cfg, seed=args.seed), base_cfg.arms[0]
    cli.setup(cfg.train.threads)
    pool, test = load_pool(args.pool), load_npz(args.test, ("x", "y"))
    x, y = tensors(pool, cfg.dataset)
    kind, out = pool["kind"], Path(args.out)

    model, history, meta = train_target(cfg, arm, pool, test, progress=True)
    log.info("%s seed %d: target trained, flipped_mem_acc %.3f", arm, cfg.seed,
             history[-1]["flipped_mem_acc"] or 0)
    batches = batch_order(len(y), cfg.train.batch_size, 1, cfg.seed)[0]
    norms = grad_norms(model, x, y, cfg.grads.definition, cfg.grads.chunk_size, batches,
                       workers=cfg.grads.workers).norms

    s = cfg.shadow
    keep = keep_matrix(s.n_models, len(y), cfg.seed)
    base = fingerprint(Path(args.recipe).read_text(), str(cfg.seed),
                       hashlib.sha256(Path(args.pool).read_bytes()).hexdigest())
    parts = out.with_name(out.stem + "_shadow.partial")
    shadow = train_shadows(cfg, arm, x, y, keep, np.arange(s.n_models), parts, base,
                           progress=f"seed {cfg.seed}")
    identity = s.queries.index("identity") if "identity" in s.queries else 0
    phi, _, _ = signals(shadow["logits"], pool["y_train"], identity)
    ids, variant = np.arange(s.n_models), headline_variant(s.n_models // 2 - 1)
    scores = loo_lira(phi, keep, ids, cfg.attack.offline_one_sided, (variant,))
    lira, _, _ = evaluate(scores[variant], keep, kind)
    curve = None
    if s.track_epochs:  # the shadows' per-epoch fit and AUC, as the attack stage's draw 0
        data = {"phi": phi, "keep": keep, "correct": phi[..., identity] > 0, "model_ids": ids,
                "epoch_phi": shadow["epoch_phi"], "epoch_correct": shadow["epoch_correct"]}
        d0 = arm_draw(data, PairSignals.build(phi, keep, ids), epoch_pairs(data),
                      np.ones(s.n_models // 2, np.int64), np.ones(len(y)), kind, variant,
                      cfg.attack.offline_one_sided)
        curve = {k: v.tolist() for k, v in d0["epoch"].items()}
    record = arm_record(history, summarize(norms, kind), lira, curve,
                        gamma_sigma_summary(meta["gamma_sigma"]))
    save_state(out.with_suffix(".pt"), model.state_dict())
    save_npz(out.with_name(out.stem + "_shadow.npz"), **shadow)
    save_json(out, {"arm": arm, "seed": cfg.seed, "record": record})
    shutil.rmtree(parts, ignore_errors=True)
    log.info("%s seed %d: %s AUC all %.4f", arm, cfg.seed, variant, lira["all"]["auc"])


if __name__ == "__main__":
    cli.run(main, "replicate")
