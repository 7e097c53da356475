"""report.md's sections after the claims table: frontier, within-run matched fit, real null,
mechanism, theory, seeds, provenance."""
from __future__ import annotations

import numpy as np

from bnmem.core.config import Config
from bnmem.report.cells import _est, _f, _tp_at_common, _tp_samples, _tup

FLIP_SHARE = 0.10  # share of draws whose Pareto source differs: reported as unstable
FLIP_FIGURES = {"auc_all": "AUC all", "fz_flipped": "FZ flipped", "fz_ood": "FZ OOD"}  # its figures


def _frontier_section(membership: dict, rel: dict) -> list[str]:
    fr = membership.get("frontier") or {}
    if not fr.get("compare"):
        return []
    from bnmem.attack.frontier import LABELS
    L = ["", "## Privacy–utility frontier (annealed endpoints)", "",
         f"Every shadow model trained as a complete run of each budget ({', '.join(str(b) for b in fr['budgets'])} "
         "epochs; same seeds, keep masks and recipe, the learning-rate schedule scaled to "
         "the budget and annealed at its end), so each endpoint is a finished training run "
         "(between endpoints the frontier is linear: no model was trained there). "
         "Held-out accuracy: the shadows' accuracy on the clean pool samples they did not "
         "train on; fit: on their IN clean samples; train loss: mean cross-entropy on their "
         "training sets; gap: fit minus held-out accuracy (models+samples intervals). "
         "TPR at FPR 1e-3 only where its false positives come from ≥ 10 distinct samples; "
         "next to it, the distinct samples behind its true positives (at a common point: "
         "per arm, the fewest among the endpoints its value rests on).", "",
         "| arm | epochs | held-out acc | fit | train loss | AUC all | TPR at FPR 1e-3 | FZ flipped |",
         "|---|---|---|---|---|---|---|---|"]
    for arm, a in fr["arms"].items():
        for e in a["endpoints"]:
            L.append(f"| {arm} | {e['epochs']} | {_est(e['out_acc_clean'])} | {_est(e['in_acc_clean'])} | "
                     f"{_est(e['train_loss'])} | {_est(e['auc_all'])} | "
                     f"{_est(e['tpr_low_all'], digits=4)}{_tp_samples(e.get('tpr_low_support'))} | "
                     f"{_est(e['fz_flipped'])} |")
    over = [f"`{arm}` from {o['from']} to {o['to']} epochs (held-out accuracy "
            f"{100 * o['heldout_gain']:+.2f} points, AUC {100 * o['auc_gain']:+.2f} points)"
            for arm, a in fr["arms"].items() for o in a["overtraining"]]
    L += ["", "Overtraining (a budget step whose AUC rises ≥ 1 point while its held-out "
          "accuracy gains less than a quarter of that; point estimates): "
          + ("; ".join(over) if over else "none") + ".",
          "", "Arm − base between Pareto frontiers (least leakage at or above the utility; "
          "gap: interpolated at the common gap), at the common point (the highest utility "
          "both reach) and averaged over the overlap of their utility ranges; points, "
          "models+samples intervals. Held-out accuracy is the primary criterion.", "",
          "| pair | criterion | common point | AUC all | AUC all, overlap average | "
          "TPR at 1e-3 | FZ flipped | FZ OOD |", "|---|---|---|---|---|---|---|---|"]
    for pair, cmp in fr["compare"].items():
        for crit, c in cmp["criteria"].items():
            f = c["figures"]
            lvl = "n/a" if c["level"] is None or not np.isfinite(c["level"]) else f"{c['level']:.3f}"
            L.append(f"| {pair.replace('_minus_', ' - ')} | {LABELS[crit]}"
                     f"{' (primary)' if crit == fr['primary'] else ''} | {lvl} | "
                     f"{_est(f['auc_all']['at_common'], 100, True, 2)} | "
                     f"{_est(f['auc_all']['overlap'], 100, True, 2)} | "
                     f"{_est(f['tpr_low_all']['at_common'], 100, True, 2)}"
                     f"{_tp_at_common(f['tpr_low_all'].get('support_at_common'))} | "
                     f"{_est(f['fz_flipped']['at_common'], 100, True, 2)} | "
                     f"{_est(f['fz_ood']['at_common'], 100, True, 2)} |")
    flips = []
    for pair, cmp in fr["compare"].items():
        for fig, label in FLIP_FIGURES.items():
            c = cmp["criteria"].get(fr["primary"], {}).get("figures", {}).get(fig, {})
            for side, share in zip(pair.split("_minus_"), c.get("pareto_flips") or []):
                if share is not None and share >= FLIP_SHARE:
                    flips.append(f"{pair.replace('_minus_', ' - ')}, {label}: `{side}` in "
                                 f"{100 * share:.0f} %")
    L += ["", "Pareto choice at the primary common point (" + ", ".join(FLIP_FIGURES.values())
          + f"): where ≥ {100 * FLIP_SHARE:.0f} % of the draws take an arm's least value from "
          "another endpoint or segment than the point estimate does, the statistic jumps "
          "between endpoints there, its draws are bimodal and ±1.96 sd describes them poorly "
          "(the coverage simulation does not cover this case; see the limitations on real "
          "shadows): " + ("; ".join(flips) if flips else "none") + "."]
    L += ["", "At equal budgets (arm − base at each budget's endpoint; AUC all, points):", "",
          "| pair | " + " | ".join(f"{b} epochs" for b in fr["budgets"]) + " |",
          "|---|" + "---|" * len(fr["budgets"])]
    for pair, cmp in fr["compare"].items():
        L.append(f"| {pair.replace('_minus_', ' - ')} | " + " | ".join(
            _est(e["auc_all"], 100, True, 2) for e in cmp["equal_budget"]) + " |")
    if "frontier" in rel:
        L += ["", f"![frontier]({rel['frontier']})"]
    return L + [""]


