"""How the default run's shadows share training noise between arms and between annealed
endpoints (bnmem.attack.noise): the correlations the coverage simulations must reproduce.

    python bench/bench_noise_structure.py [--root .]   # after `dvc repro`
"""
import argparse
import json
import time
from pathlib import Path

import numpy as np

import bnmem  # noqa: F401  (pins the CPU kernels before numpy loads)
from bnmem.attack.frontier import budget_data
from bnmem.attack.signals import load_shadow
from bnmem.attack.noise import structure
from bnmem.core.config import load_config
from bnmem.core.recipes import budget_epochs, identity_index

from bench_coverage import _cpu


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", default=".")
    p.add_argument("--out", default="results/noise_structure.json")
    p.add_argument("--md", default="bench/results/noise_structure.md")
    args = p.parse_args()
    t0, root = time.perf_counter(), Path(args.root)
    cfg = load_config(root / "data/recipes/all.yaml")
    labels = np.load(root / "data/prepared/pool.npz")["y_train"]
    identity, budgets = identity_index(cfg.shadow.queries), budget_epochs(cfg)
    arms, ends, keep = {}, {}, None
    for arm in cfg.arms:
        paths = sorted((root / "data/shadow" / arm).glob("*.npz"))
        sig = load_shadow(paths, labels, identity)
        keep = sig.keep if keep is None else keep
        assert (sig.keep == keep).all(), "arms with different keep masks are not paired"
        arms[arm] = sig.phi[..., identity]
        bd = budget_data(paths, labels, identity, budgets, sig.keep, sig.model_ids)
        ends[arm] = [b["phi"][..., identity] for b in bd] + [arms[arm]]
    res = structure(arms, keep, ends)
    # the estimand the simulation's arm_rho stands for, read off the attack stage's own
    # jackknife: how correlated the two arms' AUC estimates are over shadow pairs,
    # (V_a + V_b - V_{a-b}) / (2 s_a s_b), the same for the samples' bootstrap
    mem = json.loads((root / "results/membership.json").read_text())
    implied = {}
    for pair, row in mem["compare"].items():
        a, b = pair.split("_minus_")
        d = (row.get("equal_epochs") or {}).get("auc_all", {}).get("sd") or {}
        sa, sb = (mem["arms"][x]["auc_all"].get("sd") or {} for x in (a, b))
        implied[f"{b}|{a}"] = {k: (sa[k] ** 2 + sb[k] ** 2 - d[k] ** 2) / (2 * sa[k] * sb[k])
                               for k in ("jackknife", "samples") if k in d and k in sa and k in sb}
    res["implied_auc_correlation"] = implied
    res.update(budgets=[*budgets, cfg.train.epochs], n_models=int(keep.shape[0]),
               n=int(keep.shape[1]), seconds=round(time.perf_counter() - t0, 1), cpu=_cpu())
    Path(args.out).write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    eps = res["budgets"]
    md = ["# How the default run's shadows share training noise (bench/bench_noise_structure.py)", "",
          f"The default run's {res['n_models']} shadows per arm x {res['n']} pool samples "
          "(identity query). A residual is a model's logit-scaled confidence on a sample minus "
          "the mean over the models with the same membership of that sample "
          "(bnmem.attack.noise). Shadows with the same id in two arms share seed, keep mask "
          "and batch order.", "",
          "| arms | residual corr, IN | residual corr, OUT | model-shift corr |", "|---|---:|---:|---:|"]
    md += [f"| {k.replace('|', ' / ')} | {v['in']:.3f} | {v['out']:.3f} | {v['model_shift']:.3f} |"
           for k, v in res["arms"].items()]
    md += ["", "The same from the attack stage's own intervals (results/membership.json): the "
           "correlation of the two arms' all-samples AUC estimates, (V_a + V_b − V_a−b) / "
           "(2 s_a s_b), over shadow pairs (the pairs' jackknife) and over pool samples (their "
           "bootstrap). Each rests on 8 pairs or 100 draws: a rough check of the scale, not a "
           "precise estimate.", "",
           "| arms | over pairs (jackknife) | over samples |", "|---|---:|---:|"]
    md += [f"| {k.replace('|', ' / ')} | {v.get('jackknife', float('nan')):.2f} | "
           f"{v.get('samples', float('nan')):.2f} |" for k, v in res["implied_auc_correlation"].items()]
    md += ["", "| arm | residual SD | model-shift SD / residual SD |", "|---|---:|---:|"]
    md += [f"| {a} | {v['sd']:.3f} | {v['model_shift_ratio']:.3f} |" for a, v in res["spread"].items()]
    md += ["", f"Residual correlation between one arm's annealed endpoints ({', '.join(map(str, eps))} "
           "epochs; the same seeds and keep masks, separate complete runs):", "",
           "| arm | " + " | ".join(f"{eps[i]} / {eps[j]}" for i in range(len(eps))
                                   for j in range(i + 1, len(eps))) + " |",
           "|---|" + "---:|" * (len(eps) * (len(eps) - 1) // 2)]
    for arm, c in res["endpoints"].items():
        md.append(f"| {arm} | " + " | ".join(f"{c[i][j]:.3f}" for i in range(len(eps))
                                              for j in range(i + 1, len(eps))) + " |")
    md += ["", f"`python bench/bench_noise_structure.py`: {res['seconds']:.0f} s on {res['cpu']}; "
           f"result also in `{args.out}`."]
    Path(args.md).write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
