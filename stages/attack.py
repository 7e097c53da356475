"""attack: leave-one-out LiRA and RMIA on every arm's shadow models, with bootstrap CIs."""
import argparse
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from bnmem import cli
from bnmem.attack import load_shadow, memorization, run_attacks
from bnmem.config import load_config
from bnmem.io import InputError, atomic_path, load_npz, save_json, save_npz
from bnmem.matched import load_epochs, matched_lira
from bnmem.roc import ROC_GRID, bootstrap_weights, evaluate, paired_deltas

log = logging.getLogger("bnmem.attack")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--pool", required=True)
    p.add_argument("--shadow-dir", required=True, help="holds <arm>/shard_<k>.npz")
    p.add_argument("--arms", nargs="+", help="default: arms in params")
    p.add_argument("--metrics", required=True, help="output JSON {arm: {attack: {subset: ...}}}")
    p.add_argument("--scores-dir", required=True, help="output <arm>.npz per-sample scores")
    p.add_argument("--roc", required=True, help="output tidy ROC CSV")
    p.add_argument("--deltas", required=True, help="output JSON of arm - none differences")
    p.add_argument("--matched", required=True, help="output JSON: LiRA at matched utility")
    args = p.parse_args()
    cfg = load_config(args.params)
    cli.setup(cfg.train.threads)
    a, queries = cfg.attack, cfg.shadow.queries
    pool = load_npz(args.pool, ("y_train", "kind"))
    identity = queries.index("identity") if "identity" in queries else 0
    boot = bootstrap_weights(pool["kind"], a.bootstrap, np.random.default_rng([cfg.seed, 0xB007]))
    metrics, resamples, rows, epochs = {}, {}, [], {}
    for arm in args.arms or cfg.arms:
        paths = [Path(args.shadow_dir) / arm / f"shard_{k}.npz" for k in cfg.shadow.shard_ids]
        sig = load_shadow(paths, pool["y_train"], identity)
        epochs[arm] = load_epochs(paths, pool["kind"].size)
        if sig.phi.shape[0] != cfg.shadow.n_models or sig.phi.shape[2] != len(queries):
            raise InputError(f"{paths[0].parent}: {sig.phi.shape[0]} models x {sig.phi.shape[2]} "
                             f"queries, params want shadow.n_models={cfg.shadow.n_models} x "
                             f"{len(queries)} queries; re-run the shadow stage")
        scores = run_attacks(sig, a.offline_one_sided, a.rmia_gamma, a.rmia_a,
                             a.rmia_population, cfg.seed)
        mem, n_in, n_out = memorization(sig.correct, sig.keep)
        save_npz(Path(args.scores_dir) / f"{arm}.npz", **scores, keep=sig.keep,
                 model_ids=sig.model_ids, mem_score=mem, n_in=n_in, n_out=n_out)
        metrics[arm], resamples[arm] = {}, {}
        for name, s in scores.items():
            met, res, curves = evaluate(s, sig.keep, pool["kind"], boot)
            metrics[arm][name], resamples[arm][name] = met, res
            rows += [pd.DataFrame({"arm": arm, "attack": name, "subset": sub, "fpr": ROC_GRID,
                                   "tpr": tpr}) for sub, tpr in curves.items()]
        log.info("%s: AUC lira_online %s", arm, {k: v["auc"] and round(v["auc"], 4)
                                                 for k, v in metrics[arm]["lira_online"].items()})
    save_json(args.metrics, metrics)
    tracked = {arm: e for arm, e in epochs.items() if e is not None}
    if tracked and len(tracked) == len(epochs):
        matched = matched_lira(tracked, pool["kind"], boot, a.offline_one_sided)
        log.info("matched utility (clean IN acc %.3f): epochs %s", matched["target_clean_in_acc"],
                 {arm: v["epoch"] for arm, v in matched["arms"].items()})
    else:
        matched = {"skipped": "shadow.track_epochs is false: no per-epoch shadow signals"}
    save_json(args.matched, matched)
    save_json(args.deltas, paired_deltas(metrics, resamples, base="none"))
    with atomic_path(args.roc) as tmp:
        pd.concat(rows).to_csv(tmp, index=False, float_format="%.6g")


if __name__ == "__main__":
    cli.run(main, "attack")
