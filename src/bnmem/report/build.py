"""The report stage's library entry point: target-model and gradient comparisons, the
claims table with its verdicts (bnmem.report.summary, bnmem.report.verdict), headline metrics, figures
and report.md."""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from bnmem.report import plots
from bnmem.core.config import Config
from bnmem.core.kinds import CLEAN, FLIPPED, OOD
from bnmem.data.stats import channel_stats
from bnmem.core.io import InputError, load_json, load_npz, save_json
from bnmem.core.records import TargetRecord
from bnmem.attack.stage import comparison_pairs, headline_deltas
from bnmem.report.markdown import render
from bnmem.report.verdict import require_df
from bnmem.core.rng import SALT
from bnmem.data.sources import describe
from bnmem.report.replicates import TRAIN_KEYS, across_seeds, arm_record, seed_deltas
from bnmem.report.summary import (
    GRAD_KINDS, claims, gamma_sigma_summary, grad_comparison, paired_acc_delta, target_matched,
)

log = logging.getLogger("bnmem.report.build")


def across_seed_summary(cfg, arms: list[str], curves: dict, grads: dict, attack: dict,
                        membership: dict, gammas: dict, replicates: Path,
                        pairs: list[tuple[str, str]]) -> dict:
    """Every pair's deltas per seed (`seed` from this run's outputs, `seeds` from the
    replicate stages' records) with their mean and 95 % t-interval across seeds."""
    records = {cfg.seed: {}}
    for a in arms:
        records[cfg.seed][a] = arm_record(
            curves[a].to_dict("records"), grads[a], attack[a][membership["variant"]],
            membership["arms"][a].get("epoch"), gammas[a])
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


