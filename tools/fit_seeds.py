"""Does an arch's grid recipe make an arm fit in *every* replicate, not only on seed 0?

For each (seed, noise rate) of grid.yaml (dataset given), builds the pool the prepare stage
builds for that seed and trains the target model of one arm with the grid's settings for the
arch plus a candidate's overrides, through the train stage's own code
(bnmem.train.target.train_arm: the same init and batch order a grid replicate gets). Records
the final clean-train accuracy (the grid's fit rule), test accuracy and the per-epoch fit.
One JSON line per finished run in --out (a rerun skips finished runs), and a markdown table
beside it (<out>_<arch>_<dataset>_<arm>.md).

    python tools/fit_seeds.py --arch densenet_cpu --arm none \\
        --candidates grid,lr0.05+e24 --out results/fit_seeds.jsonl

A candidate is `grid` (grid.yaml as committed) or `+`-joined overrides on top of it:
lr<x> (train.lr), e<k> (train.epochs), w<x> (train.warmup_epochs), bs<k> (train.batch_size),
wd<x> (train.weight_decay), m<x> (train.momentum).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tools")]  # this checkout's code

import bnmem  # noqa: E402,F401  (pins the CPU kernels first)
from bnmem.core import cli  # noqa: E402
from bnmem.core.config import ConfigError, config_from_dict  # noqa: E402
from bnmem.core.rng import SALT  # noqa: E402
from bnmem.data.corrupt import corrupt, split  # noqa: E402
from bnmem.data.sources import class_count, load_splits, ood_images  # noqa: E402
from bnmem.train.target import train_arm  # noqa: E402
import grid  # noqa: E402
from grid import cells  # noqa: E402

KEYS = {"lr": ("train.lr", float), "e": ("train.epochs", int),
        "w": ("train.warmup_epochs", float), "bs": ("train.batch_size", int),
        "wd": ("train.weight_decay", float), "m": ("train.momentum", float)}


def overrides(candidate: str) -> dict:
    """`grid` -> {}; `lr0.05+e24` -> {"train.lr": 0.05, "train.epochs": 24}."""
    if candidate == "grid":
        return {}
    out = {}
    for part in candidate.split("+"):
        key = next((k for k in sorted(KEYS, key=len, reverse=True) if part.startswith(k)), None)
        try:
            name, tp = KEYS[key]
            out[name] = tp(part[len(key):])
        except (KeyError, TypeError, ValueError):
            raise ConfigError(f"--candidates: {part!r} is not one of lr<x>, e<k>, w<x>, bs<k>, wd<x>, m<x> "
                              "(joined by +) or grid") from None
    return out


def config(params: dict, arm: str, seed: int, over: dict):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    for key, value in {**params, **over, "seed": seed, "arms": [arm]}.items():
        node, parts = raw, key.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = value
    if over.get("train.epochs"):  # checkpoints past the epochs are invalid; the run needs none
        raw["train"]["checkpoints"] = []
    return config_from_dict(raw)


def pool_for(cfg, splits, ood) -> tuple[dict, dict]:
    """The prepare stage's pool and test split for cfg.seed (bnmem.stages.prepare)."""
    train, test = splits
    rng = np.random.default_rng([cfg.seed, SALT["prepare"]])
    pool, held = split(train, test, cfg.pool_size, cfg.data.test_size, rng)
    ood_x = ood.x if ood is not None else pool.x[:0]
    out = corrupt(pool.x, pool.y, ood_x, cfg.noise_rate, cfg.ood_rate,
                  class_count(cfg.dataset, cfg.data), rng)
    return {**out, "index": pool.index}, {"x": held.x, "y": held.y}