def _matched_section(membership: dict, rel: dict) -> list[str]:
    rows = [(pair, c["matched_fit"]) for pair, c in membership["compare"].items()
            if c.get("matched_fit")]
    if not rows:
        return []
    L = ["## Within-run matched fit (secondary view)", "",
         "Each pair at the lower of its two final shadow fits, every figure linear between "
         "the epochs of the one train.epochs run around it (models+samples intervals; "
         "points). Caveat: the slower arm is taken at its last, annealed epoch and the "
         "faster one mid-schedule at a high learning rate, and the schedule's phase moves "
         "leakage by itself; the annealed endpoints above are the primary comparison.", "",
         "| pair | common fit | epoch reached (arm, base) | AUC all (identity query) | "
         "Feldman-Zhang flipped | Feldman-Zhang OOD | IN flipped (raw) | IN OOD (raw) |",
         "|---|---|---|---|---|---|---|---|"]
    for pair, m in rows:
        L.append(f"| {pair.replace('_minus_', ' - ')} | {m['fit']:.3f} | {m['epoch_a']:.2f}, "
                 f"{m['epoch_b']:.2f} | {_est(m['auc_identity'], 100, True, 2)} | "
                 f"{_est(m.get('fz_flipped'), 100, True, 2)} | {_est(m.get('fz_ood'), 100, True, 2)} | "
                 f"{_est(m['in_acc_flipped'], 100, True, 2)} | {_est(m['in_acc_ood'], 100, True, 2)} |")
    return L + ["", f"![LiRA vs fit]({rel['lira_vs_fit']})", ""] if "lira_vs_fit" in rel else L + [""]


