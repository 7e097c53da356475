"""report.md's sections on per-sample exposure and on your own model (bnmem.exposure.scores)."""
from __future__ import annotations

import numpy as np

from bnmem.core.kinds import YOURS


def _f(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _attack_table(mine: dict) -> list[str]:
    L = ["| attack | AUC | TPR at FPR 1e-2 | TPR at FPR 1e-3 | members / non-members in the pool |",
         "|---|---|---|---|---|"]
    for name in ("lira_offline", "rmia_offline"):
        m = mine[name]
        L.append(f"| {name} | {_f(m['auc'], 4)} | {_f(m.get('tpr_at_fpr_1e-2'), 4)} | "
                 f"{_f(m.get('tpr_at_fpr_1e-3'), 4)} | {m['n_members']} / {m['n_nonmembers']} |")
    c = mine["calibration"]
    return L + ["", "TPR at a false-positive rate is shown only where the non-members "
                "support it (at least 10 false positives at that rate). "
                f"Your member list names {mine['members_listed']} rows; "
                f"{mine['lira_offline']['n_members']} of them are in the pool.", "",
                f"Reference check: your model's non-members have median exposure "
                f"{c['nonmember_median']:.2f} and {100 * c['nonmember_share_at_least_2']:.1f} % "
                f"at or above 2; if the `{mine['arm']}` shadows described your model exactly "
                f"these would be {c['expected_median']:.2f} and 1 % (higher: the reference "
                "under-states your model's margins, so its exposures read high; lower: they "
                "read low).", ""]


def _top_table(rows: list[dict], cols: list[str]) -> list[str]:
    L = ["| source row | label | kind | memorization (Feldman-Zhang) | " + " | ".join(
        f"{c} exposure (rank)" for c in cols) + " |", "|---|---|---|---|" + "---|" * len(cols)]
    for r in rows:
        L.append(f"| {r['source_index']} | {r['label']} | {r['kind']} | {_f(r['mem_score'])} | "
                 + " | ".join(f"{r['exposure'][c]:.2f} ({r['rank'][c]})" for c in cols) + " |")
    return L + [""]


def exposure_section(exp: dict, arms: list[str], figure: str, swapped: dict[str, list[str]],
                     n_pairs: int = 8) -> list[str]:
    """Markdown lines: your model's attack (in an audit), the score distribution per arm,
    the reference arm's most exposed samples across arms, the figure, swapped layers."""
    ref, k = exp["reference_arm"], exp["top_k"]
    L = ["## Who is exposed: the most exposed training samples", "",
         "Exposure of a training sample in a trained model = -log10 of the probability that a "
         "model which never saw the sample gives it at least this logit margin. The raw score "
         "is offline LiRA's Gaussian tail against the arm's OUT shadow models (mean over the "
         "query views); it is then calibrated per arm against an empirical null: the share of "
         "the arm's own shadow non-members (each shadow the target in turn, leave-one-pair-"
         "out) whose raw score is at least as high. So exposure 3 = a margin that one in a "
         "thousand non-members reaches, in every arm alike (table below: held-out shares, "
         "each pair's non-members against the other pairs' null); the calibrated scale ends "
         "at log10(1 + null size), beyond every null value (ties there ranked by the raw "
         f"score). The null's values come from {n_pairs - 1}-pair fits (leave-one-pair-out), "
         f"the target's raw score from all {n_pairs} pairs, whose less noisy Gaussian should read a "
         "little less extreme, so calibrated target exposures lean low (conservative; not "
         "measured). Each arm's target model "
         "trained on the whole pool, its shadows on half of it: part of every arm's "
         "exposure is that larger training set (a non-member of a model like the shadows "
         "reads 0.30 at the median), so compare arms with each other and samples within an "
         "arm, not with 0.30.", ""]
    mine = exp.get(YOURS)
    if mine:
        L += [f"### Your model (`{mine['weights']}`, scored against the `{mine['arm']}` shadows)",
              "", f"Accuracy on the pool's training labels: {mine['train_acc']:.3f}.", ""]
        if mine["lira_offline"]:
            L += [f"Membership attacks with your member list (`{mine['members']}`); offline "
                  "attacks need no retraining of your model:", ""] + _attack_table(mine)
        else:
            L += ["No member list given: per-sample exposure and its distribution only (no AUC). "
                  "Exposure quantiles: " + ", ".join(f"{q} {v:.2f}" for q, v in
                                                      mine["distribution"].items()) + ".", ""]
        L += [f"Your model's {k} most exposed samples, and their exposure in bnmem's arms:", ""]
        L += _top_table(mine["top"], [YOURS, *arms])
    L += ["Calibration: share of held-out shadow non-members at or above each exposure "
          "level, raw (Gaussian tail) and calibrated, against the nominal 10^-k:", "",
          "| arm | null size | " + " | ".join(f"≥ {k}: nominal / raw / calibrated" for k in
                                              next(iter(exp["arms"].values()))["calibration"]["levels"])
          + " |", "|---|---|" + "---|" * len(next(iter(exp["arms"].values()))["calibration"]["levels"])]
    for a in arms:
        c = exp["arms"][a]["calibration"]
        L.append(f"| {a} | {c['n']} (cap {c['cap']:.2f}) | " + " | ".join(
            f"{100 * r['nominal']:.2g} % / {100 * r['raw']:.2g} % / {100 * r['calibrated']:.2g} %"
            for r in c["levels"].values()) + " |")
    by_kind = [(a, name, row) for a in arms
               for name, row in (exp["arms"][a]["calibration"].get("by_kind") or {}).items()]
    if by_kind:
        L += ["", "The same by sample kind (the guarantee is over the pool's mix; flipped and "
              "OOD non-members are few, so their shares are coarse):", "",
              "| arm | kind | non-member values | ≥ 2: raw / calibrated | ≥ 3: raw / calibrated |",
              "|---|---|---|---|---|"]
        for a, name, row in by_kind:
            lv = row["levels"]
            L.append(f"| {a} | {name} | {row['n']} | {100 * lv['2']['raw']:.2g} % / "
                     f"{100 * lv['2']['calibrated']:.2g} % | {100 * lv['3']['raw']:.2g} % / "
                     f"{100 * lv['3']['calibrated']:.2g} % |")
    L += ["", "| arm | median exposure | p90 | p99 | max |", "|---|---|---|---|---|"]
    for a in arms:
        d = exp["arms"][a]["distribution"]
        L.append(f"| {a} | {d['median']:.2f} | {d['p90']:.2f} | {d['p99']:.2f} | {d['max']:.2f} |")
    top = exp["arms"][ref]["top"]
    L += ["", f"The {k} samples most exposed in `{ref}`, and their exposure (rank among "
          "the pool) in every arm:", ""] + _top_table(top, arms)
    if len(arms) > 1:
        med = {a: float(np.median([r["exposure"][a] for r in top])) for a in arms}
        L += [f"Median exposure of these {len(top)} samples: " + ", ".join(
            f"`{a}` {v:.2f}" for a, v in med.items()) + f" (lower = better protected). They "
              f"were selected as the top of `{ref}`, so `{ref}`'s own values are biased upward "
              "(selection on noise); each arm's p99 and max above are the unbiased comparison "
              "of the tails.", ""]
    L += [f"![most exposed samples]({figure})", ""]
    if any(swapped.values()):
        L += ["**Normalization swap.** bnmem replaced these BatchNorm layers of your "
              "factory's model (all of them when it takes no `norm_layer`; with one, those "
              "it built without it):", ""]
        L += [f"- `{a}`: {', '.join(f'`{n}`' for n in names)}" for a, names in swapped.items()
              if names]
        L.append("")
    return L
