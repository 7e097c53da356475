"""The analysis of bench/results/real_shadows_deleted_plan.md (fixed before any delete-d
figure was computed): coverage on real shadows of the rules that read the pairs' variance
from a delete-d jackknife (V_d, d = 2, 3, 4) plus the halves' samples' part (V_h).

    python bench/real_shadow_deleted.py results/real_shadows_seed0.jsonl results/real_shadows_halves_seed0.jsonl results/real_shadows_deleted_seed0.jsonl --select
    python bench/real_shadow_deleted.py <main> <halves> <deleted> --subsets 100 --confirm A=D3t,...

The main store gives the truth (mu, T_p, T_s) and the blocks (B8); the halves store V_h per
coverage subset; the delete-d store [point, V_2, V_3, V_4, V_j] per subset (its point and
V_j must equal the halves store's: the same pairs). Coverage of a fresh run as in
bench/real_shadow_rules.py.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_shadow_halves as H  # noqa: E402
import real_shadow_rules as R  # noqa: E402
from tpr_rules import Z  # noqa: E402

DS = (2, 3, 4)
RULES = tuple(f"D{d}{t}" for d in DS for t in ("", "t"))  # D2, D2t, D3, D3t, D4, D4t
TPR_CLASSES = {"D", "G"}  # V_d alone (no V_h: a half lacks the support); d = 2, 3 only
BANDS = {"select": (0.935, 0.965), "confirm": (0.93, 0.97)}
T7 = float(stats.t.ppf(0.975, R.PAIRS - 1))
# a rule per_subset and the cells read but `table` does not iterate (its tables stay as they
# were): D4 with Student's t on Satterthwaite's df, V_4 on P - 1, V_h's taken as many
# (bench/results/real_shadows_eleventh_plan.md; intervals' delete4_halves_s)
SATTERTHWAITE = "D4s"


# V_4 of the stores written before intervals.deleted_variance took the split-mean form (their
# meta has no "v4"): the simple-random-sampling form, (N - 1) / N x var (ddof 1) over 14
# complementary splits, which the split mean (ddof 0) is 27 / 28 x 70 / 69 of for any rows
SPLIT_MEAN_OF_STORED = 27 / 28 * 70 / 69


def load(main: Path, halves: Path, deleted: Path, subsets: int = 200, v4: str = "stored"
         ) -> dict:
    """real_shadow_halves.load's dict plus "dcov": {key: [subsets, 5]} (point, V_2, V_3, V_4,
    V_j) of the delete-d store's first `subsets` units, checked against the halves store.
    v4: "stored" reads V_4 as the store holds it (the form of its day, as the plan's outcome
    was read), "split-mean" in intervals.deleted_variance's form of today (a store without
    a "v4" in its meta rescaled by SPLIT_MEAN_OF_STORED)."""
    if v4 not in ("stored", "split-mean"):
        raise SystemExit(f"v4 {v4!r}: one of stored, split-mean")
    meta = deleted.with_suffix(".meta.json")
    old_form = "v4" not in (json.loads(meta.read_text()) if meta.is_file() else {})
    scale = SPLIT_MEAN_OF_STORED if v4 == "split-mean" and old_form else 1.0
    d = H.load(main, halves, subsets)
    units = {i: v for (_, i), v in R.store_units(deleted).items()}
    if sorted(units)[:subsets] != list(range(subsets)):
        raise SystemExit(f"{deleted}: {len(units)} subsets finished, not the first {subsets} the plan reads")
    d["dcov"] = {}
    for k in d["hcov"]:
        r = np.array([units[i][k] for i in range(subsets)], float)
        a, b = r[:, [0, 4]], d["hcov"][k][:, [0, 2]]
        if not ((a == b) | (np.isnan(a) & np.isnan(b))).all():
            raise SystemExit(f"{deleted}: {k}: point / V_j differ from {halves}'s subsets")
        r[:, 3] *= scale
        d["dcov"][k] = r
    return d


def applies(rule: str, cls: str) -> bool:
    return cls not in TPR_CLASSES or int(rule[1]) < 4


def variance(d: dict, key: str, rule: str, cls: str, vh_scale: float = 1.0) -> np.ndarray:
    """Per subset: V_d, plus max(V_h x vh_scale, 0) outside the TPR classes."""
    v = d["dcov"][key][:, 1 + DS.index(int(rule[1]))]
    if cls in TPR_CLASSES:
        return v
    return v + np.maximum(d["hcov"][key][:, 1] * vh_scale, 0.0)


def half_width(d: dict, key: str, rule: str, cls: str, vh_scale: float = 1.0) -> np.ndarray:
    v = variance(d, key, rule, cls, vh_scale)
    if rule == SATTERTHWAITE:  # t on (V_4 + V_h+)^2 / (V_4^2 / (P - 1)): nan where V_4 and V_h+ are 0
        v4 = d["dcov"][key][:, 1 + DS.index(4)]
        with np.errstate(invalid="ignore", divide="ignore"):
            return stats.t.ppf(0.975, v ** 2 / (v4 ** 2 / (R.PAIRS - 1))) * np.sqrt(v)
    return (T7 if rule.endswith("t") else Z) * np.sqrt(v)


def per_subset(d: dict, key: str, rule: str, cls: str, comp: dict, ts_scale: float = 1.0,
               empirical: bool = False, vh_scale: float = 1.0):
    """(P(covered), P(below), h, ok) per subset (real_shadow_halves.per_subset's for today's
    rules)."""
    if rule not in RULES and rule != SATTERTHWAITE:
        return H.per_subset(d, key, rule, comp, ts_scale, empirical)
    return H.covered_runs(d, d["dcov"][key][:, 0], half_width(d, key, rule, cls, vh_scale), comp,
                          ts_scale, empirical)


def cell(d: dict, cls: str, keys: list[str], comps: dict, rule: str, ts_scale: float = 1.0,
         empirical: bool = False, to_b8: bool = False) -> dict:
    """A class's pooled figures under one rule (real_shadow_halves.cell's fields); to_b8: each
    key's V_h rescaled so that its mean is B8 (gate (v'))."""
    covs, cal, bound, free, per, undefined = [], [], [], [], [], []
    for k in keys:
        c = comps[k]
        scale = max(c["b8"], 0.0) / c["v_h"] if to_b8 and c["v_h"] > 0 else 1.0
        p, _, h, ok = per_subset(d, k, rule, cls, c, ts_scale, empirical, scale)
        undefined.append(1 - ok.mean())
        full = np.full(ok.size, np.nan)
        full[ok] = p
        per.append(full)
        covs.append(float(p.mean()) if p.size else np.nan)
        cal.append(float(h.mean()) / (Z * np.sqrt(c["t_p"] + c["t_s"])) if h.size else np.nan)
        binds = ((d["hcov"][k][:, 1] < 0)[ok] if cls not in TPR_CLASSES or rule not in RULES
                 else np.zeros(ok.sum(), bool))
        bound.append(p[binds])
        free.append(p[~binds])
    return H.pooled(covs, cal, bound, free, per, undefined)


def table(d: dict) -> dict:
    """{class: {"today": rule, "rules": {rule: cell + ts15, emp, b8 (gate v')}, "vd_tp":
    {d: V_d / T_p (ratio of sums over the keys)}}}."""
    out = {}
    for cls, (_, today) in R.CLASSES.items():
        keys = H.class_keys(d, cls)
        comps = {k: H.components(d, k) for k in keys}
        rules = {}
        for rule in ((today,) if d["has_cov"] else ()) + tuple(r for r in RULES if applies(r, cls)):
            c = cell(d, cls, keys, comps, rule)
            c["ts15"] = cell(d, cls, keys, comps, rule, 1.5)
            c["emp"] = cell(d, cls, keys, comps, rule, empirical=True)
            c["b8"] = cell(d, cls, keys, comps, rule, to_b8=True) if rule in RULES else c
            rules[rule] = c
        tp = sum(comps[k]["t_p"] for k in keys)
        vd = {dd: sum(float(np.nanmean(d["dcov"][k][:, 1 + DS.index(dd)])) for k in keys) / tp
              for dd in DS}
        vd["j"] = sum(float(np.nanmean(d["dcov"][k][:, 4])) for k in keys) / tp
        out[cls] = {"today": today, "rules": rules, "vd_tp": vd}
    return out


def oracle(d: dict, cls: str) -> dict:
    """After a review of the outcome (reported, not in the plan's rules): the class's pooled
    coverage of an interval of the true width, 1.96 sqrt(T_p + T_s) (what the figures' tails
    leave at the right variance), and D4's variance over the truth's, (V_4 + max(V_h, 0)) /
    (T_p + T_s) (V_4 alone for TPR), as a ratio of sums over the class's keys."""
    covs, num, den = [], 0.0, 0.0
    for k in H.class_keys(d, cls):
        c = H.components(d, k)
        dev = (d["dcov"][k][:, 0] - c["mu"]) * np.sqrt(d["n_pairs"] / (d["n_pairs"] - R.PAIRS))
        dev = dev[np.isfinite(dev)]
        covs.append(float(R.covered(np.full(dev.size, Z * np.sqrt(c["t_p"] + c["t_s"])), dev,
                                    c["t_s"])[0].mean()))
        num += float(np.nanmean(variance(d, k, "D4", cls)))
        den += c["t_p"] + c["t_s"]
    return {"coverage": float(np.mean(covs)), "d4_over_truth": num / den}


def free_resampled(d: dict, cls: str, rule: str, seed: int = 11, boot: int = 2000,
                   which: str = "free") -> dict:
    """Gate (iii)'s coverage where V_h's floor is free (which="free") or binds ("bound"), and
    its Monte Carlo spread: the subsets resampled with replacement (the same subsets for
    every key), `boot` times. {"point", "sd", "above" (share of resamplings above 0.97),
    "outside" (outside [0.93, 0.97]), "range" (2.5 / 97.5 %)}."""
    ps, fs = [], []
    for k in H.class_keys(d, cls):
        p, _, _, ok = per_subset(d, k, rule, cls, H.components(d, k))
        full, side = np.full(ok.size, np.nan), np.zeros(ok.size, bool)
        binds = (d["hcov"][k][:, 1] < 0)[ok]
        full[ok], side[ok] = p, (binds if which == "bound" else ~binds)
        ps.append(full)
        fs.append(side)
    ps, fs = np.array(ps), np.array(fs)
    rng = np.random.default_rng(seed)
    bs = np.array([ps[:, ix][fs[:, ix]].mean()
                   for ix in (rng.integers(0, ps.shape[1], ps.shape[1]) for _ in range(boot))])
    lo, hi = BANDS["confirm"]
    return {"point": float(ps[fs].mean()), "sd": float(bs.std(ddof=1)),
            "above": float((bs > hi).mean()), "outside": float(((bs < lo) | (bs > hi)).mean()),
            "range": [float(x) for x in np.percentile(bs, [2.5, 97.5])]}


def passes(c: dict, band: tuple[float, float], floors: tuple[float, float] = (0.92, 0.92),
           split_upper: bool = True) -> tuple[bool, str]:
    """The plan's criteria (i)-(iv), (v') and (vi) with pooled band `band` and the key floors
    of (ii) and (iv) (split_upper: real_shadow_halves.passes'): (ok, why not)."""
    return H.passes(c, band, b8=True, floors=floors, split_upper=split_upper)


def select(tab: dict, cls: str) -> tuple[str, str]:
    """Selection (pool A): the narrowest qualifier by width over today's (ties: smaller d,
    z before t); none: today's."""
    t = tab[cls]
    cands = [r for r in RULES if r in t["rules"]]
    res = {r: passes(t["rules"][r], BANDS["select"]) for r in cands}
    return H.narrowest(t, res, RULES)


def markdown(tab: dict, d: dict, title: str, chosen: dict | None = None,
             confirm: dict | None = None) -> str:
    L = [f"# {title}", "",
         f"{d['subsets']} coverage subsets of 8 pairs from a pool of {d['n_pairs']} real shadow "
         "pairs per arm (bench/real_shadow_deleted.py; plan: real_shadows_deleted_plan.md). "
         "Nominal 0.95, target 0.93-0.97; pooled over the class's reads and the three "
         "comparisons. Dd: V_d + max(V_h, 0) with 1.96 (the TPR classes: V_d alone); Ddt: with "
         "t(7).", "",
         "| class | rule | coverage [95 % range] (lowest-highest key) | width / calibrated | floor "
         "binds (records) | where it binds / not | T_s x 1.5: coverage (lowest key) | empirical "
         "samples' part | V_h at B8 |",
         "|---|---|---|---|---|---|---|---|---|"]
    for cls, t in tab.items():
        for rule, c in t["rules"].items():
            tag = " (today)" if rule == t["today"] else ""
            nm = H.name(rule) if rule not in RULES else rule
            L.append(f"| {cls}: {R.LABEL[cls]} | {nm}{tag} | {c['coverage']:.3f} "
                     f"[{c['range'][0]:.3f}, {c['range'][1]:.3f}] ({c['min']:.3f}-{c['max']:.3f}) | "
                     f"{c['width_calibrated']:.2f} | {c['share']:.2f} ({c['n_bound']}) | "
                     f"{c['bound']:.3f} / {c['free']:.3f} | "
                     f"{c['ts15']['coverage']:.3f} ({c['ts15']['min']:.3f}) | {c['emp']['coverage']:.3f} | "
                     f"{c['b8']['coverage']:.3f} |")
    L += ["", "Width / calibrated: mean half-width over 1.96 sqrt(T_p + T_s) (mean over keys). "
          "Floor binds: V_h < 0. 95 % range: the pooled coverage over 500 resamplings of the "
          "subsets (Monte Carlo only).", "",
          "**V_d / T_p** per class (ratios of sums over the keys; d = 2 / 3 / 4, and the "
          "delete-one jackknife V_j): "
          + "; ".join(f"{cls} " + " / ".join(f"{t['vd_tp'][x]:.2f}" for x in (*DS, "j"))
                      for cls, t in tab.items()) + ".", "",
          "After a review of the outcome (reported): an interval of the true width, 1.96 "
          "sqrt(T_p + T_s), covers / (V_4 + max(V_h, 0)) over (T_p + T_s): "
          + "; ".join(f"{cls} {o['coverage']:.3f} / {o['d4_over_truth']:.2f}"
                      for cls, o in ((c, oracle(d, c)) for c in tab)) + ".", "",
          "Undefined records (share of the class's records without an interval; the plan's "
          "report): " + "; ".join(f"{cls} " + ", ".join(f"{r} {c['undefined']:.3f}" for r, c in t["rules"].items()
                                                       if r in RULES)
                                  for cls, t in tab.items()) + ".", ""]
    return "\n".join(L + H.outcome_lines(chosen, confirm, lambda r: r if r in RULES else H.name(r)))


def afterwards(stem: str, seed: int, title: str, subsets: int = 100,
               results: Path = Path(__file__).resolve().parents[1] / "results") -> tuple[dict, str]:
    """A pool's rules table measured after a plan's outcome: today's rules beside the delete-d
    ones, V_4 in split-mean form, the first `subsets` coverage subsets of its main store with
    coverage subsets (results/<stem>cov_seed<seed>.jsonl, beside <stem>halves_ and
    <stem>deleted_): (table, markdown as `--out` writes it)."""
    d = load(*(results / f"{stem}{kind}seed{seed}.jsonl" for kind in ("cov_", "halves_", "deleted_")),
             subsets, "split-mean")
    t = table(d)
    return t, markdown(t, d, title) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("main", type=Path)
    ap.add_argument("halves", type=Path)
    ap.add_argument("deleted", type=Path)
    ap.add_argument("--subsets", type=int, default=200)
    ap.add_argument("--select", action="store_true")
    ap.add_argument("--confirm", default="", help="class=rule,... (D2, D2t, ...)")
    ap.add_argument("--title", default="Real shadows: the delete-d jackknives' rules")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--v4", default="stored", choices=("stored", "split-mean"),
                    help="V_4 as the store holds it, or in today's split-mean form")
    a = ap.parse_args()
    d = load(a.main, a.halves, a.deleted, a.subsets, a.v4)
    tab = table(d)
    chosen = {c: select(tab, c) for c in R.CLASSES} if a.select else None
    conf = H.confirmations(a.confirm, lambda c, r: passes(tab[c]["rules"][r], BANDS["confirm"]))
    H.write(markdown(tab, d, a.title, chosen, conf), a.out)


if __name__ == "__main__":
    main()
