"""attack: balanced leave-one-out LiRA and RMIA on every arm's shadow models, null
calibration, and intervals over shadow models and samples (bnmem.attack.stage)."""
import argparse
import logging
from pathlib import Path

from bnmem.core import cli
from bnmem.core.config import load_config
from bnmem.core.io import load_npz, save_csv, save_json, save_npz
from bnmem.attack.stage import attack_arms

log = logging.getLogger("bnmem.attack.lira")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--pool", required=True)
    p.add_argument("--shadow-dir", required=True, help="holds <arm>/shard_<k>.npz")
    p.add_argument("--results", required=True, help="output JSON {arm: {attack: {subset: ...}}}")
    p.add_argument("--membership", required=True, help="output JSON: headline attack, "
                   "memorization and matched fit with models+samples intervals")
    p.add_argument("--deltas", required=True, help="output JSON: every variant's arm - none "
                   "difference per subset (samples-only intervals)")
    p.add_argument("--metrics", required=True, help="output headline JSON (DVC metric)")
    p.add_argument("--scores-dir", required=True, help="output <arm>.npz per-sample scores")
    p.add_argument("--roc", required=True, help="output tidy ROC CSV")
    args = p.parse_args()
    cfg = load_config(args.params)
    cli.setup(torch=False)  # numpy only: its workers are forked processes
    pool = load_npz(args.pool, ("y_train", "kind"))
    shards = {arm: [Path(args.shadow_dir) / arm / f"shard_{k}.npz" for k in cfg.shadow.shard_ids]
              for arm in cfg.arms}
    out = attack_arms(cfg, pool["y_train"], pool["kind"], shards)
    for arm, arrays in out["scores"].items():
        save_npz(Path(args.scores_dir) / f"{arm}.npz", **arrays)
        log.info("%s: %s AUC %.4f (null %.4f)", arm, out["membership"]["variant"],
                 out["headline"][arm]["auc_all"], out["headline"][arm]["null_auc"])
    save_json(args.results, out["attack"])
    save_json(args.deltas, out["attack_deltas"])
    save_json(args.membership, out["membership"])
    save_json(args.metrics, out["headline"])
    save_csv(args.roc, out["roc"])


if __name__ == "__main__":
    cli.run(main, "attack")