def table(rows: list[dict], min_fit: float, replicates: list[tuple[float, int]]) -> str:
    """One row per candidate: its fit in each of the grid's `replicates` (noise, seed); it
    fits only when every replicate has run and cleared min_fit."""
    seeds = sorted(replicates)
    out = ["| candidate | " + " | ".join(f"noise {n}, seed {s}" for n, s in seeds)
           + " | min | fits in every replicate |", "|---|" + "---:|" * (len(seeds) + 1) + "---|"]
    for cand in dict.fromkeys(r["candidate"] for r in rows):
        got = {(r["noise"], r["seed"]): r["fit"] for r in rows if r["candidate"] == cand}
        vals = [got.get(k) for k in seeds]
        done = [v for v in vals if v is not None]
        ok = len(done) == len(seeds) and min(done) >= min_fit
        low = f"{min(done):.3f}" if done else ""
        out.append(f"| {cand} | " + " | ".join("" if v is None else f"{v:.3f}" for v in vals)
                   + f" | {low} | {'**yes**' if ok else 'no'} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", required=True)
    p.add_argument("--dataset", default="fashion_mnist")
    p.add_argument("--arm", default="none")
    p.add_argument("--candidates", default="grid")
    p.add_argument("--grid", default=str(ROOT / "grid.yaml"))
    p.add_argument("--out", default=str(ROOT / "results" / "fit_seeds.jsonl"))
    args = p.parse_args()
    spec = yaml.safe_load(Path(args.grid).read_text())
    todo = [(name, params) for name, params in cells(spec)
            if params["arch"] == args.arch and params["dataset"] == args.dataset]
    if not todo:
        raise ConfigError(f"--arch/--dataset: no cell of {args.grid} is {args.arch} on "
                          f"{args.dataset}; its archs: {spec['archs']}, datasets: {spec['datasets']}")
    cands = [(c, overrides(c)) for c in args.candidates.split(",")]
    out = Path(args.out)
    rows = [json.loads(l) for l in out.read_text().splitlines()] if out.exists() else []
    done = {r["stamp"] for r in rows}
    cli.setup(1)
    cache = {}
    for (name, params), seed in ((c, s) for c in todo for s in spec.get("seeds", [0])):
        for cand, over in cands:
            k = (args.arch, args.dataset, args.arm, cand, params["noise_rate"], seed)
            # the resolved settings, not the candidate's name: a changed grid.yaml reruns
            stamp = grid.stamp({**params, **over, "seed": seed, "arm": args.arm})
            if stamp in done:
                continue
            cfg = config(params, args.arm, seed, over)
            if "splits" not in cache:
                cache["splits"] = load_splits(cfg.dataset, cfg.data)
                cache["ood"] = ood_images(cfg.dataset, cfg.data)[1] if cfg.ood_rate > 0 else None
            pool, test = pool_for(cfg, cache["splits"], cache["ood"])
            t0 = time.perf_counter()
            _, hist, _ = train_arm(cfg, pool, test, None, progress=False)
            row = dict(zip(("arch", "dataset", "arm", "candidate", "noise", "seed"), k), stamp=stamp,
                       fit=hist[-1]["clean_train_acc"], test=hist[-1]["test_acc"],
                       curve=[round(h["clean_train_acc"], 3) for h in hist],
                       epochs=cfg.train.epochs, lr=cfg.train.lr,
                       seconds=round(time.perf_counter() - t0, 1))
            rows.append(row)
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"{name}-seed{seed} {cand}: fit {row['fit']:.3f} test {row['test']:.3f} "
                  f"({row['seconds']} s)", flush=True)
    min_fit = spec.get("fit_rule", {}).get("min_clean_train_acc", 0.8)
    # every candidate ever run for this arch, dataset and arm, not only this call's; of
    # each, only the runs at this grid.yaml's settings
    seen = dict.fromkeys([c for c, _ in cands] + [r["candidate"] for r in rows if (
        r["arch"], r["dataset"], r["arm"]) == (args.arch, args.dataset, args.arm)])
    stamps = {grid.stamp({**params, **overrides(c), "seed": s, "arm": args.arm})
              for _, params in todo for s in spec.get("seeds", [0]) for c in seen}
    mine = [r for r in rows if r["stamp"] in stamps]
    replicates = [(params["noise_rate"], s) for _, params in todo for s in spec.get("seeds", [0])]
    md = out.with_name(f"{out.stem}_{args.arch}_{args.dataset}_{args.arm}.md")
    head = (f"# Fit over the grid's replicates: {args.arch}, {args.dataset}, arm `{args.arm}`\n\n"
            "*Generated by `python tools/fit_seeds.py`; clean-train accuracy of the target model "
            f"(fit rule >= {min_fit}) on each replicate's own pool, init and batch order.*\n\n")
    md.write_text(head + table(mine, min_fit, replicates) + "\n")
    print(table(mine, min_fit, replicates))


if __name__ == "__main__":
    cli.run(main, "fit_seeds")
