"""exposure: every arm's target model scored against its arm's shadow models, sample by
sample (bnmem.exposure.scores); in an audit, also your own trained model (--target-weights, with
--members when you know whom it trained on)."""
import argparse
import logging
from pathlib import Path

import numpy as np

from bnmem.core import cli
from bnmem.core.config import ConfigError, load_config
from bnmem.core.kinds import YOURS
from bnmem.exposure.scores import exposure_arms, logits_signals, read_members
from bnmem.core.io import InputError, load_npz, save_json, save_npz
from bnmem.core.records import TargetRecord
from bnmem.data.pool import load_pool

log = logging.getLogger("bnmem.exposure.scores")


def target_logits(models: Path, arm: str, queries: tuple[str, ...], pool: dict) -> np.ndarray:
    """The target model's pool logits under `queries` [N, Q, C], as the train stage saved
    them (data/models/<arm>_eval.npz); one line naming the file when they are missing or
    were saved for other queries or another pool."""
    path = models / f"{arm}_eval.npz"
    z = load_npz(path)
    saved = tuple(str(q) for q in z.get("queries", ()))
    logits = z.get("pool_logits")
    if logits is None or saved != tuple(queries) or logits.shape[:2] != (pool["y_train"].size,
                                                                       len(queries)):
        raise InputError(f"{path}: holds no pool logits for queries {list(queries)} on this "
                         f"pool (saved: {list(saved)}); re-run train@{arm} (dvc repro)")
    return logits


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--pool", required=True)
    p.add_argument("--models", required=True, help="folder of <arm>.pt / <arm>.json")
    p.add_argument("--shadow-dir", required=True, help="holds <arm>/shard_<k>.npz")
    p.add_argument("--out", required=True, help="output JSON (results/exposure.json)")
    p.add_argument("--scores-dir", required=True, help="output <arm>.npz per-sample exposure")
    p.add_argument("--target-weights", help="your trained model's state_dict (.pt)")
    p.add_argument("--members", help="rows of your dataset it trained on (.npy or text)")
    args = p.parse_args()
    cfg = load_config(args.params)
    given = {"audit.target_weights": (cfg.audit.target_weights, args.target_weights),
             "audit.members": (cfg.audit.members, args.members)}
    for key, (param, flag) in given.items():  # before any work: dvc.yaml tracks these files
        if (param is None) != (flag is None):
            raise ConfigError(f"{key}: {param!r} in params, but the stage got "
                              f"{'--' + key.split('.')[1].replace('_', '-')} {flag!r}; "
                              "regenerate dvc.yaml: python tools/audit_project.py <project dir>")
    if args.target_weights and cfg.audit.target_arm not in cfg.arms:
        raise ConfigError(f"audit.target_arm: {cfg.audit.target_arm!r} is not in arms "
                          f"{list(cfg.arms)}; its shadows are the reference for your model")
    # the targets' query logits come from the train stage: torch only for your own model
    cli.setup(cfg.train.threads, torch=bool(args.target_weights))
    pool = load_pool(args.pool)
    models = Path(args.models)
    targets = {a: logits_signals(target_logits(models, a, cfg.shadow.queries, pool),
                                 pool["y_train"], cfg.shadow.queries) for a in cfg.arms}
    shards = {a: [Path(args.shadow_dir) / a / f"shard_{k}.npz" for k in cfg.shadow.shard_ids]
              for a in cfg.arms}
    own = None
    if args.target_weights:
        from bnmem.core.io import load_state
        from bnmem.data.pool import tensors  # noqa: I001 (torch: your own model only)
        from bnmem.exposure.scores import load_target, target_signals
        from bnmem.models.spec import build
        arm = cfg.audit.target_arm
        spec = TargetRecord.load(models / f"{arm}.json").spec
        weights = Path(args.target_weights)
        model = load_target(build(spec), load_state(weights), weights, cfg.arch)
        index = pool.get("index", np.arange(pool["y_train"].size))
        member, listed = (read_members(Path(args.members), index) if args.members
                          else (None, None))
        x, _ = tensors(pool, cfg.dataset)
        own = (target_signals(model, x, pool["y_train"], cfg.shadow.queries, spec), member,
               {"weights": weights.name, "members_listed": listed,
                "members": Path(args.members).name if args.members else None})
    results, arrays = exposure_arms(cfg, pool, targets, shards, own)
    for name, arr in arrays.items():
        save_npz(Path(args.scores_dir) / f"{name}.npz", **arr)
    save_json(args.out, results)
    for a, r in results["arms"].items():
        log.info("%s: median exposure %.2f, max %.2f", a, r["distribution"]["median"],
                 r["distribution"]["max"])
    if results[YOURS] and results[YOURS]["lira_offline"]:
        log.info("your model: offline LiRA AUC %.4f, RMIA %.4f",
                 results[YOURS]["lira_offline"]["auc"], results[YOURS]["rmia_offline"]["auc"])


if __name__ == "__main__":
    cli.run(main, "exposure")
