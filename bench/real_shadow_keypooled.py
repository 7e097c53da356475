"""The analysis of bench/results/real_shadows_keypooled_plan.md (written before any pool-E
figure, amended at 05:20 after a hostile review, before any was read): D4 (V_4 + max(V_h, 0)
with 1.96) for classes A and B (all samples' AUC at the common point / over the overlap), and
class E's D4 (in use), judged by three gates: every confirmation gate on the fresh pool E
(data seed 4) alone with key floors recalibrated to one pool's noise, each pool's class
coverage, and the five pools per key weighted equally.

    python bench/real_shadow_keypooled.py --out bench/results/real_shadows_keypooled.md
    python bench/real_shadow_keypooled.py --earlier-only     # pools A-D alone (selection data)
    python bench/real_shadow_keypooled.py --chances          # the first version's binomial figures (retracted)

Every pool is scored against its own truth (bench/real_shadow_deleted.py, V_4 in split-mean
form). The gates' operating characteristics are measured on pools A-D (`operating`): D4's
half-widths rescaled per key to cover 0.95, the subsets resampled.
"""
from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_shadow_deleted as D  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_pooled as P  # noqa: E402
import real_shadow_rules as R  # noqa: E402

POOLS = (("A", 0, 200), ("C", 2, 200), ("B", 1, 100), ("D", 3, 200), ("E", 4, 200))
FRESH = "E"
CANDIDATES = ("A", "B")  # classes whose D4 the plan decides
IN_USE = "E"  # class whose D4 is in use: re-tested on the fresh pool alone
BAND = D.BANDS["confirm"]  # (0.93, 0.97)
FLOOR = 0.92  # the earlier plans' key floors, (ii) and (iv), per pool
FRESH_FLOORS = (0.91, 0.90)  # amendment: (ii) and (iv) on the fresh pool alone
POOLED_FLOORS = (0.93, 0.92)  # amendment: (ii) and (iv) per key over the five pools
KEYS_PER_CLASS = 6  # 2 criteria x 3 comparisons


def key_pass(n: int, p: float, floor: float = FLOOR) -> float:
    """P(a key's coverage over n subsets >= floor) when each subset covers with probability p
    (binomial), the exact sum."""
    k0 = math.ceil(floor * n - 1e-9)
    return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(k0, n + 1))


def chances(p: float = 0.95, p15: float = 0.94, keys: int = KEYS_PER_CLASS) -> dict:
    """The first version's figures (retracted by the amendment: a subset's score is a
    probability, gates (ii) and (iv) are nearly one gate, keys correlate; `operating`
    measures them instead): the chance that a rule whose every key covers p (p15 with T_s x
    1.5), keys independent, passes the key floors (ii) and (iv) on one pool of 200 / 100
    subsets, on pools A, C, B, D (200, 200, 100, 200) each, on those and E, and per key over
    the five pools' 900 subsets; and the chance that one key truly at 0.91 / 0.90 passes the
    pooled floor, or one pool's of 200."""
    pool = {n: (key_pass(n, p) * key_pass(n, p15)) ** keys for n in (200, 100)}
    sizes = [n for _, _, n in POOLS]
    total = sum(sizes)
    return {"pool_200": pool[200], "pool_100": pool[100],
            "four_pools": float(np.prod([pool[n] for n in sizes[:4]])),
            "five_pools": float(np.prod([pool[n] for n in sizes])),
            "pooled": (key_pass(total, p) * key_pass(total, p15)) ** keys,
            "short_091_pooled": key_pass(total, 0.91), "short_090_pooled": key_pass(total, 0.90),
            "short_091_one_pool": key_pass(200, 0.91), "subsets_pooled": total}


def gates(c: dict, band: tuple[float, float] = BAND, floors: tuple[float, float] = (FLOOR, FLOOR),
          split_upper: bool = True) -> tuple[bool, str]:
    """The confirmation gates (real_shadow_deleted.passes: (i)-(iv), (v'), (vi)) with the key
    floors of (ii) and (iv) set (split_upper: real_shadow_halves.passes'): (ok, why not)."""
    return D.passes(c, band, floors, split_upper)