def build_report(cfg: Config, kernels: dict, inp: dict[str, Path], out: dict[str, Path]) -> None:
    """Read every upstream output (`inp`: params, pool, test, models, curves, grads,
    grad_hists, attack, membership, scores, roc, theory, replicates, exposure) and write the report
    stage's outputs (`out`: out_train, out_deltas, out_results, plots, report)."""
    arms, models = list(cfg.arms), Path(inp["models"])
    rng = np.random.default_rng([cfg.seed, SALT["report_bootstrap"]])
    n_boot = cfg.attack.bootstrap
    pool = load_npz(inp["pool"], ("x", "y_train", "kind"))
    test = load_npz(inp["test"], ("x", "y"))
    kind = pool["kind"]
    records = {a: TargetRecord.load(models / f"{a}.json") for a in arms}
    train = {a: records[a].metrics for a in arms}
    # what computed the models' numbers (the train stages' torch dispatch level); the report
    # itself runs numpy only and never imports torch
    kernels = next((r.cpu_kernels for r in records.values() if r.cpu_kernels), kernels)
    curves = {a: pd.read_csv(Path(inp["curves"]) / f"{a}.csv") for a in arms}
    grads = {a: load_json(Path(inp["grads"]) / f"{a}.json") for a in arms}
    gz = {a: load_npz(Path(inp["grads"]) / f"{a}.npz", ("norms", "norms_epoch", "epochs")) for a in arms}
    attack, membership = load_json(inp["attack"]), load_json(inp["membership"])
    require_df(membership, inp["membership"])
    theory = load_json(inp["theory"])
    # the final targets' per-sample correctness, as the train stage measured it (no model runs here)
    evals = {a: load_npz(models / f"{a}_eval.npz", ("correct", "test_correct")) for a in arms}
    correct = {a: evals[a]["correct"] for a in arms}
    test_ok = {a: evals[a]["test_correct"] for a in arms}
    pairs = comparison_pairs(arms)

    target: dict = {}  # one target model per arm: intervals over samples only
    for a, b in pairs:
        d = {key: paired_acc_delta(correct[a], correct[b], kind == k, n_boot, rng)
             for key, k in (("clean_train_acc", CLEAN), ("flipped_mem_acc", FLIPPED),
                            ("ood_mem_acc", OOD))}
        d["test_acc"] = paired_acc_delta(test_ok[a], test_ok[b], np.ones(test["y"].size, bool),
                                         n_boot, rng)
        target[f"{a}_minus_{b}"] = d
    grad_cmp = {}
    for a, b in pairs:
        fits = [curves[arm].set_index("epoch").loc[gz[arm]["epochs"], "clean_train_acc"].to_numpy()
                for arm in (a, b)]
        for name, code in GRAD_KINDS.items():
            grad_cmp[f"{a}_minus_{b}_{name}"] = grad_comparison(
                gz[a]["norms_epoch"], gz[b]["norms_epoch"], fits[0], fits[1], gz[a]["epochs"],
                kind, code, n_boot, rng)
    gammas = {a: gamma_sigma_summary(records[a].gamma_sigma) for a in arms}
    push = {a: records[a].gamma_push for a in arms if gammas[a]}
    seeds = (across_seed_summary(cfg, arms, curves, grads, attack, membership, gammas,
                                 Path(inp["replicates"]), pairs) if cfg.seeds else None)
    table = claims(membership, grad_cmp, gammas.get("batchnorm"), seeds, cfg.noise_rate,
                   cfg.ood_rate, {a: train[a].get("clean_train_acc") for a in arms},
                   cfg.report.fit_rule)
    results = {"claims": table, "target": target, "target_matched": target_matched(curves, pairs),
               "grads": grad_cmp, "gamma_sigma": gammas, "gamma_push": push, "seeds": seeds,
               "cpu_kernels": kernels}

    figdir = Path(out["plots"])
    scores = {a: load_npz(Path(inp["scores"]) / f"{a}.npz", (membership["variant"], "keep", "mem_score"))
              for a in arms}
    lira_in = {a: (s["mem_score"], np.nanmean(np.where(s["keep"], s[membership["variant"]], np.nan), axis=0))
               for a, s in scores.items()}
    exposure = load_json(inp["exposure"])
    tops = {a: exposure["arms"][a]["top"] for a in arms}
    if exposure.get("your_model"):
        tops = {"your_model": exposure["your_model"]["top"], **tops}
    jobs = {  # the longest first: they are drawn side by side (plots.draw)
        "roc": (plots.roc_curves, (pd.read_csv(inp["roc"]), attack, figdir / "roc.png",
                                   membership["variant"])),
        "exposure": (plots.exposure_grid, (pool["x"], tops, figdir / "exposure.png")),
        "memorization": (plots.memorization_curves, (curves, figdir / "memorization.png")),
        "grad_norms": (plots.grad_norms, ({a: gz[a]["norms"] for a in arms}, kind,
                                          figdir / "grad_norms.png")),
        "gamma_sigma": (plots.gamma_sigma_layers, (
            {a: {k: v["ratio"] for k, v in records[a].gamma_sigma.items()} for a in arms},
            figdir / "gamma_sigma.png")),
        "mem_vs_lira": (plots.mem_vs_lira, (lira_in, kind, figdir / "mem_vs_lira.png")),
    }
    if (membership.get("frontier") or {}).get("compare"):
        jobs = {"frontier": (plots.frontier, (membership, figdir / "frontier.png")), **jobs}
    if any("epoch" in membership["arms"][a] for a in arms):
        jobs["lira_vs_fit"] = (plots.lira_vs_fit, (membership, figdir / "lira_vs_fit.png"))
    figures = plots.draw(jobs, cfg.shadow.workers)
    plots.dvc_tables(figdir, pd.read_csv(inp["roc"]), membership,
                     {a: pd.read_csv(Path(inp["grad_hists"]) / f"{a}.csv") for a in arms})
    save_json(out["out_train"], {a: {k: train[a].get(k) for k in TRAIN_KEYS} for a in arms})
    save_json(out["out_deltas"], headline_deltas(membership))
    save_json(out["out_results"], {**results, "train": {a: {**train[a], "gamma_sigma": records[a].gamma_sigma} for a in arms}, "grads_per_arm": grads, "theory": theory})
    source, ood_source = describe(cfg.dataset, cfg.data)
    mean, std = channel_stats(cfg.dataset, pool["x"])
    provenance = {"source": source, "ood_source": ood_source, "mean": mean, "std": std,
                  "pool_sha256": hashlib.sha256(Path(inp["pool"]).read_bytes()).hexdigest()[:16],
                  "n_shards": len(cfg.shadow.shard_ids), "cpu_level": kernels["level"]}
    render(Path(out["report"]), cfg, results, train, grads, attack, membership, theory, figures,
           kind, provenance, exposure, {a: list(records[a].spec.swapped or []) for a in arms},
           {a: list(records[a].spec.inplace_off or []) for a in arms})


