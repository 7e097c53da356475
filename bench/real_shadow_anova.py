"""The analysis of bench/results/real_shadows_anova_plan.md (fixed before any of its figures):
memorization's samples' part without the interaction, B-hat (bnmem.attack.anova), on real
shadows; rules V_j + max(B-hat, 0) with 1.96 (AN), t(P - 1) (ANt) or Satterthwaite's t (ANs).

Two steps:

    # per pool: B-hat of every memorization read for the coverage subsets (needs the pool's logits)
    python bench/real_shadow_anova.py cells --pool-dir /work/realpool0 --seed 0 --subsets 200 \
        --out results/real_shadows_anova_seed0.jsonl
    # the plan's decision from the committed stores
    python bench/real_shadow_anova.py decide --out bench/results/real_shadows_anova.md

The truth (T_p, T_s) comes from each pool's main store, V_j and the subsets' pairs from its
halves store (pool F: its jackknife store, bench/real_shadow_coverage.py --jackknife); a
subset's point as computed here must equal the store's (a check of the linearized read's
inputs).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))
import bnmem  # noqa: E402,F401
import jsonl  # noqa: E402  (bench/jsonl.py)
import lscpu  # noqa: E402
import real_shadow_coverage as C  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_rules as R  # noqa: E402

from bnmem.attack import anova  # noqa: E402
from bnmem.attack.stage import comparison_pairs  # noqa: E402
from bnmem.core.kinds import KINDS  # noqa: E402

POOLS = (("A", 0, 200), ("C", 2, 200), ("B", 1, 100), ("D", 3, 200), ("E", 4, 200))
FRESH = ("F", 6, 200)
# pools whose V_j the studies read from a jackknife store (written for them), not the halves store
JACKKNIFE_STORES = ("F", "G", "H", "I", "J", "K", "L", "N")
K_END = len(C.BUDGETS) + 1
# read: (criterion | equal-budget index, figure, draw_compare's key)
READS = {"fz_flipped_matched": ("heldout", "fz_flipped", "fz_flipped"),
         "fz_flipped_overlap": ("heldout", "fz_flipped", "fz_flipped_overlap"),
         "fz_ood_matched": ("heldout", "fz_ood", "fz_ood"),
         "fz_flipped_fit": ("fit", "fz_flipped", "fz_flipped"),
         "fz_ood_fit": ("fit", "fz_ood", "fz_ood"),
         **{f"eq{k}_fz_{s}": (k, f"fz_{s}", None) for k in range(K_END) for s in ("flipped", "ood")}}
CLASSES = {"C": tuple(r for r in READS if not r.startswith("eq")),
           "F": tuple(f"eq{k}_fz_{s}" for k in range(K_END) for s in ("flipped", "ood"))}
LABEL = {"C": "memorization at matched utility or fit", "F": "memorization at equal budget"}
RULES = ("AN", "ANs", "ANt")  # the plan's tie order
REPORTED = ("JS",)  # jacksum with its samples' part exact: V_j + V_S
NAME = {"AN": "AN (V_j + max(B, 0), 1.96)", "ANs": "ANs (Satterthwaite t)", "ANt": "ANt (t on 7 df)",
        "JS": "jacksum (V_j + V_S, exact)"}
SELECT_BAND, BAND = (0.935, 0.965), (0.93, 0.97)
POOLED_FLOORS, FRESH_FLOORS = (0.93, 0.92), (0.91, 0.90)  # (key floor, at T_s x 1.5)
MIN_BOUND = 50
# a record: [point, B, V_S, I, then (b_k, n_k) per kind in KINDS order]
FIELDS = ("point", "b", "v_s", "interaction") + tuple(f"{x}_{k}" for k in KINDS for x in ("b", "n"))


# ---- step 1: B-hat per subset from the pool's logits ------------------------------------

def read_spec(read: str) -> tuple:
    """(criterion | equal-budget index, figure, draw_compare's key) of a read."""
    if read.startswith("eq"):
        k, fig = read[2:].split("_", 1)
        return int(k), fig, None
    return READS[read]


endpoint_cells = anova.endpoint_cells


def _cells(pairs: np.ndarray) -> dict:
    """{arm: [per endpoint {figure: (cells [P, N], mask [N])}]} of one subset."""
    kind = C._DATA["kind"]
    return {arm: [endpoint_cells(*(C._select(d, pairs)[x] for x in ("correct", "keep")), kind)
                  for d in C._DATA["arms"][arm]] for arm in C.ARMS}


def read_terms(cells: dict, a: str, b: str, read: str) -> tuple[float, list]:
    """(the read's point, its linearization's terms) for a - b (bnmem.attack.anova.read_terms)."""
    crit, fig, key = read_spec(read)
    if isinstance(crit, int):
        return anova.read_terms(cells[a], cells[b], fig, budget=crit)
    return anova.read_terms(cells[a], cells[b], fig, crit, key)


def subset_record(pairs: np.ndarray) -> dict:
    """{comparison/read: FIELDS} of one subset."""
    kind = C._DATA["kind"]
    cells, out = _cells(pairs), {"pairs": pairs.tolist()}
    for a, b in comparison_pairs(C.ARMS):
        for read in READS:
            point, terms = read_terms(cells, a, b, read)
            if not (np.isfinite(point) and all(np.isfinite(t[0]) for t in terms)):
                out[f"{a}_minus_{b}/{read}"] = [point] + [np.nan] * (len(FIELDS) - 1)
                continue
            r = anova.samples_part(anova.linear_cells(terms), kind)
            strata = [x for code in KINDS.values() for x in r["strata"].get(code, (np.nan, 0))]
            out[f"{a}_minus_{b}/{read}"] = [point, r["b"], r["v_s"], r["interaction"], *strata]
    return out


def cells_main(a: argparse.Namespace) -> None:
    write_units(a, subset_record)


def write_units(a: argparse.Namespace, record) -> None:
    """A pool's store of `record(pairs)` for its first `a.subsets` coverage subsets (header
    line: the pool's fingerprint) and its meta; needs the pool's logits (`a.pool_dir`)."""
    t0 = time.time()
    C._DATA.update(C.load(a.pool_dir))
    n_pairs = C._DATA["arms"]["none"][-1]["keep"].shape[0] // 2
    fp = C.fingerprint(a.pool_dir)
    with open(a.out, "w") as fh:
        fh.write(json.dumps({"pool": fp, "seed": a.seed, "n_pairs": n_pairs}) + "\n")
        for u in range(a.subsets):
            rec = record(C.subset_pairs(a.seed, u, n_pairs))
            fh.write(json.dumps({"unit": u, **rec}) + "\n")
    meta = {"pool": fp, "n_pairs": n_pairs, "seconds": round(time.time() - t0, 1),
            "cpu": lscpu.model_name(), "command": "python " + " ".join(sys.argv), "units": a.subsets}
    Path(a.out).with_suffix(".meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


# ---- step 2: coverage and the plan's decision ---------------------------------------------

def load_cells(path: Path) -> tuple[dict, dict]:
    head, *units = jsonl.lines(path)
    if head is None or None in units:
        raise SystemExit(f"{path}: a line is not JSON")
    keys = [k for k in units[0] if k not in ("unit", "pairs")]
    return head, {"pairs": [u["pairs"] for u in units],
                  **{k: np.array([u[k] for u in units], float) for k in keys}}


def load_pool(label: str, seed: int, subsets: int, jackknife: bool | None = None) -> dict:
    """One pool: the truth from its main store, V_j from its halves store (`jackknife`, by
    default for the pools in JACKKNIFE_STORES: its jackknife store) as "hcov" [point, V_h or
    nan, V_j], B-hat's records as "an"; checks that both stores hold the same subsets and
    points."""
    res = ROOT / "results"
    main = res / f"real_shadows_seed{seed}.jsonl"
    if (label in JACKKNIFE_STORES) if jackknife is None else jackknife:
        units = {i: v for (_, i), v in R.store_units(res / f"real_shadows_jackknife_seed{seed}.jsonl").items()}
        if sorted(units)[:subsets] != list(range(subsets)):
            raise SystemExit(f"pool {label}: the jackknife store lacks the first {subsets} subsets")
        keys = [k for k in units[0] if k != "pairs"]
        d = H._truth_only(main)
        d["hcov"] = {k: np.array([[units[i][k][0], np.nan, units[i][k][1]] for i in range(subsets)])
                     for k in keys}
        for k in keys:
            d["points"][k] = np.concatenate([d["points"][k], d["hcov"][k][:, 0]])
        d["subsets"], d["has_cov"] = subsets, False
        pairs = [units[i]["pairs"] for i in range(subsets)]
    else:
        d = H.load(main, res / f"real_shadows_halves_seed{seed}.jsonl", subsets)
        units = {i: v for (_, i), v in R.store_units(res / f"real_shadows_halves_seed{seed}.jsonl").items()}
        pairs = [units[i]["pairs"] for i in range(subsets)]
    head, an = load_cells(res / f"real_shadows_anova_seed{seed}.jsonl")
    fp = json.loads((res / f"real_shadows_seed{seed}.meta.json").read_text())["pool"]
    if head["pool"] != fp:
        raise SystemExit(f"pool {label}: B-hat's store was computed on pool {head['pool']}, "
                         f"the main store on {fp}")
    if an["pairs"][:subsets] != pairs:
        raise SystemExit(f"pool {label}: B-hat's subsets are not the store's")
    d["an"] = {k: v[:subsets] for k, v in an.items() if k != "pairs"}
    for k, v in d["an"].items():
        ref = d["hcov"][k][:, 0]
        if not np.allclose(v[:, 0], ref, rtol=0, atol=1e-12, equal_nan=True):
            raise SystemExit(f"pool {label}: {k}: the linearized read's point differs from the store's "
                             f"(max {np.nanmax(np.abs(v[:, 0] - ref)):.2e})")
    d["label"] = label
    return d


def variance(d: dict, key: str, rule: str) -> np.ndarray:
    a, v_j = d["an"][key], d["hcov"][key][:, 2]
    return v_j + (a[:, 2] if rule == "JS" else np.maximum(a[:, 1], 0.0))


def half_width(d: dict, key: str, rule: str) -> np.ndarray:
    v = variance(d, key, rule)
    if rule in ("AN", "JS"):
        q = H.Z
    elif rule == "ANt":
        q = stats.t.ppf(0.975, R.PAIRS - 1)
    else:
        a, v_j = d["an"][key], d["hcov"][key][:, 2]
        df = np.array([anova.satterthwaite_df(
            vi, vj, {c: (row[4 + 2 * j], int(row[5 + 2 * j])) for j, c in enumerate(KINDS.values())},
            R.PAIRS) if np.isfinite(vi) else np.nan for vi, vj, row in zip(v, v_j, a)])
        q = stats.t.ppf(0.975, df)  # elementwise, one call (nan where undefined)
    return q * np.sqrt(v)


def records(d: dict, key: str, rule: str, ts_scale: float = 1.0) -> tuple:
    """(P(covered) per subset, nan where undefined; whether B's floor binds; width over the
    calibrated)."""
    comp = R.truth_parts(d, key)
    h = half_width(d, key, rule)
    p, _, _, ok = H.covered_runs(d, d["hcov"][key][:, 0], h, comp, ts_scale)
    full = np.full(ok.size, np.nan)
    full[ok] = p
    return full, d["an"][key][:, 1] < 0, h / (H.Z * np.sqrt(comp["t_p"] + comp["t_s"])), comp


def keys_of(d: dict, cls: str) -> list[str]:
    return [f"{c}/{r}" for c in R.COMPARISONS for r in CLASSES[cls]]


def cell(pools: list[dict], cls: str, rule: str, ts_scale: float = 1.0) -> dict:
    """A class over pools weighted equally per key: coverage, min / max key, width over the
    calibrated, per-pool class coverage, and coverage where B's floor binds / is free
    (records weighted by 1 / their pool's subsets)."""
    keys = keys_of(pools[0], cls)
    recs = [[records(d, k, rule, ts_scale) for d in pools] for k in keys]
    per_key = {k: float(np.mean([np.nanmean(f) for f, _, _, _ in r])) for k, r in zip(keys, recs)}
    per_pool = {d["label"]: float(np.mean([np.nanmean(r[i][0]) for r in recs])) for i, d in enumerate(pools)}

    bound, n_bound = H.split_coverage((f, b) for r in recs for f, b, _, _ in r)
    free, n_free = H.split_coverage((f, ~b) for r in recs for f, b, _, _ in r)
    return {"coverage": float(np.mean(list(per_key.values()))), "min": min(per_key.values()),
            "max": max(per_key.values()), "per_key": per_key, "per_pool": per_pool,
            "width_calibrated": float(np.mean([np.mean([np.nanmean(w) for _, _, w, _ in r]) for r in recs])),
            "bound": bound, "n_bound": n_bound, "free": free, "n_free": n_free,
            "share_bound": n_bound / max(n_bound + n_free, 1)}


def gates(c: dict, c15: dict, band: tuple, floors: tuple, per_pool: bool) -> tuple[bool, str]:
    """The plan's gates 1-4 (selection: band SELECT_BAND, pooled floors, per-pool band;
    confirmation: BAND, the fresh pool's floors, no per-pool gate): (ok, why not)."""
    why = band_gates(c, c15, band, floors, per_pool)
    if c["n_bound"] >= MIN_BOUND and not BAND[0] <= c["bound"] <= BAND[1]:
        why.append(f"where the floor binds {c['bound']:.3f}")
    if not BAND[0] <= c["free"] <= BAND[1]:
        why.append(f"where the floor is free {c['free']:.3f}")
    return not why, "; ".join(why)


def band_gates(c: dict, c15: dict, band: tuple, floors: tuple, per_pool: bool) -> list[str]:
    """Gates 1-3 of a class's cell (its coverage in `band`, every key above floors[0] and
    with T_s x 1.5 above floors[1], every pool's in BAND if `per_pool`): why it fails."""
    why = []
    if not band[0] <= c["coverage"] <= band[1]:
        why.append(f"class {c['coverage']:.3f}")
    if c["min"] < floors[0]:
        why.append(f"lowest key {c['min']:.3f}")
    if c15["min"] < floors[1]:
        why.append(f"lowest key at T_s x 1.5 {c15['min']:.3f}")
    if per_pool:
        out = {p: v for p, v in c["per_pool"].items() if not BAND[0] <= v <= BAND[1]}
        if out:
            why.append("pools " + ", ".join(f"{p} {v:.3f}" for p, v in out.items()))
    return why


def table(pools: list[dict], fresh: dict | None) -> dict:
    out = {}
    for cls in CLASSES:
        sel = {r: cell(pools, cls, r) for r in RULES + REPORTED}
        sel15 = {r: cell(pools, cls, r, 1.5) for r in RULES + REPORTED}
        res = {r: gates(sel[r], sel15[r], SELECT_BAND, POOLED_FLOORS, True) for r in RULES}
        ok = [r for r in RULES if res[r][0]]
        chosen = min(ok, key=lambda r: (sel[r]["width_calibrated"], RULES.index(r))) if ok else None
        t = {"select": sel, "select15": sel15, "why": res, "chosen": chosen}
        if fresh is not None:
            fr = {r: cell([fresh], cls, r) for r in RULES + REPORTED}
            fr15 = {r: cell([fresh], cls, r, 1.5) for r in RULES + REPORTED}
            t.update(fresh=fr, fresh15=fr15,
                     confirm=gates(fr[chosen], fr15[chosen], BAND, FRESH_FLOORS, False) if chosen else None)
        out[cls] = t
    return out


def _row(name: str, c: dict, c15: dict) -> str:
    return (f"| {name} | {c['coverage']:.3f} ({c['min']:.3f}-{c['max']:.3f}) | {c['width_calibrated']:.2f} "
            f"| {c['share_bound']:.2f} ({c['n_bound']}) | {c['bound']:.3f} / {c['free']:.3f} "
            f"| {c15['coverage']:.3f} ({c15['min']:.3f}) |")


def markdown(tab: dict, pools: list[dict], fresh: dict | None) -> str:
    head = ("| rule | coverage (lowest-highest key) | width / calibrated | floor binds (records) "
            "| where it binds / free | T_s x 1.5: coverage (lowest key) |")
    L = ["# Real shadows: memorization's samples' part without the interaction (B-hat)", "",
         "Plan: [real_shadows_anova_plan.md](real_shadows_anova_plan.md) (written before any of "
         "these figures). `python bench/real_shadow_anova.py decide --out "
         "bench/results/real_shadows_anova.md`. Rules: V = V_j + max(B, 0) with 1.96 (AN), "
         "Satterthwaite's t (ANs), t(7) (ANt); JS is today's jacksum with its samples' part "
         "computed exactly (V_j + V_S), reported. Coverage of a fresh run: the subset's "
         "interval against its pairs' deviation plus N(0, T_s).", ""]
    for cls, t in tab.items():
        L += [f"## Class {cls}: {LABEL[cls]}", "", "Selection: pools "
              + ", ".join(d["label"] for d in pools) + ", weighted equally per key.", "", head,
              "|---|---|---|---|---|---|"]
        L += [_row(NAME[r], t["select"][r], t["select15"][r]) for r in RULES + REPORTED]
        L += ["", "Per pool (class coverage): "
              + "; ".join(f"{NAME[r].split(' ')[0]} " + ", ".join(f"{p} {v:.3f}" for p, v in t["select"][r]["per_pool"].items())
                          for r in RULES + REPORTED), ""]
        for r in RULES:
            ok, why = t["why"][r]
            L.append(f"- {NAME[r]}: " + ("qualifies" if ok else f"fails: {why}"))
        L += ["", f"**Selected: {NAME[t['chosen']] if t['chosen'] else 'none (jacksum stays)'}**", ""]
        L += ["Per key over the pools (" + ", ".join(RULES + REPORTED) + "): "
              + "; ".join(f"`{k}` " + " / ".join(f"{t['select'][r]['per_key'][k]:.3f}" for r in RULES + REPORTED)
                          for k in t["select"]["AN"]["per_key"]), ""]
        if fresh is not None:
            L += [f"Pool {fresh['label']} alone (fresh"
                  + ("; the selected rule's confirmation" if t["chosen"] else
                     "; nothing was selected, so the plan confirms nothing: reported, deciding nothing")
                  + "):", "", head, "|---|---|---|---|---|---|"]
            L += [_row(NAME[r], t["fresh"][r], t["fresh15"][r]) for r in RULES + REPORTED]
            if t["chosen"]:
                ok, why = t["confirm"]
                L += ["", f"**Confirmation of {NAME[t['chosen']]} on pool {fresh['label']}: "
                      + ("passes" if ok else f"fails ({why})") + "**"]
            L += [""]
    L += ["## Components (means over subsets; ratios to T_p)", "",
          "| pool | class | V_j / T_p | V_S / T_p | I / T_p | B / T_p | T_s / T_p | B < 0 |", "|---|---|---|---|---|---|---|---|"]
    for d in pools + ([fresh] if fresh else []):
        for cls in CLASSES:
            rs = []
            for k in keys_of(d, cls):
                tp = R.truth_parts(d, k)
                a = d["an"][k]
                rs.append([np.nanmean(d["hcov"][k][:, 2]) / tp["t_p"], np.nanmean(a[:, 2]) / tp["t_p"],
                           np.nanmean(a[:, 3]) / tp["t_p"], np.nanmean(a[:, 1]) / tp["t_p"],
                           tp["t_s"] / tp["t_p"], np.nanmean(a[:, 1] < 0)])
            m = np.nanmean(np.array(rs), axis=0)
            L.append(f"| {d['label']} | {cls} | " + " | ".join(f"{x:.2f}" for x in m) + " |")
    return "\n".join(L) + "\n"


DIAGNOSED = ("batchnorm_reg_minus_batchnorm/fz_flipped_matched", "batchnorm_reg_minus_batchnorm/fz_flipped_fit",
             "batchnorm_minus_none/fz_flipped_matched")


def diagnosis(pools: list[dict]) -> list[str]:
    """Exploratory, after the outcome: the shape of the points of the keys every rule fails
    (skew, excess kurtosis of the 8-pair points over the pool's point subsets), the pairs'
    jackknife over T_p (mean and median over the coverage subsets) and today's rule's
    coverage, per pool; BN - none as a key that behaves."""
    L = ["## Exploratory, after the outcome: the keys every rule misses", "",
         "Per pool: skew / excess kurtosis of the 8-pair points (point subsets), V_j / T_p (mean, "
         "median over the coverage subsets), jacksum's coverage (V_j + V_S).", "",
         "| key | " + " | ".join(d["label"] for d in pools) + " |", "|---|" + "---|" * len(pools)]
    for key in DIAGNOSED:
        cells = []
        for d in pools:
            tp = R.truth_parts(d, key)
            pts = d["points"][key]
            z = (pts[np.isfinite(pts)] - tp["mu"]) / np.sqrt(tp["t_p"])
            vj = d["hcov"][key][:, 2] / tp["t_p"]
            cells.append(f"{stats.skew(z):+.1f} / {stats.kurtosis(z):+.1f}; {np.nanmean(vj):.2f}, "
                         f"{np.nanmedian(vj):.2f}; {np.nanmean(records(d, key, 'JS')[0]):.3f}")
        L.append(f"| `{key}` | " + " | ".join(cells) + " |")
    return L + [""]


SOURCE_KEY = "batchnorm_reg_minus_batchnorm/fz_flipped_matched"


def _source(cells: dict, a: str, b: str, drop: int | None = None) -> float:
    """b's Pareto source (endpoint i, or i + 0.5 between i and i + 1) of the FZ flipped read
    at matched held-out accuracy, from the cells (pair `drop` left out)."""
    ends = {arm: [{f: anova.cell_mean((c if drop is None else np.delete(c, drop, axis=0), m))
                   for f, (c, m) in e.items()} for e in cells[arm]] for arm in (a, b)}
    from bnmem.attack.frontier import draw_compare
    return draw_compare(ends[a], ends[b], "heldout", ("fz_flipped",))["fz_flipped_source"][1]


def sources(label: str, seed: int, subsets: int, pool_dir: Path) -> list[str]:
    """Exploratory, after the outcome (a hostile review's analysis, rerun here): for
    SOURCE_KEY, BN's Pareto source in every coverage subset and whether any delete-one row
    changes it; jacksum's coverage by source and by whether the run's own jackknife sees a
    jump. Needs the pool's logits."""
    d = load_pool(label, seed, subsets)
    C._DATA.update(C.load(pool_dir))
    n_pairs = C._DATA["arms"]["none"][-1]["keep"].shape[0] // 2
    cov, _, _, comp = records(d, SOURCE_KEY, "JS")
    src, flip = [], []
    for u in range(subsets):
        cells = _cells(C.subset_pairs(seed, u, n_pairs))
        s0 = _source(cells, "batchnorm_reg", "batchnorm")
        src.append(s0)
        flip.append(any(_source(cells, "batchnorm_reg", "batchnorm", p) != s0 for p in range(R.PAIRS)))
    src, flip = np.array(src), np.array(flip)
    vj = d["hcov"][SOURCE_KEY][:, 2] / comp["t_p"]
    miss = cov < 0.5
    by = "; ".join(f"{s:g}: {int((src == s).sum())} runs, covers {np.nanmean(cov[src == s]):.3f}, "
                   f"median V_j / T_p {np.nanmedian(vj[src == s]):.2f}" for s in np.unique(src))
    return [f"| {label} | {np.nanmean(cov):.3f} | {flip.mean():.2f} | "
            f"{np.nanmean(cov[flip]) if flip.any() else np.nan:.3f} / {np.nanmean(cov[~flip]):.3f} | "
            f"{int(miss.sum())}, {flip[miss].mean() if miss.any() else np.nan:.2f}, "
            f"{np.nanmedian(vj[miss]) if miss.any() else np.nan:.2f} | {by} |"]


def sources_main(a: argparse.Namespace) -> None:
    L = ["# Exploratory, after the outcome: where BN's Pareto source sits, for reg − BN on flipped "
         "samples at matched held-out accuracy", "",
         "A hostile review's analysis of [real_shadows_anova.md](real_shadows_anova.md)'s one "
         "under-covered key, rerun: `python bench/real_shadow_anova.py sources --out "
         "bench/results/real_shadows_anova_sources.md` (needs every pool's logits). Per coverage "
         "subset: BN's least-memorization endpoint at the common point (0-based, budget order; "
         "i + 0.5: between i and i + 1) and whether any of the run's delete-one rows takes it "
         "elsewhere (its own jackknife sees the jump); jacksum's coverage (V_j + V_S).", "",
         "| pool | jacksum covers | runs whose jackknife sees a jump | covers there / elsewhere "
         "| misses (< 0.5): count, share seeing a jump, median V_j / T_p | by BN's source |",
         "|---|---|---|---|---|---|"]
    for lb, seed, n in POOLS + (FRESH,):
        L += sources(lb, seed, n, Path(f"/work/realpool{seed}"))
    text = "\n".join(L) + "\n"
    if a.out:
        Path(a.out).write_text(text)
    print(text)


def decide_main(a: argparse.Namespace) -> None:
    pools = [load_pool(lb, s, n) for lb, s, n in POOLS]
    fresh = None if a.no_fresh else load_pool(*FRESH)
    tab = table(pools, fresh)
    text = markdown(tab, pools, fresh) + "\n" + "\n".join(diagnosis(pools + ([fresh] if fresh else [])))
    if a.out:
        Path(a.out).write_text(text)
    print(text)


def cells_parser(sub, help: str) -> None:
    """The `cells` subcommand's arguments (write_units')."""
    c = sub.add_parser("cells", help=help)
    c.add_argument("--pool-dir", type=Path, required=True)
    c.add_argument("--seed", type=int, required=True)
    c.add_argument("--subsets", type=int, default=200)
    c.add_argument("--out", type=Path, required=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    cells_parser(sub, "B-hat's records of one pool (needs its logits)")
    d = sub.add_parser("decide")
    d.add_argument("--out", type=Path)
    d.add_argument("--no-fresh", action="store_true", help="selection only (pool F not yet stored)")
    s = sub.add_parser("sources")
    s.add_argument("--out", type=Path)
    a = ap.parse_args()
    {"cells": cells_main, "decide": decide_main, "sources": sources_main}[a.cmd](a)


if __name__ == "__main__":
    main()
