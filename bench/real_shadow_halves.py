"""The analysis of bench/results/real_shadows_halves_plan.md (fixed before any halves figure
was computed): coverage on real shadows of the rules that add the halves' covariance V_h
(the samples' part without the interaction) to the pairs' jackknife.

    python bench/real_shadow_halves.py results/real_shadows_seed0.jsonl results/real_shadows_halves_seed0.jsonl --select
    python bench/real_shadow_halves.py results/real_shadows_seed1.jsonl results/real_shadows_halves_seed1.jsonl --confirm A=H,...

The main store (bench/real_shadow_coverage.py) gives the truth, T_p and T_s (and today's
rules' records where it has coverage subsets); the halves store (--halves) gives per
coverage subset and key [point, V_h, V_j]. Coverage of a fresh run as in
bench/real_shadow_rules.py (the subset's pairs' deviation plus N(0, T_s)).
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import warnings
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jsonl  # noqa: E402  (bench/jsonl.py)
import real_shadow_rules as R  # noqa: E402  (bench/real_shadow_rules.py)
from matched_rules import NAMES  # noqa: E402
from tpr_rules import Z  # noqa: E402

HALVES = ("H", "Ht", "Hs")
HNAMES = {"H": "jackhalves", "Ht": "jackhalves_t", "Hs": "jackhalves_s"}
K_SHARED, SPLITS = 50, 5  # the study's shared reweightings (draws // 2) and splits


def name(rule: str) -> str:
    return HNAMES.get(rule) or NAMES[rule]


def load(main: Path, halves: Path, subsets: int = 200) -> dict:
    """real_shadow_rules.load's dict of the main store (its coverage subsets, if any, as "cov")
    plus "hcov": {key: [subsets, 3]} (point, V_h, V_j) of the halves store's first `subsets`
    units; the points of those subsets join the truth where the main store has no coverage
    subsets (pool C). Checks that a subset's point and V_j equal the main store's record."""
    units = {i: v for (_, i), v in R.store_units(halves).items()}
    if sorted(units)[:subsets] != list(range(subsets)):
        raise SystemExit(f"{halves}: {len(units)} subsets finished, not the first {subsets} the plan reads")
    keys = [k for k in units[0] if k != "pairs"]
    hcov = {k: np.array([units[i][k] for i in range(subsets)], float) for k in keys}
    has_cov = _has_subsets(main)
    if has_cov:  # the truth from every finished unit; the coverage reads the first `subsets`
        d = R.load(main, None)
        d["cov"] = {k: v[:subsets] for k, v in d["cov"].items()}
        for k in keys:  # the same pairs, point and jackknife as the main store's subsets
            a, b = hcov[k][:, [0, 2]], d["cov"][k][:, [0, 4]]
            same = (a == b) | (np.isnan(a) & np.isnan(b))
            if not same.all():
                raise SystemExit(f"{halves}: {k}: point / V_j differ from {main}'s subsets")
    else:
        d = _truth_only(main)
        for k in keys:
            d["points"][k] = np.concatenate([d["points"][k], hcov[k][:, 0]])
    d["subsets"] = subsets
    d["hcov"], d["has_cov"] = hcov, has_cov
    return d


def _has_subsets(store: Path) -> bool:
    """Whether the main store holds coverage subsets (records of 5 values), not only blocks."""
    for u in jsonl.lines(store)[1:]:
        if u is None:
            continue
        if u["kind"] == "run" and len(next(v for k, v in u["value"].items() if k != "pairs")) == 5:
            return True
    return False


def _truth_only(store: Path) -> dict:
    """load()'s dict of a main store without coverage subsets (the blocks and point subsets)."""
    units = R.store_units(store)
    blocks = {i: v for (k, i), v in units.items() if k == "run"}
    if not blocks or sorted(blocks) != list(range(len(blocks))):
        raise SystemExit(f"{store}: the partition blocks are incomplete ({sorted(blocks)})")
    keys = [k for k in blocks[0] if k != "pairs"]
    truth_rows = [np.asarray(v, float) for (k, _), v in sorted(units.items()) if k == "truth"]
    return {"points": {k: np.array([row[j] for row in truth_rows], float) for j, k in enumerate(keys)},
            "cov": {}, "blocks": {k: np.array([blocks[b][k] for b in sorted(blocks)], float) for k in keys},
            "n_pairs": R.PAIRS * len(blocks), "subsets": 0}