def _records(d: dict, cls: str, key: str, rule: str, ts_scale: float = 1.0,
             empirical: bool = False, to_b8: bool = False):
    """One pool's records of one key: (P(covered) per subset, nan where undefined; whether
    V_h's floor binds; the width over the calibrated)."""
    c = H.components(d, key)
    scale = max(c["b8"], 0.0) / c["v_h"] if to_b8 and c["v_h"] > 0 else 1.0
    p, _, h, ok = D.per_subset(d, key, rule, cls, c, ts_scale, empirical, scale)
    full = np.full(ok.size, np.nan)
    full[ok] = p
    binds = d["hcov"][key][:, 1] < 0
    return full, binds, h / (H.Z * np.sqrt(c["t_p"] + c["t_s"]))


def equal_cell(pools: list[dict], cls: str, rule: str = "D4", ts_scale: float = 1.0,
               empirical: bool = False, to_b8: bool = False, boot: int = 500) -> dict:
    """A class's cell over several pools **weighted equally** (the amendment): per key, the
    mean of each pool's coverage; where V_h's floor binds / is free, each record weighted by
    1 / (its pool's subsets); the 95 % range resamples subsets within each pool (fixed
    seed). The fields of real_shadow_halves.pooled, plus the per-key coverages."""
    keys = H.class_keys(pools[0], cls)
    if any(H.class_keys(d, cls) != keys for d in pools[1:]):
        raise SystemExit(f"class {cls}: the pools hold different keys")
    recs = [[_records(d, cls, k, rule, ts_scale, empirical, to_b8) for d in pools] for k in keys]
    per_key = [float(np.mean([np.nanmean(f) for f, _, _ in r])) for r in recs]
    cal = [float(np.mean([np.mean(w) for _, _, w in r])) for r in recs]

    bound, n_bound = H.split_coverage((f, b) for r in recs for f, b, _ in r)
    free, n_free = H.split_coverage((f, ~b) for r in recs for f, b, _ in r)
    rng = np.random.default_rng(0)
    idx = [[rng.integers(0, d["dcov"][keys[0]].shape[0], d["dcov"][keys[0]].shape[0])
            for d in pools] for _ in range(boot)]
    # every resample at once: per pool its [boot, subsets] indices, per key and pool the
    # resampled means [boot]; then the mean over pools and over keys, as one at a time
    idx = [np.array([ix[j] for ix in idx]) for j in range(len(pools))]
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample with an all-nan key
        bs = np.mean([np.mean([np.nanmean(f[i], axis=1) for (f, _, _), i in zip(r, idx)], axis=0)
                      for r in recs], axis=0)
    return {"coverage": float(np.mean(per_key)), "min": min(per_key), "max": max(per_key),
            "width_calibrated": float(np.mean(cal)), "share": n_bound / max(n_bound + n_free, 1),
            "n_bound": n_bound, "bound": float(bound), "free": float(free),
            "range": [float(np.nanpercentile(bs, 2.5)), float(np.nanpercentile(bs, 97.5))],
            "keys": keys, "per_key": per_key}


def pooled_cell(pools: list[dict], cls: str, rule: str = "D4") -> dict:
    """Gate 3's cell: equal_cell with its sensitivity reads (T_s x 1.5, the empirical
    samples' part, V_h at B8)."""
    c = equal_cell(pools, cls, rule)
    c["ts15"] = equal_cell(pools, cls, rule, 1.5)
    c["emp"] = equal_cell(pools, cls, rule, empirical=True)
    c["b8"] = equal_cell(pools, cls, rule, to_b8=True)
    c["per_key_ts15"] = c["ts15"]["per_key"]
    return c


def in_band(x: float) -> bool:
    return BAND[0] <= x <= BAND[1]


