"""How close a simulated components study's variance structure is to the default run's
(bench/results/real_ratio_plan.md): per figure (AUC all samples, memorization flipped / OOD)
and read (common point, overlap, equal budgets), the median over intervals of V_samples /
V_pairs, V_both / (V_pairs + V_samples) and V_jackknife / V_pairs, on the real run (each
interval's recorded `sd` under results/membership.json's frontier.compare) and on each store
(bench/bench_matched_components.py), and the mean over the categories both have of
|log(simulated / real)| of the first (the seed-30/31 pilot's criterion) and of all three
(the next pilot's, real_ratio_plan.md's second addendum).

    python bench/real_ratio_pilot.py results/real_ratio_pilot/model_sd0.05_seed900.jsonl ...
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tpr_rules import load  # noqa: E402  (bench/tpr_rules.py)

ROOT = Path(__file__).resolve().parents[1]
FIGS = ("auc_all", "fz_flipped", "fz_ood")
READS = ("common", "overlap", "equal")
RATIOS = ("Vs/Vp", "Vb/(Vp+Vs)", "Vj/Vp")


def ratios(vp: float, vs: float, vb: float, vj: float) -> tuple[float, float, float]:
    return vs / vp, vb / (vp + vs), vj / vp


def real(membership: Path) -> dict:
    """{(figure, read): [[3 ratios] per interval]} of the run's frontier differences."""
    out: dict = {}

    def add(fig, read, x):
        s = x.get("sd") or {}
        if all(s.get(k) for k in ("pairs", "samples", "both", "jackknife")):
            out.setdefault((fig, read), []).append(
                ratios(*(s[k] ** 2 for k in ("pairs", "samples", "both", "jackknife"))))

    for cmp in json.loads(membership.read_text())["frontier"]["compare"].values():
        for crit in cmp.get("criteria", {}).values():
            for fig in FIGS:
                x = crit["figures"].get(fig, {})
                for key, read in (("at_common", "common"), ("overlap", "overlap")):
                    if isinstance(x.get(key), dict):
                        add(fig, read, x[key])
        for row in cmp.get("equal_budget", []):
            for fig in FIGS:
                if isinstance(row.get(fig), dict):
                    add(fig, "equal", row[fig])
    return out


def split(m: np.ndarray) -> str:
    """A : B : I (models' main effect, samples' own, interaction) in units of V_p, from the
    three median ratios under the additive two-way approximation V_p = A + I, V_s = B + I,
    V_b = A + B + 3I."""
    vs, vb = m[0], m[1] * (1 + m[0])
    i = vb - (1 + vs)
    return f"{1 - i:.2f}:{vs - i:.2f}:{i:.2f}"


def category(read: str) -> tuple[str, str] | None:
    """A simulated read's (figure, read), None for TPR."""
    if "tpr" in read:
        return None
    fig = "auc_all" if "auc" in read else ("fz_flipped" if "flipped" in read else "fz_ood")
    where = "equal" if read.startswith("eq") else ("overlap" if "overlap" in read else "common")
    return fig, where


def simulated(store: Path) -> dict:
    _, rec, _ = load(store)
    out: dict = {}
    for read, r in rec.items():
        c = category(read)
        if c is not None:
            out.setdefault(c, []).extend(zip(*ratios(r[:, 1], r[:, 2], r[:, 3], r[:, 4])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stores", type=Path, nargs="+")
    ap.add_argument("--membership", type=Path, default=ROOT / "results" / "membership.json")
    a = ap.parse_args()
    ref = {c: np.median(np.array(v), axis=0) for c, v in real(a.membership).items()}
    cats = [(f, r) for f in FIGS for r in READS if (f, r) in ref]
    head = ("| source | " + " | ".join(f"{f}@{r}" for f, r in cats)
            + " | mean abs log (Vs/Vp) | mean abs log (all three) |")
    print("medians of " + " ; ".join(RATIOS) + " per category (A:B:I, split())\n")
    print(head + "\n|---|" + "---|" * (len(cats) + 2))
    cell = lambda m: " ; ".join(f"{x:.2f}" for x in m) + f" ({split(m)})"  # noqa: E731
    print(f"| real ({a.membership.name}) | " + " | ".join(cell(ref[c]) for c in cats) + " | | |")
    for store in a.stores:
        sim = {c: np.median(np.array(v), axis=0) for c, v in simulated(store).items()}
        both = [c for c in cats if c in sim]
        dev = np.mean([abs(np.log(sim[c][0] / ref[c][0])) for c in both])
        dev3 = np.mean([np.abs(np.log(sim[c] / ref[c])) for c in both])
        print(f"| {store.name} | " + " | ".join(cell(sim[c]) if c in sim else "-" for c in cats)
              + f" | {dev:.3f} over {len(both)} | {dev3:.3f} |")


if __name__ == "__main__":
    main()
