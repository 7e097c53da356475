"""Coverage of candidate interval rules per read class on a stored components study of the
annealed-endpoint simulation (bench/bench_matched_components.py), and the selection rule of
bench/results/matched_rules_plan.md.

    python bench/matched_rules.py results/matched_components_seed25.jsonl [--select] [--confirm RULES]
    python bench/matched_rules.py results/matched_components_sd005_seed30.jsonl --plan real_ratio --select

--confirm takes the selection's adopted rules (class=rule,...) and checks them on a fresh
seed's store (every read of the class within 0.93-0.97). --plan real_ratio
(bench/results/real_ratio_plan.md) adds the candidate C1t (twoway_t), selects every class
(F and G too), and --floor-stores checks a confirmed rule covers >= 0.93 on other stores.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tpr_rules import Z, load, one_arm, score, variance  # noqa: E402  (bench/tpr_rules.py)

CANDIDATES = ("C0", "C1", "C3", "C6", "C8", "CJ", "CJt")
PLANS = {"matched_rules": CANDIDATES, "real_ratio": CANDIDATES + ("C1t",)}
NAMES = {"C0": "both", "C1": "twoway", "C3": "sum", "C6": "pairs_t", "C8": "jacksum",
         "CJ": "jackknife", "CJt": "jackknife_t", "C1t": "twoway_t"}
DESIGNS = {"C0": 1, "C1": 3, "C3": 2, "C6": 1, "C8": 2, "CJ": 1, "CJt": 1, "C1t": 3}
EQ = range(3)
CLASSES = {  # class: (reads, today's rule, selected here (True) or a check only)
    "A": (("auc_matched", "auc_fit"), "C8", True),
    "B": (("auc_overlap", "auc_fit_overlap"), "C8", True),
    "C": (("fz_flipped_matched", "fz_flipped_overlap", "fz_ood_matched", "fz_flipped_fit",
           "fz_ood_fit"), "C8", True),
    "D": (("tpr_low_matched",), "C6", True),
    "E": (tuple(f"eq{k}_auc_all" for k in EQ), "C8", True),
    "F": (tuple(f"eq{k}_fz_{s}" for k in EQ for s in ("flipped", "ood")), "C8", False),
    "G": (tuple(f"eq{k}_tpr_low_all" for k in EQ), "C6", False),
}


def classes_for(plan: str) -> dict:
    """CLASSES with the plan's "today": since the seed-25/26 outcome production's rule for
    B is `both` (C0), which the real_ratio plan compares against; matched_rules keeps C8."""
    out = dict(CLASSES)
    if plan == "real_ratio":
        out["B"] = (CLASSES["B"][0], "C0", True)
    return out


LABEL = {"A": "AUC at the common point", "B": "AUC over the overlap",
         "C": "memorization at matched utility or fit", "D": "TPR at 1e-3 at matched utility",
         "E": "AUC at equal budget", "F": "memorization at equal budget (check)",
         "G": "TPR at 1e-3 at equal budget (check)"}


def interval(r: np.ndarray, rule: str, pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """(lo, hi) per run of one read's records under a candidate."""
    if rule in ("CJ", "CJt"):
        q = Z if rule == "CJ" else stats.t.ppf(0.975, pairs - 1)
        h = q * np.sqrt(r[:, 4])
        return r[:, 0] - h, r[:, 0] + h
    if rule == "C1t":  # twoway's variance (floored at V_p), t on P - 1 df
        h = stats.t.ppf(0.975, pairs - 1) * np.sqrt(variance(r, "C1"))
        return r[:, 0] - h, r[:, 0] + h
    return one_arm(r, rule, pairs)


def table(store: Path, cands: tuple = CANDIDATES) -> tuple[dict, int]:
    """({read: {rule: score}}, runs)."""
    truth, rec, pairs = load(store)
    reads = [r for c in CLASSES.values() for r in c[0]]
    meta = json.loads(store.with_suffix(".meta.json").read_text())
    if len(rec[reads[0]]) != meta["runs"]:
        raise SystemExit(f"{store}: {len(rec[reads[0]])} readable runs, its meta says "
                         f"{meta['runs']}: a unit was lost; rerun the study to complete it")
    return ({read: {rule: score(*interval(rec[read], rule, pairs), truth[read])
                    for rule in cands} for read in reads}, len(rec[reads[0]]))


def fine(s: dict, band=(0.935, 0.965)) -> bool:
    return (band[0] <= s["coverage"] <= band[1] and s["miss_below"] <= 0.04
            and s["miss_above"] <= 0.04)