def decide(per_pool: dict[str, dict], pooled: dict[str, dict]) -> dict:
    """The amended rule. per_pool: {pool: D.table}; pooled: {class: pooled_cell over the five
    pools}. Per class (A, B and E alike): gate 1 (the fresh pool alone: every confirmation
    gate, key floors FRESH_FLOORS), gate 2 (every pool's class coverage in BAND), gate 3
    (the pooled cell, key floors POOLED_FLOORS); A and B adopt D4 if all pass, E keeps it if
    all pass and reverts to jacksum if not."""
    out = {}
    for cls in (*CANDIDATES, IN_USE):
        ok1, why1 = gates(per_pool[FRESH][cls]["rules"]["D4"], BAND, FRESH_FLOORS)
        g2 = {p: t[cls]["rules"]["D4"]["coverage"] for p, t in per_pool.items()}
        ok3, why3 = gates(pooled[cls], BAND, POOLED_FLOORS)
        fails = ([f"gate 1 (pool {FRESH}): {why1}"] if not ok1 else []) + [
            f"gate 2: pool {p} {x:.3f}" for p, x in g2.items() if not in_band(x)] + (
            [f"gate 3: {why3}"] if not ok3 else [])
        if cls == IN_USE:
            action = ("D4 (in use) stays: it passes every gate" if not fails
                      else "D4 reverts to jacksum (" + "; ".join(fails) + ")")
        else:
            action = ("adopt D4" if not fails
                      else "today's rule stays (" + "; ".join(fails) + ")")
        out[cls] = {"gate1": (ok1, why1), "gate2": g2, "gate3": (ok3, why3), "adopt": not fails,
                    "action": action}
    return out


# ---- the amendment's operating characteristics (pools A-D, selection data) --------------

def calibrated(d: dict, cls: str, target: float = 0.95, rule: str = "D4") -> dict:
    """Per key of one pool: D4's half-widths rescaled by one factor so that the key covers
    `target` (bisection), and the per-subset P(covered) of that calibrated rule at T_s and
    at T_s x 1.5: {"cov": [keys, subsets], "cov15": [keys, subsets]} (nan where undefined).
    A rule as noisy as D4 whose every key is calibrated: what the gates should pass."""
    covs, covs15 = [], []
    for k in H.class_keys(d, cls):
        comp = H.components(d, k)
        pts, h = d["dcov"][k][:, 0], D.half_width(d, k, rule, cls)

        def run(s, ts=1.0):
            p, _, _, ok = H.covered_runs(d, pts, h * s, comp, ts)
            full = np.full(ok.size, np.nan)
            full[ok] = p
            return full

        lo, hi = 0.1, 10.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if np.nanmean(run(mid)) < target else (lo, mid)
        covs.append(run(hi))
        covs15.append(run(hi, 1.5))
    return {"cov": np.array(covs), "cov15": np.array(covs15)}


def floors_pass(cal: dict, floors: tuple[float, float], boot: int = 2000, seed: int = 7) -> float:
    """The chance one pool of a calibrated rule (`calibrated`) passes the key floors (ii) and
    (iv): its subsets resampled with replacement (the same subsets for every key)."""
    rng = np.random.default_rng(seed)
    n = cal["cov"].shape[1]
    hits = 0
    with np.errstate(invalid="ignore"):
        for _ in range(boot):
            i = rng.integers(0, n, n)
            hits += (np.nanmin(np.nanmean(cal["cov"][:, i], 1)) >= floors[0]
                     and np.nanmin(np.nanmean(cal["cov15"][:, i], 1)) >= floors[1])
    return hits / boot


def operating(pools: dict[str, dict]) -> dict:
    """The amendment's figures on pools A-D (each a stand-in for one pool): per class and
    pool, the chance a calibrated rule (every key 0.95) passes the earlier per-pool key
    floors (0.92, 0.92) and the fresh pool's (FRESH_FLOORS), and the chance the same rule
    with its weakest key (D4's lowest on that pool) at 0.91 passes the fresh pool's."""
    out = {}
    for cls in (*CANDIDATES, IN_USE):
        row = {}
        for name, d in pools.items():
            cal, cal91 = calibrated(d, cls), calibrated(d, cls, 0.91)
            low = int(np.argmin([np.nanmean(_records(d, cls, k, "D4")[0])
                                 for k in H.class_keys(d, cls)]))
            short = {f: cal[f].copy() for f in cal}
            for f in short:
                short[f][low] = cal91[f][low]
            row[name] = {"earlier": floors_pass(cal, (FLOOR, FLOOR)),
                         "fresh": floors_pass(cal, FRESH_FLOORS),
                         "short_fresh": floors_pass(short, FRESH_FLOORS)}
        out[cls] = row
    return out


