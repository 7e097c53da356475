"""The real null of the default run's logits (every attack variant re-run with fake
balanced keep masks, bnmem.attack.stage.real_null), with online / offline RMIA under the
old score rule (a sample inside the population compared with P - 1 others and divided by
P - 1) beside today's (the population is reference only, not scored).

    dvc repro attack   # the shadow logits in data/shadow
    python bench/bench_real_null.py [--masks 16] [--out bench/results/real_null.md]
"""
import argparse
from pathlib import Path

import numpy as np

import bnmem  # noqa: F401  (pins the CPU kernels before numpy loads)
import lscpu  # noqa: E402  (bench/lscpu.py: the machine line)
import bnmem.attack.rmia as rmia
from bnmem.attack.signals import load_shadow
from bnmem.core.config import load_config
from bnmem.core.io import load_npz
from bnmem.attack.stage import real_null


def old_rank(logp_target, log_px, population, gamma):
    """The rule before: every sample scored, one inside the population compared with its
    P - 1 others and divided by P - 1 (the population draw is the same P samples)."""
    ratio = logp_target - log_px
    count = np.searchsorted(np.sort(ratio[population]), ratio - np.log(gamma), side="right")
    in_pop = np.zeros(ratio.shape, bool)
    in_pop[population] = True
    return (count - (in_pop & (gamma <= 1.0))) / (population.size - in_pop)


def cell(r: dict) -> str:
    return f"{r['mean']:.4f} [{r['min']:.4f}, {r['max']:.4f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--masks", type=int, default=16)
    p.add_argument("--out", default="bench/results/real_null.md")
    args = p.parse_args()
    cfg = load_config(args.params)
    pool = load_npz("data/prepared/pool.npz", ("y_train",))
    new_rank = rmia.rmia_rank
    rows, old = {}, {}
    for arm in cfg.arms:
        sig = load_shadow([Path(f"data/shadow/{arm}/shard_{k}.npz") for k in cfg.shadow.shard_ids],
                          pool["y_train"])
        rows[arm] = real_null(sig, cfg, args.masks)
        rmia.rmia_rank = old_rank
        old[arm] = real_null(sig, cfg, args.masks)
        rmia.rmia_rank = new_rank
    cpu = lscpu.model_name()
    md = ["# Real null of the default run (bench/bench_real_null.py)", "",
          f"Every variant re-run on each arm's real shadow logits with {args.masks} fake "
          "balanced keep masks; AUC mean [min, max] over the masks, TPR at FPR 1e-3 mean. "
          "Expected: 0.5 and 0.001.", "",
          "| attack | " + " | ".join(f"{a}: AUC | {a}: TPR 1e-3" for a in cfg.arms) + " |",
          "|---|" + "---|---|" * len(cfg.arms)]
    for name in rows[cfg.arms[0]]:
        md.append(f"| {name} | " + " | ".join(
            f"{cell(rows[a][name]['auc'])} | {rows[a][name]['tpr_at_fpr_1e-3']['mean']:.5f}"
            for a in cfg.arms) + " |")
    md += ["", "RMIA before (old denominator) → after:", "",
           "| arm | attack | before | after |", "|---|---|---|---|"]
    for a in cfg.arms:
        for name in ("rmia", "rmia_offline"):
            md.append(f"| {a} | {name} | {cell(old[a][name]['auc'])} | {cell(rows[a][name]['auc'])} |")
    md += ["", f"`python bench/bench_real_null.py --masks {args.masks}` on {cpu}."]
    Path(args.out).write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