def select(tab: dict, cls: str, cands: tuple = CANDIDATES, classes: dict | None = None
           ) -> tuple[str, str]:
    """(the plan's choice for class `cls`, why); classes: classes_for(plan), CLASSES by default."""
    reads, today, _ = (classes or CLASSES)[cls]
    ok = [c for c in cands if all(fine(tab[r][c]) for r in reads)]
    if ok:
        rel = {c: round(float(np.mean([tab[r][c]["mean_width"] / tab[r][today]["mean_width"]
                                       for r in reads])), 9) for c in ok}
        best = min(ok, key=lambda c: (rel[c], DESIGNS[c]))
        return best, f"qualifies ({', '.join(ok)}); width {rel[best]:.3f} x today's"
    # rounded: coverages are counts out of the runs, so equal deviations must tie exactly
    # (unrounded, 0.97 - 0.95 and 0.95 - 0.93 differ in the last bit and decide the choice)
    dev = {c: round(max(abs(tab[r][c]["coverage"] - 0.95) for r in reads), 9)
           for c in cands}
    best = min(cands, key=lambda c: (dev[c], DESIGNS[c]))
    if dev[best] < dev[today]:
        return best, f"none qualifies; closest to 0.95 (max |cov - 0.95| {dev[best]:.3f} vs today's {dev[today]:.3f})"
    return today, f"none qualifies; today's is as close as any ({dev[today]:.3f})"


def markdown(tab: dict, store: Path, runs: int, chosen: dict | None = None,
             classes: dict | None = None) -> str:
    truth, _, _ = load(store)
    cands = tuple(next(iter(tab.values())))
    L = [f"`{store}` ({runs} runs). Each cell: coverage [95 % Monte Carlo range] / mean width; "
         "misses below, above. Nominal 0.95, target 0.93-0.97.", ""]
    for cls, (reads, today, selected) in (classes or CLASSES).items():
        L += [f"### {cls}: {LABEL[cls]} (today: {NAMES[today]})", "",
              "| read (truth) | " + " | ".join(f"{c} {NAMES[c]}" for c in cands) + " |",
              "|---|" + "---|" * len(cands)]
        for r in reads:
            cells = [f"{s['coverage']:.3f} [{s['mc_range'][0]:.3f}, {s['mc_range'][1]:.3f}] / "
                     f"{s['mean_width']:.4f}; {s['miss_below']:.3f}, {s['miss_above']:.3f}"
                     for s in (tab[r][c] for c in cands)]
            L.append(f"| {r} ({truth[r]:.4f}) | " + " | ".join(cells) + " |")
        counts = {tab[r][c]["runs"] for r in reads for c in cands}
        if len(counts) > 1:
            L += ["", f"runs with an interval differ between candidates or reads: {sorted(counts)}"]
        if chosen is not None and cls in chosen:
            L += ["", f"selection: {chosen[cls][0]} {NAMES[chosen[cls][0]]} ({chosen[cls][1]})"]
        L.append("")
    return "\n".join(L)


def confirm(tab: dict, rules: dict) -> dict:
    """{class: (rule, every read within 0.93-0.97, coverages)} on a fresh store."""
    out = {}
    for cls, rule in rules.items():
        reads = CLASSES[cls][0]
        cov = [tab[r][rule]["coverage"] for r in reads]
        out[cls] = (rule, all(0.93 <= c <= 0.97 for c in cov), cov)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", type=Path)
    ap.add_argument("--select", action="store_true")
    ap.add_argument("--confirm", default=None, help="class=rule,... (e.g. D=C0,C=C6)")
    ap.add_argument("--plan", choices=tuple(PLANS), default="matched_rules",
                    help="which pre-registered plan's candidates and classes")
    ap.add_argument("--floor-stores", type=Path, nargs="*", default=[],
                    help="stores on which a confirmed rule must cover every read >= 0.93")
    a = ap.parse_args()
    cands = PLANS[a.plan]
    every = a.plan == "real_ratio"  # that plan selects F and G too
    classes = classes_for(a.plan)
    tab, runs = table(a.store, cands)
    chosen = ({cls: select(tab, cls, cands, classes) for cls, (_, _, sel) in classes.items()
               if sel or every} if a.select else None)
    print(markdown(tab, a.store, runs, chosen, classes))
    if a.confirm:
        rules = dict(x.split("=") for x in a.confirm.split(","))
        bad = [f"{c}={r}" for c, r in rules.items() if c not in CLASSES or r not in cands]
        if bad:
            raise SystemExit(f"--confirm: {', '.join(bad)}: classes are {', '.join(CLASSES)}, "
                             f"rules {', '.join(cands)}")
        rules.update({cls: classes[cls][1] for cls in classes if cls not in rules})
        for cls, (rule, ok, cov) in confirm(tab, rules).items():
            print(f"{cls} {LABEL[cls]}: {NAMES[rule]} covers "
                  + ", ".join(f"{c:.3f}" for c in cov) + (" (within 0.93-0.97)" if ok else
                                                          " (NOT within 0.93-0.97)"))
        for other in a.floor_stores:
            otab, _ = table(other, cands)
            for cls, rule in rules.items():
                if rule == classes[cls][1]:
                    continue  # today's rule: nothing to adopt
                cov = [otab[r][rule]["coverage"] for r in CLASSES[cls][0]]
                print(f"{other}: {cls} {NAMES[rule]} covers " + ", ".join(f"{c:.3f}" for c in cov)
                      + (" (every read >= 0.93)" if min(cov) >= 0.93 else " (BELOW 0.93)"))


if __name__ == "__main__":
    main()