def _row(label: str, c: dict) -> str:
    return (f"| {label} | {c['coverage']:.3f} [{c['range'][0]:.3f}, {c['range'][1]:.3f}] "
            f"({c['min']:.3f}-{c['max']:.3f}) | {c['width_calibrated']:.2f} | "
            f"{c['share']:.2f} ({c['n_bound']}) | {c['bound']:.3f} / {c['free']:.3f} | "
            f"{c['ts15']['coverage']:.3f} ({c['ts15']['min']:.3f}) | {c['emp']['coverage']:.3f} | "
            f"{c['b8']['coverage']:.3f} |")


HEAD = ["| cell | coverage [95 % range] (lowest-highest key) | width / calibrated | "
        "floor binds (records) | where it binds / not | T_s x 1.5: coverage (lowest key) | "
        "empirical samples' part | V_h at B8 |", "|---|---|---|---|---|---|---|---|"]


def markdown(oc: dict, sub: dict, per_pool: dict, pooled: dict, earlier: dict, dec: dict,
             fresh: dict) -> str:
    names = list(per_pool)
    L = ["# Real shadows: D4 for the matched AUC classes, key floors judged over five pools "
         "(pool E fresh)", "",
         "Plan: [real_shadows_keypooled_plan.md](real_shadows_keypooled_plan.md) (written before "
         "any pool-E figure; amended after a hostile review, before any was read). "
         "`python bench/real_shadow_keypooled.py --out bench/results/real_shadows_keypooled.md`. "
         "V_4 in split-mean form; nominal 0.95, band [0.93, 0.97]; key floors: "
         f"{FRESH_FLOORS[0]} / {FRESH_FLOORS[1]} (at T_s / T_s x 1.5) on pool {FRESH} alone, "
         f"{POOLED_FLOORS[0]} / {POOLED_FLOORS[1]} per key over the five pools (equal weights).",
         "", "## The gates' operating characteristics (pools A-D as stand-ins; the amendment)", "",
         "D4's half-widths rescaled per key so that every key covers 0.95 (a rule as noisy as "
         "D4, calibrated), the pool's subsets resampled 2 000 times: the chance one pool passes "
         "the earlier key floors (0.92 / 0.92), the fresh pool's "
         f"({FRESH_FLOORS[0]} / {FRESH_FLOORS[1]}), and the fresh pool's with the class's "
         "weakest key at 0.91.", "",
         "| class | " + " | ".join(f"pool {p}" for p in oc[CANDIDATES[0]]) + " | all four (product) |",
         "|---|" + "---|" * (len(oc[CANDIDATES[0]]) + 1)]
    for cls, row in oc.items():
        L.append(f"| {cls}: earlier floors / fresh floors / one key at 0.91 | " + " | ".join(
            f"{x['earlier']:.2f} / {x['fresh']:.2f} / {x['short_fresh']:.2f}" for x in row.values())
            + f" | {np.prod([x['earlier'] for x in row.values()]):.2f} / "
            f"{np.prod([x['fresh'] for x in row.values()]):.2f} / — |")
    L += ["", "Gate (iii) on pool B, where it failed before (D4; subsets resampled 2 000 times): "
          + "; ".join(f"{cls} where the floor {w} {x['point']:.3f} (SD {x['sd']:.4f}, outside "
                      f"[0.93, 0.97] in {x['outside']:.0%} of resamplings)"
                      for (cls, w), x in sub.items()) + ".", "",
          "## D4 per pool (class coverage; gate 2)", "",
          "| class | " + " | ".join(f"pool {p}" for p in names) + " |",
          "|---|" + "---|" * len(names)]
    for cls in (*CANDIDATES, IN_USE):
        L.append(f"| {cls}: {R.LABEL[cls]} | " + " | ".join(
            f"{per_pool[p][cls]['rules']['D4']['coverage']:.3f}" for p in names) + " |")
    L += ["", "## Gate 3: the five pools per key, weighted equally (D4)", "", *HEAD]
    L += [_row(f"{cls}: {R.LABEL[cls]}", pooled[cls]) for cls in (*CANDIDATES, IN_USE)]
    L += ["", "Per key over the five pools (coverage / with T_s x 1.5):", ""]
    for cls in (*CANDIDATES, IN_USE):
        c = pooled[cls]
        L.append(f"- {cls}: " + "; ".join(f"`{k}` {a:.3f} / {b:.3f}" for k, a, b in
                                          zip(c["keys"], c["per_key"], c["per_key_ts15"])))
    L += ["", "Reported, deciding nothing: pools A-D alone, the same cell (selection data).", "",
          *HEAD]
    L += [_row(f"{cls}: {R.LABEL[cls]}", earlier[cls]) for cls in (*CANDIDATES, IN_USE)]
    L += ["", f"## Pool {FRESH} alone (every candidate; gate 1 reads D4)", "",
          "| class | rule | coverage [95 % range] (lowest-highest key) | width / calibrated | "
          "floor binds (records) | where it binds / not | T_s x 1.5: coverage (lowest key) | "
          "empirical samples' part | V_h at B8 |", "|---|---|---|---|---|---|---|---|---|"]
    t = per_pool[FRESH]
    L += [_row(f"{cls}: {R.LABEL[cls]} | {r}", c) for cls in t for r, c in t[cls]["rules"].items()]
    L += ["", f"**V_d / T_p** on pool {FRESH} (ratios of sums over the keys; d = 2 / 3 / 4, and "
          "V_j): " + "; ".join(f"{cls} " + " / ".join(f"{t[cls]['vd_tp'][x]:.2f}"
                                                      for x in (*D.DS, "j")) for cls in t) + ".",
          "", f"True-width oracle on pool {FRESH} (coverage of 1.96 sqrt(T_p + T_s) / (V_4 + "
          "max(V_h, 0)) over (T_p + T_s)): " + "; ".join(
              f"{cls} {o['coverage']:.3f} / {o['d4_over_truth']:.2f}"
              for cls, o in ((c, D.oracle(fresh, c)) for c in t)) + ".", "",
          "## Outcome (the amended plan's rules)", ""]
    for cls in (*CANDIDATES, IN_USE):
        x = dec[cls]
        L.append(f"- {cls} ({R.LABEL[cls]}{', in use' if cls == IN_USE else ''}): gate 1 "
                 + ("passes" if x["gate1"][0] else "fails: " + x["gate1"][1]) + "; gate 2 "
                 + ", ".join(f"{p} {v:.3f}" for p, v in x["gate2"].items())
                 + "; gate 3 " + ("passes" if x["gate3"][0] else "fails: " + x["gate3"][1])
                 + f". **{x['action']}**")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--earlier-only", action="store_true",
                    help="pools A-D: gate 3's cell and the operating characteristics alone")
    ap.add_argument("--chances", action="store_true", help="the first plan's binomial figures")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    if a.chances:
        for k, v in chances().items():
            print(k, round(v, 4) if isinstance(v, float) else v)
        return
    earlier_pools = {name: P.load_pool(seed, n) for name, seed, n in POOLS if name != FRESH}
    earlier = {cls: pooled_cell(list(earlier_pools.values()), cls)
               for cls in (*CANDIDATES, IN_USE)}
    oc = operating(earlier_pools)
    sub = {(cls, w): D.free_resampled(earlier_pools["B"], cls, "D4", which=w)
           for cls, w in (("A", "free"), ("B", "bound"))}
    if a.earlier_only:
        print("\n".join(_row(f"{cls}: {R.LABEL[cls]}", c) for cls, c in earlier.items()))
        print(oc)
        print(sub)
        return
    name, seed, n = POOLS[-1]
    fresh = P.load_pool(seed, n)  # refuses fewer than the plan's 200 finished subsets
    pools = {**earlier_pools, name: fresh}
    per_pool = {p: D.table(d) for p, d in pools.items()}
    pooled = {cls: pooled_cell(list(pools.values()), cls) for cls in (*CANDIDATES, IN_USE)}
    dec = decide(per_pool, pooled)
    H.write(markdown(oc, sub, per_pool, pooled, earlier, dec, fresh), a.out)


if __name__ == "__main__":
    main()
