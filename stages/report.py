"""report: merge per-arm metrics, compute BN - none deltas with CIs, draw PNGs, write report.md."""
import argparse
import hashlib
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bnmem import cli, plots
from bnmem.config import load_config
from bnmem.corrupt import CLEAN, FLIPPED, OOD
from bnmem.data import OOD_SOURCE, describe_source, preprocess
from bnmem.evaluate import share_above_1
from bnmem.io import InputError, load_json, load_npz, load_state, save_json
from bnmem.pipeline import build
from bnmem.report_md import render
from bnmem.seeds import across_seeds, arm_record, seed_deltas
from bnmem.summary import gamma_push, matched_utility, paired_acc_delta, ratio_of_ratios_ci
from bnmem.train import predict

log = logging.getLogger("bnmem.report")


def load_model(models: Path, meta: dict, arm: str) -> torch.nn.Module:
    model = build(meta)
    model.load_state_dict(load_state(models / f"{arm}.pt"))
    return model


def across_seed_summary(cfg, arms: list[str], curves: dict, grads: dict, attack: dict,
                        matched: dict, shares: dict, replicates: Path,
                        pairs: list[tuple[str, str]]) -> dict:
    """Every pair's deltas per seed (`seed` from this run's outputs, `seeds` from the
    replicate stages' records) with their mean and 95 % t-interval across seeds."""
    records = {cfg.seed: {}}
    for a in arms:
        records[cfg.seed][a] = arm_record(
            curves[a].to_dict("records"), grads[a], attack[a]["lira_online"],
            matched["arms"][a]["curve"] if "arms" in matched else None, shares[a])
    for s in cfg.seeds:
        records[s] = {}
        for a in arms:
            rec = load_json(replicates / a / f"seed_{s}.json")
            if rec.get("seed") != s or rec.get("arm") != a:
                raise InputError(f"{replicates / a}/seed_{s}.json: holds arm {rec.get('arm')!r} "
                                 f"seed {rec.get('seed')!r}; re-run replicate@{a}-{s}")
            records[s][a] = rec["record"]
    out: dict = {"seeds": sorted(records), "n": len(records)}
    for a, b in pairs:
        out[f"delta_{a}_minus_{b}"] = across_seeds(
            {s: seed_deltas(r, a, b) for s, r in sorted(records.items())})
    out["per_arm"] = {a: {k: {f"seed_{s}": records[s][a]["final"][k] for s in sorted(records)}
                          for k in ("test_acc", "flipped_mem_acc")} for a in arms}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    for name in ("params", "pool", "models", "curves", "grads", "shadow", "attack", "deltas", "scores",
                 "roc", "theory", "matched", "replicates", "out-train", "out-grads",
                 "out-summary", "plots", "report"):
        p.add_argument(f"--{name}", required=True)
    args = p.parse_args()
    cfg = load_config(args.params)
    cli.setup(cfg.train.threads)
    arms, models, rng = list(cfg.arms), Path(args.models), np.random.default_rng([cfg.seed, 0x5E9])
    n_boot = cfg.attack.bootstrap
    pool = load_npz(args.pool, ("x", "y_train", "kind"))
    kind, x = pool["kind"], preprocess(pool["x"], cfg.dataset)
    metas = {a: load_json(models / f"{a}.json") for a in arms}
    train = {a: metas[a]["metrics"] for a in arms}
    curves = {a: pd.read_csv(Path(args.curves) / f"{a}.csv") for a in arms}
    grads = {a: load_json(Path(args.grads) / f"{a}.json") for a in arms}
    norms = {a: load_npz(Path(args.grads) / f"{a}.npz", ("norms",))["norms"] for a in arms}
    attack, deltas = load_json(args.attack), load_json(args.deltas)
    theory = load_json(args.theory)
    nets = {a: load_model(models, metas[a], a) for a in arms}
    correct = {a: predict(nets[a], x).argmax(1).numpy() == pool["y_train"] for a in arms}

    summary: dict = {"equal_epoch": train, "matched_utility": matched_utility(curves)}
    matched = load_json(args.matched)
    if "arms" in matched:  # LiRA at matched utility (shadow models), curves left to the plot
        summary["matched_utility"]["lira"] = {
            "target_clean_in_acc": matched["target_clean_in_acc"], "attack": matched["attack"],
            **{a: {k: v for k, v in matched["arms"][a].items() if k != "curve"} for a in arms},
            **{k: v for k, v in matched.items() if k.startswith("delta_")}}
    pairs = [(a, "none") for a in arms if a != "none" and "none" in arms]
    if "batchnorm_reg" in arms and "batchnorm" in arms:
        pairs.append(("batchnorm_reg", "batchnorm"))
    for a, b in pairs:
        d = {key: paired_acc_delta(correct[a], correct[b], kind == k, n_boot, rng)
             for key, k in (("clean_train_acc", CLEAN), ("flipped_mem_acc", FLIPPED),
                            ("ood_mem_acc", OOD))}
        ratio = ratio_of_ratios_ci(norms[a], norms[b], kind, FLIPPED, n_boot, rng)
        if ratio:
            d["grad_ratio_flipped_clean_bn_over_none"] = ratio
        for attack_name, subsets in (deltas.get(a, {}) if b == "none" else {}).items():
            for subset, row in subsets.items():
                d[f"auc_{attack_name}_{subset}"] = row
        summary[f"delta_{a}_minus_{b}"] = d
    bn_layers = {a: {k: v["ratio"] for k, v in metas[a].get("gamma_sigma", {}).items()} for a in arms}
    shares = {a: share_above_1(metas[a].get("gamma_sigma", {})) for a in arms}
    summary["gamma_sigma_share_above_1"] = shares.get("batchnorm")
    for a in arms:
        if bn_layers.get(a):
            summary[f"gamma_push_{a}"] = gamma_push(nets[a], x, pool["y_train"], {
                "clean": kind == CLEAN, "flipped": kind == FLIPPED, "ood": kind == OOD})

    summary["seeds"] = across_seed_summary(cfg, arms, curves, grads, attack, matched, shares,
                                           Path(args.replicates), pairs)

    out = Path(args.plots)
    scores = {a: load_npz(Path(args.scores) / f"{a}.npz", ("lira_online", "keep", "mem_score")) for a in arms}
    lira_in = {a: (s["mem_score"], np.nanmean(np.where(s["keep"], s["lira_online"], np.nan), axis=0))
               for a, s in scores.items()}
    figures = {
        "roc": plots.roc_curves(pd.read_csv(args.roc), attack, out / "roc.png"),
        "memorization": plots.memorization_curves(curves, out / "memorization.png"),
        "grad_norms": plots.grad_norms(norms, kind, out / "grad_norms.png"),
        "gamma_sigma": plots.gamma_sigma_layers(bn_layers, out / "gamma_sigma.png"),
        "mem_vs_lira": plots.mem_vs_lira(lira_in, kind, out / "mem_vs_lira.png"),
    }
    if "arms" in matched:
        figures["lira_vs_fit"] = plots.lira_vs_fit(matched, out / "lira_vs_fit.png")
    save_json(args.out_train, {a: {**train[a], "gamma_sigma": {
        k: {kk: vv for kk, vv in v.items() if kk != "ratio"} for k, v in metas[a].get("gamma_sigma", {}).items()}}
        for a in arms})
    save_json(args.out_grads, grads)
    save_json(args.out_summary, summary)
    costs = {"train": {a: metas[a].get("train_seconds") for a in arms},
             "shadow": {a: sum(float(load_npz(Path(args.shadow) / a / f"shard_{k}.npz").get(
                 "seconds", np.nan)) for k in cfg.shadow.shard_ids) for a in arms},
             "grads": {a: float(load_npz(Path(args.grads) / f"{a}.npz").get("seconds", np.nan))
                       for a in arms}}
    provenance = {"source": describe_source(cfg.dataset, cfg.data.root),
                  "ood_source": describe_source(OOD_SOURCE[cfg.dataset],
                                                cfg.data.root if cfg.dataset.startswith("cifar") else None),
                  "pool_sha256": hashlib.sha256(Path(args.pool).read_bytes()).hexdigest()[:16],
                  "n_shards": len(cfg.shadow.shard_ids)}
    render(Path(args.report), cfg, summary, train, grads, attack, theory, figures, kind,
           costs, provenance)


if __name__ == "__main__":
    cli.run(main, "report")