def _null_section(attack: dict, arms: list[str], variant: str) -> list[str]:
    """The real null: every variant re-run on each arm's real logits with fake masks."""
    first = next(v["null"] for v in attack[arms[0]].values() if "null" in v)
    L = ["", "## Null calibration (real null)", "",
         f"Every attack re-run on each arm's real logits with {first['masks']} fake balanced "
         "keep masks (complementary pairs, fresh seeds, no model trained on them) and the same "
         "balanced leave-one-pair-out protocol: membership carries no signal, so AUC should be "
         "0.500, TPR at FPR 1e-3 about 0.001 and at 1e-4 about 0.0001 (at most a handful of "
         "false positives per mask there: a sanity check, not a supported rate unless the low-FPR "
         "section says so). Mean [min, max] over the masks; the real AUC "
         f"of the headline `{variant}` is in the next section.", "",
         "| attack | " + " | ".join(f"{a}: AUC | {a}: TPR at 1e-3 | {a}: TPR at 1e-4"
                                  for a in arms) + " |",
         "|---|" + "---|---|---|" * len(arms)]
    for name in attack[arms[0]]:
        cells = []
        for a in arms:
            n = attack[a][name].get("null")
            if n is None:
                cells += ["n/a"] * 3
                continue
            cells.append(f"{n['auc']['mean']:.4f} [{n['auc']['min']:.4f}, {n['auc']['max']:.4f}]")
            for key, d in (("tpr_at_fpr_1e-3", 4), ("tpr_at_fpr_1e-4", 5)):
                r = n.get(key)  # runs before the 1e-4 column have none
                cells.append("n/a" if r is None else
                             f"{r['mean']:.{d}f} [{r['min']:.{d}f}, {r['max']:.{d}f}]")
        L.append(f"| {name} | " + " | ".join(cells) + " |")
    eps = {a: ((attack[a].get(variant) or {}).get("null") or {}).get("epsilon_lo") for a in arms}
    if all(eps.values()):
        L += ["", f"Empirical ε of `{variant}` on the fake masks (it should prove nothing: 0): "
              + "; ".join(f"`{a}` max {e['max']:.2f}, mean {e['mean']:.2f}" for a, e in eps.items())
              + "."]
    return L


def _gamma_section(results: dict, rel: dict) -> list[str]:
    g = (results.get("gamma_sigma") or {}).get("batchnorm")
    if not g:
        return []
    push = results.get("gamma_push", {}).get("batchnorm", {})
    L = ["## Mechanism: gamma/sigma (arm `batchnorm`, final model)", "",
         "Per BN layer: share of channels with |gamma|/sigma > 1 (running sigma) and the "
         "median ratio; −mean ∂ℓ/∂gamma per sample for clean / flipped / OOD samples (positive: "
         "an SGD step on them raises gamma, the paper's self-reinforcing loop).", "",
         "| layer | type | channels | share > 1 | median ratio | push clean | push flipped | push OOD | flipped push |",
         "|---|---|---|---|---|---|---|---|---|"]
    for name, v in g["layers"].items():
        p = push.get(name, {})
        sign = ("n/a" if p.get("flipped") is None else "up" if p["flipped"] > 0 else "down")
        L.append(f"| {name} | {v['type']} | {v['channels']} | {v['share_above_1']:.2f} | "
                 f"{v['median_ratio']:.2f} | {_f(p.get('clean'), 4)} | {_f(p.get('flipped'), 4)} | "
                 f"{_f(p.get('ood'), 4)} | {sign} |")
    return L + ["", f"{g['n_layers_majority_above_1']} of {g['n_layers']} BN layers have most "
                f"channels above 1; pooled over all channels (dense layers hold most of them) "
                f"the share is {g['pooled_share_above_1']:.2f}.", "",
                f"![gamma/sigma]({rel['gamma_sigma']})", ""]


