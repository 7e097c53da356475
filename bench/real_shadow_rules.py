"""Coverage of the interval rules on real shadows (bench/real_shadow_coverage.py's store),
the analysis of bench/results/real_shadows_plan.md, fixed before any result was read.

For every comparison (arm - base) and read of a coverage subset, an interval rule gives a
half-width h from the subset's own recorded variances. A fresh run of 8 pairs on fresh
samples errs by e = d' + s: d' the subset's deviation from the pool's mean point (its
pairs' noise), scaled by sqrt(P_pool / (P_pool - 8)) (drawing 8 of the pool's pairs without
replacement shrinks that variance by (P_pool - 8) / P_pool), and s ~ N(0, T_s) the samples'
part (the partition blocks' variance over shared sample reweightings, independent of the
pairs'). The subset's coverage is P(|d' + s| <= h) = Phi((h - d') / sd_s) - Phi((-h - d') / sd_s);
a rule's coverage of a read is its mean over the subsets, and a class's the mean over its
reads and the three comparisons (the pooled-read criterion).

    python bench/real_shadow_rules.py results/real_shadows_seed0.jsonl [--select] [--subsets 200]
    python bench/real_shadow_rules.py results/real_shadows_seed1.jsonl --confirm C=C1t,...
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jsonl  # noqa: E402  (bench/jsonl.py)
from matched_rules import DESIGNS as N_DESIGNS, NAMES, PLANS, interval  # noqa: E402  (bench/matched_rules.py)
from tpr_rules import Z  # noqa: E402

CANDIDATES = PLANS["real_ratio"]  # C0 both, C1 twoway, C3 sum, C6 pairs_t, C8 jacksum, CJ, CJt, C1t
PAIRS = 8
K_END = 4  # budgets 1, 2, 4 and the 12-epoch run
COMPARISONS = ("batchnorm_minus_none", "batchnorm_reg_minus_none", "batchnorm_reg_minus_batchnorm")
CLASSES = {  # class: (reads, the rule `mixed` uses today)
    "A": (("auc_matched", "auc_fit"), "C8"),
    "B": (("auc_overlap", "auc_fit_overlap"), "C0"),
    "C": (("fz_flipped_matched", "fz_flipped_overlap", "fz_ood_matched", "fz_flipped_fit",
           "fz_ood_fit"), "C8"),
    "D": (("tpr_low_matched",), "C6"),
    "E": (tuple(f"eq{k}_auc_all" for k in range(K_END)), "C8"),
    "F": (tuple(f"eq{k}_fz_{s}" for k in range(K_END) for s in ("flipped", "ood")), "C8"),
    "G": (tuple(f"eq{k}_tpr_low_all" for k in range(K_END)), "C6"),
}
LABEL = {"A": "AUC at the common point", "B": "AUC over the overlap",
         "C": "memorization at matched utility or fit", "D": "TPR at 1e-3 at matched utility",
         "E": "AUC at equal budget", "F": "memorization at equal budget",
         "G": "TPR at 1e-3 at equal budget"}
# rules that read the pairs only (no samples' variance): eligible for TPR only (plan)
PAIRS_ONLY = ("C6", "CJ", "CJt")


def half_width(r: np.ndarray, rule: str) -> np.ndarray:
    """Half-width per subset of records [point, V_p, V_s, V_b, V_j] under a candidate
    (bench/matched_rules.py's interval: every candidate here is symmetric about the point)."""
    lo, hi = interval(r, rule, PAIRS)
    return (hi - lo) / 2


def store_units(store: Path) -> dict:
    """{(kind, i): value} of a resumable store's units (bnmem.attack.coverage.simulate_all);
    the first line (the study's fingerprint) and a line a kill cut short are skipped."""
    return {(u["kind"], u["i"]): u["value"] for u in jsonl.lines(store)[1:] if u is not None}


def load(store: Path, subsets: int | None = None) -> dict:
    """The store's units: {"points": {key: [point subsets + coverage subsets]}, "cov": {key:
    [subsets, 5]} (point, V_p, V_s, V_b, V_j), "blocks": {key: [blocks, 1 + reweightings]},
    "n_pairs": the pool's pairs, "subsets": how many coverage subsets were read}; `subsets`:
    the first that many coverage subsets by index (the plan's count; fewer finished is an
    error), every finished one when None. key: "<comparison>/<read>"."""
    units = store_units(store)
    runs = {i: v for (k, i), v in units.items() if k == "run"}
    blocks = {i: v for i, v in runs.items() if len(next(x for k, x in v.items() if k != "pairs")) > 5}
    n_pairs = PAIRS * len(blocks)
    if not blocks or sorted(blocks) != list(range(len(blocks))):
        raise SystemExit(f"{store}: the partition blocks are incomplete ({sorted(blocks)})")
    cov_idx = sorted(i for i in runs if i not in blocks)
    if subsets is not None:
        want = list(range(len(blocks), len(blocks) + subsets))
        if cov_idx[:subsets] != want:
            raise SystemExit(f"{store}: {len(cov_idx)} coverage subsets finished, not the first "
                             f"{subsets} the plan reads")
        cov_idx = want
    keys = [k for k in runs[cov_idx[0]] if k != "pairs"]
    truth_rows = [np.asarray(v, float) for (k, _), v in sorted(units.items()) if k == "truth"]
    n_reads = len(keys) // len(COMPARISONS)
    points = {}
    for j, key in enumerate(keys):  # point subsets' rows are comparisons x reads, in key order
        pts = [row[j] for row in truth_rows] + [runs[i][key][0] for i in cov_idx]
        points[key] = np.array(pts, float)
    assert all(row.size == n_reads * len(COMPARISONS) for row in truth_rows)
    return {"points": points,
            "cov": {k: np.array([runs[i][k] for i in cov_idx], float) for k in keys},
            "blocks": {k: np.array([blocks[b][k] for b in sorted(blocks)], float) for k in keys},
            "n_pairs": n_pairs, "subsets": len(cov_idx)}


def truth_parts(d: dict, key: str) -> dict:
    """The truth's parts of one key: mu (the pool's mean point), T_p (a fresh run's pairs'
    variance: the subsets' variance x P_pool / (P_pool - 8)), T_s (the variance over shared
    reweightings of the blocks' mean), n_points."""
    pts = d["points"][key]
    pts = pts[np.isfinite(pts)]
    fpc = d["n_pairs"] / (d["n_pairs"] - PAIRS)
    blk = d["blocks"][key][:, 1:]  # [blocks, reweightings]
    with np.errstate(invalid="ignore"):
        t_s = float(np.nanvar(np.nanmean(blk, axis=0), ddof=1)) if np.isfinite(blk).any() else np.nan
    return {"mu": float(pts.mean()) if pts.size else np.nan,
            "t_p": float(pts.var(ddof=1)) * fpc if pts.size > 1 else np.nan, "t_s": t_s,
            "n_points": int(pts.size)}


def components(d: dict, key: str) -> dict:
    """truth_parts and the procedure's mean V_p, V_s, V_j."""
    r = d["cov"][key]
    return {**truth_parts(d, key), "v_p": float(np.nanmean(r[:, 1])),
            "v_s": float(np.nanmean(r[:, 2])), "v_j": float(np.nanmean(r[:, 4]))}


def per_subset(d: dict, key: str, rule: str, comp: dict | None = None, ts_scale: float = 1.0
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(P(covered), P(wholly below the truth), half-width, the subsets read) of one key under
    one rule (module docstring); ts_scale multiplies T_s (a sensitivity read)."""
    c = comp or components(d, key)
    r = d["cov"][key]
    h = half_width(r, rule)
    dev = (r[:, 0] - c["mu"]) * np.sqrt(d["n_pairs"] / (d["n_pairs"] - PAIRS))
    ok = np.isfinite(h) & np.isfinite(dev)
    h, dev = h[ok], dev[ok]
    return (*covered(h, dev, c["t_s"] * ts_scale), h, ok)


def covered(h: np.ndarray, dev: np.ndarray, t_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(P(covered), P(wholly below the truth)) per subset of half-width h and pairs'
    deviation dev, the samples' part s ~ N(0, t_s): e = dev + s is covered when -h <= e <= h;
    the interval (point - h, point + h) lies wholly below the truth when e < -h (the point
    understates it) and above when e > h."""
    sd = np.sqrt(max(t_s, 0.0))
    if sd > 0:
        above, below = stats.norm.cdf((h - dev) / sd), stats.norm.cdf((-h - dev) / sd)
    else:
        above, below = (dev <= h).astype(float), (dev < -h).astype(float)
    return above - below, below


def coverage(d: dict, key: str, rule: str, comp: dict | None = None, ts_scale: float = 1.0) -> dict:
    """{coverage, mean_width, miss_below, miss_above, subsets} of one key under one rule
    (module docstring); miss_below: the chance the interval lies wholly below the truth."""
    p, below, h, ok = per_subset(d, key, rule, comp, ts_scale)
    if not ok.any():
        return {"coverage": np.nan, "mean_width": np.nan, "miss_below": np.nan,
                "miss_above": np.nan, "subsets": 0}
    return {"coverage": float(p.mean()), "mean_width": float(2 * h.mean()),
            "miss_below": float(below.mean()), "miss_above": float((1 - p - below).mean()),
            "subsets": int(ok.sum())}


def floor_split(d: dict, cls: str, rule: str) -> dict:
    """After review (not in the plan): twoway's variance is floored at V_p where
    2 (V_p + V_s) - V_b < V_p; {share: of the class's (key, subset) records where the floor
    binds, bound / free: the coverage over those records and over the rest}."""
    bound, free = [], []
    for k in class_keys(d, cls):
        r = d["cov"][k]
        p, _, _, ok = per_subset(d, k, rule)
        binds = (2 * (r[:, 1] + r[:, 2]) - r[:, 3] < r[:, 1])[ok]
        bound.append(p[binds])
        free.append(p[~binds])
    b, f = np.concatenate(bound), np.concatenate(free)
    return {"share": b.size / (b.size + f.size), "bound": float(b.mean()) if b.size else np.nan,
            "free": float(f.mean()) if f.size else np.nan}


def sensitivity(d: dict, cls: str, rule: str, ts_scale: float) -> dict:
    """After review: the class's pooled coverage (and lowest key) with T_s x ts_scale."""
    covs = [coverage(d, k, rule, ts_scale=ts_scale)["coverage"] for k in class_keys(d, cls)]
    return {"coverage": float(np.nanmean(covs)), "min": float(np.nanmin(covs))}


def cross(da: dict, db: dict, cls: str) -> float:
    """After review: mean over the class's keys of z^2 = (mu_A - mu_B)^2 / (T_s,A + T_s,B +
    (T_p,A + T_p,B) / 16): two pools' truths differ by their samples' part and their 128
    pairs' offset (T_p x 8/128 each); 1 expected where T_s is right, below 1 where it is too
    large, above where too small (a check of the bootstrap's T_s by retrained models)."""
    z2 = []
    for k in class_keys(da, cls):
        a, b = components(da, k), components(db, k)
        z2.append((a["mu"] - b["mu"]) ** 2
                  / (a["t_s"] + b["t_s"] + (a["t_p"] + b["t_p"]) * PAIRS / da["n_pairs"]))
    return float(np.nanmean(z2))


def class_keys(d: dict, cls: str) -> list[str]:
    """The class's keys (comparison/read) present in the store."""
    return [f"{c}/{r}" for c in COMPARISONS for r in CLASSES[cls][0] if f"{c}/{r}" in d["cov"]]


def table(d: dict, cands: tuple = CANDIDATES) -> dict:
    """{class: {"reads": {key: {rule: coverage(...)}}, "components": {key: components},
    "pooled": {rule: {coverage, width_ratio}}}}: pooled = the mean over the class's reads and
    comparisons (width_ratio: mean width over today's rule's, averaged the same way)."""
    out = {}
    for cls, (reads, today) in CLASSES.items():
        keys = class_keys(d, cls)
        comps = {k: components(d, k) for k in keys}
        cells = {k: {rule: coverage(d, k, rule, comps[k]) for rule in cands} for k in keys}
        pooled = {}
        for rule in cands:
            covs = [cells[k][rule]["coverage"] for k in keys]
            ratio = [cells[k][rule]["mean_width"] / cells[k][today]["mean_width"] for k in keys]
            pooled[rule] = {"coverage": float(np.nanmean(covs)),
                            "min": float(np.nanmin(covs)), "max": float(np.nanmax(covs)),
                            "width_ratio": float(np.nanmean(ratio))}
        out[cls] = {"reads": cells, "components": comps, "pooled": pooled, "today": today}
    return out


def summary(tab: dict, d: dict) -> dict:
    """{class: {coverage (today's pooled), word, ts_tp (mean over keys of T_s / T_p), vs_vp
    (of the procedure's mean V_s / V_p), width_calibrated (today's mean half-width over
    1.96 sqrt(T_p + T_s), mean over keys)}}: the figures README quotes."""
    out = {}
    for cls, t in tab.items():
        comps, today = t["components"], t["today"]
        cov = t["pooled"][today]["coverage"]
        out[cls] = {"coverage": cov, "word": word(cov),
                    "ts_tp": float(np.nanmean([c["t_s"] / c["t_p"] for c in comps.values()])),
                    "vs_vp": float(np.nanmean([c["v_s"] / c["v_p"] for c in comps.values()])),
                    "width_calibrated": float(np.nanmean(
                        [np.nanmean(half_width(d["cov"][k], today)) / (Z * np.sqrt(c["t_p"] + c["t_s"]))
                         for k, c in comps.items()]))}
    return out


def readme_rows(sa: dict, sb: dict) -> list[str]:
    """README's table rows (pool A / pool B) from two summary() dicts."""
    return [f"| {cls}: {LABEL[cls]} | {NAMES[CLASSES[cls][1]]} | {sa[cls]['coverage']:.3f} / "
            f"{sb[cls]['coverage']:.3f} | {sa[cls]['width_calibrated']:.2f} / "
            f"{sb[cls]['width_calibrated']:.2f} | {sa[cls]['ts_tp']:.2f} / {sb[cls]['ts_tp']:.2f} | "
            f"{sa[cls]['vs_vp']:.2f} / {sb[cls]['vs_vp']:.2f} |" for cls in CLASSES]


def word(c: float) -> str:
    """The plan's verdict word for a class's pooled coverage."""
    return "calibrated" if 0.93 <= c <= 0.97 else "conservative" if c > 0.97 else "anti-conservative"


def select(tab: dict, cls: str) -> tuple[str, str]:
    """The plan's selection for one class: candidates whose pooled coverage lies in
    [0.935, 0.965] with no key below 0.92 (pairs-only rules for TPR only), the narrowest by
    pooled width ratio (ties: fewer designs); none: today's."""
    t, today = tab[cls], CLASSES[cls][1]
    ok = [c for c, p in t["pooled"].items()
          if 0.935 <= p["coverage"] <= 0.965 and p["min"] >= 0.92
          and (c not in PAIRS_ONLY or cls in ("D", "G"))]
    if not ok:
        return today, "none qualifies: today's stays"
    best = min(ok, key=lambda c: (round(t["pooled"][c]["width_ratio"], 9), N_DESIGNS[c]))
    return best, (f"qualifies ({', '.join(ok)}); width {t['pooled'][best]['width_ratio']:.3f} x "
                  "today's")


def confirmed(tab: dict, cls: str, rule: str) -> bool:
    """The plan's confirmation: pooled coverage in [0.93, 0.97], no key below 0.92."""
    p = tab[cls]["pooled"][rule]
    return 0.93 <= p["coverage"] <= 0.97 and p["min"] >= 0.92


def review_section(d: dict, rules: dict, other: dict | None = None) -> list[str]:
    """The checks added after the hostile review of pool A (not in the plan): for today's
    rule and each `rules` entry ({class: rule}), coverage where twoway's floor binds and where
    it does not, and pooled coverage (lowest key) with T_s x 1.5 and x 2; with `other` (the
    other pool's load()), the cross-pool z^2 per class (cross)."""
    L = ["## After review (not in the plan)", "",
         "| class | rule | floor binds (share) | coverage where it binds / not | T_s x 1.5 | T_s x 2 |",
         "|---|---|---|---|---|---|"]
    for cls in CLASSES:
        for rule in dict.fromkeys([CLASSES[cls][1], rules.get(cls, CLASSES[cls][1])]):
            f = floor_split(d, cls, rule)
            s15, s2 = sensitivity(d, cls, rule, 1.5), sensitivity(d, cls, rule, 2.0)
            L.append(f"| {cls} | {NAMES[rule]} | {f['share']:.2f} | {f['bound']:.3f} / {f['free']:.3f} | "
                     f"{s15['coverage']:.3f} ({s15['min']:.3f}) | {s2['coverage']:.3f} ({s2['min']:.3f}) |")
    L += ["", "Floor: twoway's 2 (V_p + V_s) - V_b below V_p (its variance is then V_p; the "
          "share is the same for every rule, the split only matters for twoway / twoway_t).", ""]
    if other is not None:
        L += ["Cross-pool check of T_s by retrained models: mean z^2 over each class's keys of "
              "(truth A - truth B)^2 / (T_s,A + T_s,B + (T_p,A + T_p,B) / 16); 1 where T_s is "
              "right, below 1 where it is too large: "
              + ", ".join(f"{cls} {cross(d, other, cls):.2f}" for cls in CLASSES) + ".", ""]
    return L


def markdown(tab: dict, d: dict, store: Path, chosen: dict | None = None,
             confirm: dict | None = None, review: list[str] | None = None) -> str:
    cands = tuple(next(iter(tab.values()))["pooled"])
    L = [f"`{store}`: {d['subsets']} coverage subsets of 8 pairs from a pool of {d['n_pairs']} "
         "real shadow pairs per arm. Coverage of a fresh run's truth (bench/real_shadow_rules.py: "
         "the subset's pairs' deviation plus the samples' part); nominal 0.95, target 0.93-0.97. "
         "Pooled: mean over the class's reads and the three comparisons.", "",
         "## Pooled per class", "",
         "| class | today | " + " | ".join(f"{c} {NAMES[c]}" for c in cands) + " | T_s / T_p | V_s / V_p | today's width / calibrated |",
         "|---|---|" + "---|" * (len(cands) + 3)]
    summ = summary(tab, d)
    for cls, t in tab.items():
        today = t["today"]
        ts_tp, vs_vp, ratio = (summ[cls][k] for k in ("ts_tp", "vs_vp", "width_calibrated"))
        cells = [f"{p['coverage']:.3f} ({p['min']:.3f}-{p['max']:.3f}) / {p['width_ratio']:.3f}"
                 for p in t["pooled"].values()]
        L.append(f"| {cls}: {LABEL[cls]} | {NAMES[today]}: **{word(t['pooled'][today]['coverage'])}** | "
                 + " | ".join(cells) + f" | {ts_tp:.2f} | {vs_vp:.2f} | {ratio:.2f} |")
    L += ["", "Cell: pooled coverage (lowest-highest key) / mean width relative to today's rule. "
          "T_s / T_p: the samples' true share against the pairs' (mean over keys); V_s / V_p: the "
          "procedure's estimates of the same (mean over subsets, then keys); last column: today's mean "
          "half-width over 1.96 sqrt(T_p + T_s), the half-width of a normal interval of the true variance.", ""]
    if chosen:
        L += ["## Selection (the plan's rule)", ""] + [f"- {c}: {NAMES[r]} ({why})" for c, (r, why) in chosen.items()] + [""]
    if confirm:
        L += ["## Confirmation", ""] + [f"- {c}: {NAMES[r]}: {tab[c]['pooled'][r]['coverage']:.3f} "
                                       f"(lowest key {tab[c]['pooled'][r]['min']:.3f}): "
                                       f"{'**confirmed**' if ok else 'NOT confirmed'}"
                                       for c, (r, ok) in confirm.items()] + [""]
    L += review or []
    L += ["## Per key", ""]
    for cls, t in tab.items():
        L += [f"### {cls}: {LABEL[cls]} (today: {NAMES[t['today']]})", "",
              "| key (truth; T_p, T_s) | " + " | ".join(f"{c} {NAMES[c]}" for c in cands) + " |",
              "|---|" + "---|" * len(cands)]
        for k, cells in t["reads"].items():
            c = t["components"][k]
            L.append(f"| {k} ({c['mu']:.4f}; {np.sqrt(c['t_p']):.4f}², {np.sqrt(max(c['t_s'], 0)):.4f}²) | "
                     + " | ".join(f"{s['coverage']:.3f} / {s['mean_width']:.4f}" for s in cells.values()) + " |")
        L.append("")
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", type=Path)
    ap.add_argument("--subsets", type=int, default=None, help="the first that many coverage subsets")
    ap.add_argument("--select", action="store_true")
    ap.add_argument("--confirm", default="", help="class=rule,... (the selection's choices)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--review", action="store_true",
                    help="add the checks made after the review (not in the plan)")
    ap.add_argument("--cross", type=Path, help="the other pool's store, for the cross-pool check")
    a = ap.parse_args()
    d = load(a.store, a.subsets)
    tab = table(d)
    chosen = {c: select(tab, c) for c in CLASSES} if a.select else None
    conf = None
    if a.confirm:
        conf = {}
        for item in a.confirm.split(","):
            c, r = item.split("=")
            conf[c] = (r, confirmed(tab, c, r))
    review = None
    if a.review:
        rules = {c: r for c, (r, _) in (chosen or {}).items()} | {c: r for c, (r, _) in (conf or {}).items()}
        review = review_section(d, rules, load(a.cross, a.subsets) if a.cross else None)
    text = markdown(tab, d, a.store, chosen, conf, review)
    if a.out:
        a.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
