"""replicate@<arm>-<seed>: one extra training seed of one arm, end to end.

The same library calls as train@, grads@, shadow@ and attack (bnmem.steps,
bnmem.attack.stage), with `seed` replaced by --seed for everything training draws (target
init and batch order, shadow keep masks and seeds) on the pool prepared with `seed`.
Writes the target model, the shadow models (one shard) and one JSON record
(bnmem.report.replicates.arm_record) that the report turns into means and CIs across seeds.
"""
import argparse
import dataclasses
import logging
import shutil
from pathlib import Path

from bnmem.core import cli
from bnmem.core.config import load_config
from bnmem.grads.checkpoints import grads_for_arm
from bnmem.core.io import load_npz, save_json, save_npz, save_state
from bnmem.attack.stage import attack_one_arm
from bnmem.data.pool import load_pool
from bnmem.train.target import train_arm
from bnmem.report.replicates import arm_record
from bnmem.train.shadow import resume_key, shadow_shard
from bnmem.report.summary import gamma_sigma_summary

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
    cfg = dataclasses.replace(base_cfg, seed=args.seed,  # every shadow model in one shard
                              shadow=dataclasses.replace(base_cfg.shadow, shards=1, shard_ids=(0,)))
    arm, out = cfg.arms[0], Path(args.out)
    cli.setup(cfg.train.threads)
    pool, test = load_pool(args.pool), load_npz(args.test, ("x", "y"))

    model, history, target = train_arm(cfg, pool, test)
    final = cfg.train.epochs
    _, grads, _ = grads_for_arm(cfg, pool, target.spec, [final], [model.state_dict()])
    parts = out.with_name(out.stem + "_shadow.partial")
    shadow = shadow_shard(cfg, pool, 0, parts,
                          resume_key(Path(args.recipe), Path(args.pool), str(cfg.seed)),
                          progress=f"seed {cfg.seed}")
    lira, curve = attack_one_arm(cfg, shadow, pool["y_train"], pool["kind"])
    record = arm_record(history, grads, lira, curve, gamma_sigma_summary(target.gamma_sigma))
    save_state(out.with_suffix(".pt"), model.state_dict())
    save_npz(out.with_name(out.stem + "_shadow.npz"), **shadow)
    save_json(out, {"arm": arm, "seed": cfg.seed, "record": record})
    shutil.rmtree(parts, ignore_errors=True)
    log.info("%s seed %d: headline AUC all %.4f", arm, cfg.seed, lira["all"]["auc"])


if __name__ == "__main__":
    cli.run(main, "replicate")