def variance(r: np.ndarray) -> np.ndarray:
    """V_j + max(V_h, 0) of [point, V_h, V_j] records."""
    return r[:, 2] + np.maximum(r[:, 1], 0.0)


def half_width(r: np.ndarray, rule: str) -> np.ndarray:
    v = variance(r)
    if rule == "H":
        q = Z
    elif rule == "Ht":
        q = stats.t.ppf(0.975, R.PAIRS - 1)
    else:  # Satterthwaite: V_j on P - 1 df, V_h+ on K - splits
        vh = np.maximum(r[:, 1], 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            nu = v ** 2 / (r[:, 2] ** 2 / (R.PAIRS - 1) + vh ** 2 / (K_SHARED - SPLITS))
        q = stats.t.ppf(0.975, nu)
    return q * np.sqrt(v)


def per_subset(d: dict, key: str, rule: str, comp: dict, ts_scale: float = 1.0,
               empirical: bool = False):
    """real_shadow_rules.per_subset for any rule: (P(covered), P(below), h, ok); empirical:
    the samples' part drawn from the centred 16-block mean over its reweightings (comp's
    "s_emp") instead of N(0, T_s) (amendment 5)."""
    if rule not in HALVES and not empirical:
        return R.per_subset(d, key, rule, comp, ts_scale)
    r = d["hcov"][key] if rule in HALVES else d["cov"][key]
    h = half_width(r, rule) if rule in HALVES else R.half_width(r, rule)
    return covered_runs(d, r[:, 0], h, comp, ts_scale, empirical)


def covered_runs(d: dict, points: np.ndarray, h: np.ndarray, comp: dict, ts_scale: float = 1.0,
                 empirical: bool = False):
    """(P(covered), P(below), h, ok) of runs with these points and half-widths: each run's
    pairs' deviation from the truth plus the samples' part, N(0, T_s x ts_scale) or the
    centred 16-block mean's empirical distribution (empirical)."""
    dev = (points - comp["mu"]) * np.sqrt(d["n_pairs"] / (d["n_pairs"] - R.PAIRS))
    ok = np.isfinite(h) & np.isfinite(dev)
    h, dev = h[ok], dev[ok]
    if empirical:
        e = dev[:, None] + comp["s_emp"][None, :] * np.sqrt(ts_scale)
        below = (e < -h[:, None]).mean(1)
        return (np.abs(e) <= h[:, None]).mean(1), below, h, ok
    return (*R.covered(h, dev, comp["t_s"] * ts_scale), h, ok)


def components(d: dict, key: str) -> dict:
    """real_shadow_rules.truth_parts (mu, T_p, T_s), B8, the centred empirical samples' part
    and the halves' mean V_h and V_j."""
    blk = d["blocks"][key][:, 1:]
    mean = np.nanmean(blk, axis=0)
    return {**R.truth_parts(d, key), "b8": block_covariance(blk),
            "s_emp": mean[np.isfinite(mean)] - np.nanmean(mean),
            "v_h": float(np.nanmean(d["hcov"][key][:, 1])), "v_j": float(np.nanmean(d["hcov"][key][:, 2]))}


def block_covariance(blk: np.ndarray) -> float:
    """B8 (amendment 4): the mean covariance between two disjoint 8-pair blocks over their
    shared reweightings ([blocks, reweightings]); the samples' part of an 8-pair figure with
    the model-by-sample interaction removed (blocks share samples, no model)."""
    ok = np.isfinite(blk).all(axis=0)
    x = blk[:, ok]
    x = x - x.mean(axis=1, keepdims=True)
    c = x @ x.T / (x.shape[1] - 1)
    n = c.shape[0]
    return float((c.sum() - np.trace(c)) / (n * (n - 1)))


def class_keys(d: dict, cls: str) -> list[str]:
    return [f"{c}/{r}" for c in R.COMPARISONS for r in R.CLASSES[cls][0] if f"{c}/{r}" in d["hcov"]]


def cell(d: dict, keys: list[str], comps: dict, rule: str, ts_scale: float = 1.0,
         empirical: bool = False) -> dict:
    """A class's pooled figures under one rule: coverage (mean over keys), min / max key,
    mean width over the calibrated width 2 x 1.96 sqrt(T_p + T_s) (mean over keys), and the
    floor's split: the share of (key, subset) records with V_h < 0 and the coverage over
    those and over the rest."""
    covs, cal, bound, free, per, undefined = [], [], [], [], [], []
    for k in keys:
        p, _, h, ok = per_subset(d, k, rule, comps[k], ts_scale, empirical)
        undefined.append(1 - ok.mean())
        full = np.full(ok.size, np.nan)
        full[ok] = p
        per.append(full)
        covs.append(float(p.mean()) if p.size else np.nan)
        cal.append(float(h.mean()) / (Z * np.sqrt(comps[k]["t_p"] + comps[k]["t_s"])))
        binds = (d["hcov"][k][:, 1] < 0)[ok]  # the main store's subsets, same order (load)
        bound.append(p[binds])
        free.append(p[~binds])
    return pooled(covs, cal, bound, free, per, undefined)


def split_coverage(parts) -> tuple[float, int]:
    """Coverage over a split of the records (where a floor binds, or not), pooled over keys
    and pools with each record weighted by 1 / its pool's subsets, and the split's count.
    parts: (P(covered) per subset, nan where undefined; the split's subsets) per key and pool."""
    num = den = 0.0
    n = 0
    for f, sel in parts:
        m = np.isfinite(f) & sel
        num, den, n = num + f[m].sum() / f.size, den + m.sum() / f.size, n + int(m.sum())
    return (num / den if den else np.nan), n


@functools.lru_cache(maxsize=None)
def resample_counts(n: int) -> np.ndarray:
    """[500, n] multiplicities of the 500 resamples of n subsets (fixed seed) that `pooled`'s
    range draws (default_rng(0).integers(0, n, (500, n)), one row a resample)."""
    idx = np.random.default_rng(0).integers(0, n, (500, n))
    c = np.zeros((500, n))
    np.add.at(c, (np.arange(500)[:, None], idx), 1.0)
    c.setflags(write=False)
    return c


def pooled(covs: list, cal: list, bound: list, free: list, per: list, undefined: list) -> dict:
    """A class's cell from its keys' parts: coverage per key (covs), width over the
    calibrated (cal), the per-subset coverages where the floor binds and where not (bound,
    free), per key and subset (per, nan where undefined) and the undefined shares."""
    b, f = np.concatenate(bound), np.concatenate(free)
    # a 95 % range of the pooled coverage: the subsets resampled (500 times, fixed seed)
    per = np.array(per)  # [keys, subsets]
    counts = resample_counts(per.shape[1])  # [500, subsets]: each resample's multiplicities
    ok = np.isfinite(per)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample with an all-nan key
        # every resample at once: a key's mean over a resample's defined subsets is its
        # multiplicity-weighted sum over their count ([keys, 500]), as one at a time
        boot = np.nanmean((np.where(ok, per, 0.0) @ counts.T) / (ok @ counts.T), axis=0)
    return {"coverage": float(np.nanmean(covs)), "min": float(np.nanmin(covs)),
            "max": float(np.nanmax(covs)), "width_calibrated": float(np.nanmean(cal)),
            "share": b.size / max(b.size + f.size, 1), "n_bound": int(b.size),
            "bound": float(b.mean()) if b.size else np.nan, "free": float(f.mean()) if f.size else np.nan,
            "range": [float(np.nanpercentile(boot, 2.5)), float(np.nanpercentile(boot, 97.5))],
            "undefined": float(np.mean(undefined))}


def outcome_lines(chosen: dict | None, confirm: dict | None, label) -> list[str]:
    """The tables' selection and confirmation sections."""
    L = []
    if chosen:
        L += ["## Selection (the plan's rule, pool A)", ""] + [
            f"- {c}: {label(r)} ({why})" for c, (r, why) in chosen.items()] + [""]
    if confirm:
        L += ["## Confirmation", ""] + [
            f"- {c}: {label(r)}: " + ("**confirmed**" if ok else f"NOT confirmed ({why})")
            for c, (r, ok, why) in confirm.items()] + [""]
    return L


def table(d: dict) -> dict:
    """{class: {"today": rule, "rules": {rule: cell (+ ts15: the cell at T_s x 1.5)},
    "q2": mean over keys of mean V_h / T_s, "ts_tp": mean T_s / T_p}}."""
    out = {}
    for cls, (_, today) in R.CLASSES.items():
        keys = class_keys(d, cls)
        comps = {k: components(d, k) for k in keys}
        rules = {}
        for rule in ((today,) if d["has_cov"] else ()) + HALVES:
            c = cell(d, keys, comps, rule)
            c["ts15"] = cell(d, keys, comps, rule, 1.5)
            c["emp"] = cell(d, keys, comps, rule, empirical=True)
            rules[rule] = c
        out[cls] = {"today": today, "rules": rules,
                    "q2": float(np.nanmean([c["v_h"] / c["b8"] for c in comps.values() if c["b8"] > 0])),
                    "q2_ts": float(np.nanmean([c["v_h"] / c["t_s"] for c in comps.values()])),
                    "b8_ts": float(np.nanmean([c["b8"] / c["t_s"] for c in comps.values()])),
                    "ts_tp": float(np.nanmean([c["t_s"] / c["t_p"] for c in comps.values()]))}
    return out


ELIGIBLE = {"H", "Ht"}  # amendment 1: Hs reported only
INELIGIBLE_CLASSES = {"D", "G"}  # amendment 2: TPR reported only
MIN_BOUND = 50  # amendment 3


def passes(c: dict, band: tuple[float, float], q2: float | None = None, b8: bool = False,
           floors: tuple[float, float] = (0.92, 0.92), split_upper: bool = True) -> tuple[bool, str]:
    """The plan's criteria (i)-(vi) with pooled band `band` (q2: the class's mean V_h / B8,
    gate (v), where it applies; b8: the deleted plan's gate (v'), the pooled coverage with
    V_h rescaled to B8, c["b8"], in the band; floors: the key floors of (ii) and (iv), the
    keypooled plan's amendment setting others; split_upper=False: the eighth plan's gates,
    where V_h's floor binds or is free only the lower end 0.93 counts): (ok, why not)."""
    why = []
    top = 0.97 if split_upper else np.inf
    if not band[0] <= c["coverage"] <= band[1]:
        why.append(f"pooled {c['coverage']:.3f}")
    if c["min"] < floors[0]:
        why.append(f"lowest key {c['min']:.3f}")
    if not 0.93 <= c["free"] <= top:
        why.append(f"where the floor is free {c['free']:.3f}")
    if c["n_bound"] >= MIN_BOUND and not 0.93 <= c["bound"] <= top:
        why.append(f"where the floor binds {c['bound']:.3f}")
    if c["ts15"]["min"] < floors[1]:
        why.append(f"lowest key at T_s x 1.5 {c['ts15']['min']:.3f}")
    if q2 is not None and not 0.8 <= q2 <= 1.25:
        why.append(f"V_h / B8 {q2:.2f}")
    if b8 and not band[0] <= c["b8"]["coverage"] <= band[1]:
        why.append(f"pooled with V_h at B8 {c['b8']['coverage']:.3f}")
    if not band[0] <= c["emp"]["coverage"] <= band[1]:
        why.append(f"pooled with the empirical samples' part {c['emp']['coverage']:.3f}")
    return not why, "; ".join(why)


def select(tab: dict, cls: str) -> tuple[str, str]:
    """Selection (pool A): the narrowest eligible qualifier (H, Ht; criteria with [0.935,
    0.965] and gate (v)) by width over today's; none, or an ineligible class: today's."""
    t = tab[cls]
    if cls in INELIGIBLE_CLASSES:
        return t["today"], "not eligible (amendment 2): today's stays"
    res = {r: passes(t["rules"][r], (0.935, 0.965), t["q2"]) for r in HALVES if r in ELIGIBLE}
    return narrowest(t, res, HALVES, name)


def narrowest(t: dict, res: dict, order: tuple, label=lambda r: r) -> tuple[str, str]:
    """A class's choice from its candidates' (ok, why) `res`: the narrowest qualifier by
    pooled width over today's rule (ties in `order`), or today's with every reason."""
    ok = [r for r, (good, _) in res.items() if good]
    if not ok:
        return t["today"], "none qualifies: today's stays (" + "; ".join(
            f"{label(r)}: {why}" for r, (_, why) in res.items()) + ")"
    today_w = t["rules"][t["today"]]["width_calibrated"]
    best = min(ok, key=lambda r: (round(t["rules"][r]["width_calibrated"] / today_w, 9), order.index(r)))
    return best, (f"qualifies ({', '.join(label(r) for r in ok)}); width "
                  f"{t['rules'][best]['width_calibrated'] / today_w:.3f} x today's")


def markdown(tab: dict, d: dict, title: str, chosen: dict | None = None,
             confirm: dict | None = None) -> str:
    L = [f"# {title}", "",
         f"{d['subsets']} coverage subsets of 8 pairs from a pool of {d['n_pairs']} real shadow "
         "pairs per arm (bench/real_shadow_halves.py; plan: real_shadows_halves_plan.md). Nominal "
         "0.95, target 0.93-0.97; pooled over the class's reads and the three comparisons.", "",
         "| class | rule | coverage [95 % range] (lowest-highest key) | width / calibrated | floor binds "
         "(records) | where it binds / not | T_s x 1.5: coverage (lowest key) | empirical samples' part |",
         "|---|---|---|---|---|---|---|---|"]
    for cls, t in tab.items():
        for rule, c in t["rules"].items():
            tag = " (today)" if rule == t["today"] else ""
            L.append(f"| {cls}: {R.LABEL[cls]} | {name(rule)}{tag} | {c['coverage']:.3f} "
                     f"[{c['range'][0]:.3f}, {c['range'][1]:.3f}] ({c['min']:.3f}-{c['max']:.3f}) | "
                     f"{c['width_calibrated']:.2f} | {c['share']:.2f} ({c['n_bound']}) | "
                     f"{c['bound']:.3f} / {c['free']:.3f} | "
                     f"{c['ts15']['coverage']:.3f} ({c['ts15']['min']:.3f}) | {c['emp']['coverage']:.3f} |")
    L += ["", "Width / calibrated: mean half-width over 1.96 sqrt(T_p + T_s) (mean over keys). "
          "Floor binds: V_h < 0 (the variance is then V_j alone); the split is shown for every "
          "rule on the same records.", "",
          "95 % range: the pooled coverage over 500 resamplings of the subsets (Monte Carlo only). "
          "Undefined V_h (share of records): "
          + ", ".join(f"{cls} {t['rules']['H']['undefined']:.3f}" for cls, t in tab.items()) + ".", "",
          "**Q2** per class: mean V_h / B8 (B8: the blocks' mean covariance over shared "
          "reweightings, the 8-pair samples' part without the interaction); in brackets V_h / T_s, "
          "B8 / T_s, T_s / T_p: "
          + ", ".join(f"{cls} {t['q2']:.2f} ({t['q2_ts']:.2f}, {t['b8_ts']:.2f}, {t['ts_tp']:.2f})"
                      for cls, t in tab.items()) + ".", ""]
    return "\n".join(L + outcome_lines(chosen, confirm, name))


def diagnose(d: dict) -> dict:
    """{class: {ratio: value}} (reported, not in the plan's rules; written after pool A's
    selection): what each variance estimate holds against the truth's parts, as ratios of
    sums over the class's keys (robust where a key's part is near 0): V_j / T_p and V_p / T_p
    (the pairs' jackknife and bootstrap against a run's pairs' variance), V_s / T_p, B8 / T_p
    (the samples' part without the interaction), V_h / B8 and B8 / T_s; None where the store
    lacks the estimate (pool C has no V_p or V_s, pool B no V_h)."""
    out = {}
    for cls in R.CLASSES:
        keys = [f"{c}/{r}" for c in R.COMPARISONS for r in R.CLASSES[cls][0]
                if f"{c}/{r}" in d["blocks"]]
        sums: dict[str, float] = {}
        for k in keys:
            truth = R.truth_parts(d, k)
            parts = {"t_p": truth["t_p"], "t_s": truth["t_s"],
                     "b8": block_covariance(d["blocks"][k][:, 1:])}
            if d.get("cov") and k in d["cov"]:
                r = d["cov"][k]
                parts |= {"v_p": np.nanmean(r[:, 1]), "v_s": np.nanmean(r[:, 2]), "v_j": np.nanmean(r[:, 4])}
            if d.get("hcov") and k in d["hcov"]:
                parts |= {"v_h": np.nanmean(d["hcov"][k][:, 1]), "v_j": np.nanmean(d["hcov"][k][:, 2])}
            for name_, v in parts.items():
                sums[name_] = sums.get(name_, 0.0) + float(v)

        def ratio(a: str, b: str) -> float | None:
            return sums[a] / sums[b] if a in sums and b in sums and sums[b] else None
        out[cls] = {"vj_tp": ratio("v_j", "t_p"), "vp_tp": ratio("v_p", "t_p"),
                    "vs_tp": ratio("v_s", "t_p"), "b8_tp": ratio("b8", "t_p"),
                    "vh_b8": ratio("v_h", "b8"), "b8_ts": ratio("b8", "t_s")}
    return out


def per_read(d: dict) -> dict:
    """{(class, key): (V_j / T_p, V_p / T_p or None)} per read (exploratory, beside diagnose)."""
    out = {}
    for cls in R.CLASSES:
        for c in R.COMPARISONS:
            for r in R.CLASSES[cls][0]:
                k = f"{c}/{r}"
                t_p = R.truth_parts(d, k)["t_p"]
                vj = (np.nanmean(d["hcov"][k][:, 2]) if d.get("hcov") else np.nanmean(d["cov"][k][:, 4]))
                vp = np.nanmean(d["cov"][k][:, 1]) if d.get("cov") and k in d["cov"] else None
                out[cls, k] = (float(vj) / t_p, None if vp is None else float(vp) / t_p)
    return out


def diagnose_rows(pools: dict[str, dict]) -> list[str]:
    """Markdown rows of diagnose() per class, one column per ratio with the pools' values."""
    cols = (("vj_tp", "V_j / T_p"), ("vp_tp", "V_p / T_p"), ("vs_tp", "V_s / T_p"),
            ("b8_tp", "B8 / T_p"), ("vh_b8", "V_h / B8"), ("b8_ts", "B8 / T_s"))
    diag = {p: diagnose(d) for p, d in pools.items()}
    L = ["| class | " + " | ".join(f"{label} ({' / '.join(pools)})" for _, label in cols) + " |",
         "|---|" + "---|" * len(cols)]
    for cls in R.CLASSES:
        cells = [" / ".join("—" if diag[p][cls][c] is None else f"{diag[p][cls][c]:.2f}" for p in pools)
                 for c, _ in cols]
        L.append(f"| {cls}: {R.LABEL[cls]} | " + " | ".join(cells) + " |")
    return L


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("main", type=Path)
    ap.add_argument("halves", type=Path)
    ap.add_argument("--subsets", type=int, default=200)
    ap.add_argument("--select", action="store_true")
    ap.add_argument("--confirm", default="", help="class=rule,... (H, Ht, Hs)")
    ap.add_argument("--title", default="Real shadows: the halves' rules")
    ap.add_argument("--gate-q2", action="store_true", help="gate (v) applies (pools A and C)")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    d = load(a.main, a.halves, a.subsets)
    tab = table(d)
    chosen = {c: select(tab, c) for c in R.CLASSES} if a.select else None
    conf = confirmations(a.confirm, lambda c, r: passes(tab[c]["rules"][r], (0.93, 0.97),
                                                        tab[c]["q2"] if a.gate_q2 else None))
    write(markdown(tab, d, a.title, chosen, conf), a.out)


def confirmations(spec: str, check) -> dict | None:
    """{class: (rule, ok, why)} of a "class=rule,..." spec under check(class, rule)."""
    if not spec:
        return None
    pairs = [item.split("=") for item in spec.split(",")]
    return {c: (r, *check(c, r)) for c, r in pairs}


def write(text: str, out: Path | None) -> None:
    if out:
        out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