def _theory_section(theory: dict) -> list[str]:
    dep = theory.get("eta_dependence", {})
    real = dep.get("eta_3e-02", {})
    return ["## Theory check", "",
            "One conv channel + BN + linear classifier, one SGD step on a planted outlier: "
            f"measured / predicted margin growth {_f(theory.get('ratio_measured_over_predicted'))} "
            f"and fitted exponent of the growth in gamma/sigma {_f(theory.get('fitted_exponent'))} "
            f"(predicted 2), both at step size η = {theory.get('eta_smallest')} where the "
            "first-order law is exact; at a realistic η = 0.03 (the order of the training "
            f"learning rate) the measured / predicted ratio is {_f(real.get('ratio_over_predicted'))}"
            f" (worst case over the planted outliers {_f(real.get('ratio_over_predicted_worst'))})."
            " See `plots/theory.png`.", ""]


_SEED_ROWS = (("flipped_mem_acc", "flipped_mem_acc (final)", 100),
              ("ood_mem_acc", "ood_mem_acc (final)", 100),
              ("test_acc", "test acc", 100),
              ("matched_flipped_mem_acc", "flipped_mem_acc at matched fit", 100),
              ("auc_all", "AUC all (headline attack)", 100),
              ("auc_clean", "AUC clean", 100),
              ("auc_flipped", "AUC flipped", 100),
              ("matched_auc_all", "AUC at matched shadow fit", 100),
              ("grad_ratio_flipped_clean_ratio", "gradient flipped/clean ratio, arm / base", 1))


def _seeds_section(seeds: dict) -> list[str]:
    """Markdown for the across-seed table (empty with fewer than two seeds)."""
    if not seeds or seeds.get("n", 1) < 2:
        return []
    n = seeds["n"]
    L = ["## Across seeds", "",
         f"Seeds {', '.join(str(s) for s in seeds['seeds'])} (the pool is fixed by `seed`; "
         "each seed retrains every target and shadow model). Mean over seeds with a "
         "Student-t 95 % interval" + (" (needs two or more seeds)" if n < 2 else "") +
         "; differences in points except the gradient ratio, whose mean is geometric and "
         "interval t on the log scale.", ""]
    pairs = [k for k in seeds if k.startswith("delta_")]
    L += ["| figure | " + " | ".join(k[len("delta_"):].replace("_minus_", " - ") for k in pairs) + " |",
          "|---|" + "---|" * len(pairs)]
    for key, label, scale in _SEED_ROWS:
        cells = []
        for pk in pairs:
            d = seeds[pk].get(key) or {}
            if d.get("mean") is None:
                cells.append("n/a")
                continue
            f = "+.2f" if scale != 1 else ".2f"  # differences signed, the ratio not
            cell = f"{d['mean'] * scale:{f}}"
            if d.get("lo") is not None:
                cell += f" [{d['lo'] * scale:{f}}, {d['hi'] * scale:{f}}]"
            per = ", ".join(f"{v * scale:{f[:-3]}.1f}" for v in d["values"].values())
            cells.append(f"{cell} ({per})" if n > 1 else cell)
        L.append(f"| {label} | " + " | ".join(cells) + " |")
    return L + [""]


def _provenance_section(cfg: Config, prov: dict) -> list[str]:
    """Data provenance and seeds (no wall times: the report is bit-identical across runs)."""
    if not prov:
        return []
    return ["## Provenance", "",
            f"- Data: `{cfg.dataset}` from {prov['source']}; OOD images from {prov['ood_source']}; "
            f"`data/prepared/pool.npz` sha256 {prov['pool_sha256']}… (pool and test split, "
            f"corruption: seed {cfg.seed}). Models see images scaled to [0, 1] and "
            f"standardized per channel with mean {_tup(prov.get('mean'))} and std "
            f"{_tup(prov.get('std'))}.",
            f"- Training seeds: {', '.join(str(s) for s in [cfg.seed, *cfg.seeds])} "
            f"(extra seeds run as `replicate@<arm>-<seed>`). Full configuration: `params.yaml` "
            "at the commit of this report; per-arm resolved recipes in `data/recipes/`.",
            f"- CPU kernels pinned to {prov.get('cpu_level', 'n/a')} (bnmem.core.cpu; "
            "BNMEM_CPU=native opts out). Wall times: the stages' logs and BENCHMARKS.md.", ""]
