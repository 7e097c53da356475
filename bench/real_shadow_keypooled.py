"""The analysis of bench/results/real_shadows_keypooled_plan.md (written before any pool-E
figure): D4 (V_4 + max(V_h, 0) with 1.96) for classes A and B (all samples' AUC at the common
point / over the overlap), its key floors judged per key over five real-shadow pools, pool E
(data seed 4) fresh; class E's D4 (in use) re-tested on pool E alone.

    python bench/real_shadow_keypooled.py --out bench/results/real_shadows_keypooled.md
    python bench/real_shadow_keypooled.py --earlier-only     # pools A-D pooled per key alone
    python bench/real_shadow_keypooled.py --chances          # the plan's binomial figures

Every pool is scored against its own truth (bench/real_shadow_deleted.py, V_4 in split-mean
form); a pooled cell concatenates, per key, the pools' per-subset coverages
(bench/real_shadow_pooled.cell_pooled), so a key's coverage there is its coverage over all
the pools' subsets (weights 2 : 2 : 1 : 2 : 2).
"""
from __future__ import annotations

import argparse
import math
import sys
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
FLOOR = 0.92  # gates (ii) and (iv)
KEYS_PER_CLASS = 6  # 2 criteria x 3 comparisons


def key_pass(n: int, p: float, floor: float = FLOOR) -> float:
    """P(a key's coverage over n subsets >= floor) when each subset covers with probability p
    (binomial), the exact sum."""
    k0 = math.ceil(floor * n - 1e-9)
    return sum(math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(k0, n + 1))


def chances(p: float = 0.95, p15: float = 0.94, keys: int = KEYS_PER_CLASS) -> dict:
    """The plan's figures: the chance that a rule whose every key covers p (p15 with T_s x
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


def pooled_cell(pools: list[dict], cls: str, rule: str = "D4") -> dict:
    """real_shadow_pooled.table_pooled's cell for one class and rule, with the per-key
    coverages (over all the pools' subsets) and at T_s x 1.5."""
    c = P.cell_pooled(pools, cls, rule)
    c["ts15"] = P.cell_pooled(pools, cls, rule, 1.5)
    c["emp"] = P.cell_pooled(pools, cls, rule, empirical=True)
    c["b8"] = P.cell_pooled(pools, cls, rule, to_b8=True)
    c["keys"] = H.class_keys(pools[0], cls)
    c["per_key"] = [float(x) for x in _per_key(pools, cls, rule, 1.0)]
    c["per_key_ts15"] = [float(x) for x in _per_key(pools, cls, rule, 1.5)]
    return c


def _per_key(pools: list[dict], cls: str, rule: str, ts_scale: float) -> list[float]:
    out = []
    for k in H.class_keys(pools[0], cls):
        ps = [D.per_subset(d, k, rule, cls, H.components(d, k), ts_scale)[0] for d in pools]
        out.append(float(np.concatenate(ps).mean()))
    return out


def in_band(x: float) -> bool:
    return BAND[0] <= x <= BAND[1]


def decide(per_pool: dict[str, dict], pooled: dict[str, dict]) -> dict:
    """The plan's rule. per_pool: {pool: D.table}; pooled: {class: pooled_cell over the five
    pools}. Per candidate class: gate 1 (the fresh pool's class coverage in BAND), gate 2
    (every pool's), gate 3 (D.passes on the pooled cell), and the action; class E: D.passes
    on the fresh pool alone."""
    out = {}
    for cls in CANDIDATES:
        g1 = per_pool[FRESH][cls]["rules"]["D4"]["coverage"]
        g2 = {p: t[cls]["rules"]["D4"]["coverage"] for p, t in per_pool.items()}
        ok3, why3 = D.passes(pooled[cls], BAND)
        fails = ([f"gate 1: pool {FRESH} {g1:.3f}"] if not in_band(g1) else []) + [
            f"gate 2: pool {p} {x:.3f}" for p, x in g2.items() if not in_band(x)] + (
            [f"gate 3: {why3}"] if not ok3 else [])
        out[cls] = {"gate1": g1, "gate2": g2, "gate3": (ok3, why3), "adopt": not fails,
                    "action": ("adopt D4" if not fails
                               else "today's rule stays (" + "; ".join(fails) + ")")}
    ok, why = D.passes(per_pool[FRESH][IN_USE]["rules"]["D4"], BAND)
    out[IN_USE] = {"adopt": ok, "why": why,
                   "action": (f"D4 (in use) stays: it passes on pool {FRESH}" if ok
                              else f"D4 reverts to jacksum (on pool {FRESH}: {why})")}
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


def markdown(ch: dict, per_pool: dict, pooled: dict, earlier: dict, dec: dict,
             fresh: dict) -> str:
    L = ["# Real shadows: D4 for the matched AUC classes, key floors judged over five pools "
         "(pool E fresh)", "",
         "Plan: [real_shadows_keypooled_plan.md](real_shadows_keypooled_plan.md) (written before "
         "any pool-E figure, and before pools A-D were read under its gates). "
         "`python bench/real_shadow_keypooled.py --out bench/results/real_shadows_keypooled.md`. "
         "V_4 in split-mean form; nominal 0.95, band [0.93, 0.97], key floors 0.92.", "",
         "## Why the gates changed (binomial, independent keys; no rule's coverage)", "",
         f"A rule whose every key covers 0.95 (0.94 with T_s x 1.5), {KEYS_PER_CLASS} keys a "
         f"class, passes both key floors on one pool of 200 subsets with probability "
         f"{ch['pool_200']:.3f} (100 subsets: {ch['pool_100']:.3f}), on all of pools A-D "
         f"{ch['four_pools']:.3f}, on all five {ch['five_pools']:.3f}; per key over the five "
         f"pools' {ch['subsets_pooled']} subsets {ch['pooled']:.3f}. A key that truly covers "
         f"0.91 passes the pooled floor with probability {ch['short_091_pooled']:.3f} (0.90: "
         f"{ch['short_090_pooled']:.3f}), one pool's of 200 with {ch['short_091_one_pool']:.3f}.",
         "", "## D4 per pool (class coverage; gate 2, gate 1 on pool E)", "",
         "| class | " + " | ".join(f"pool {p}" for p in per_pool) + " |",
         "|---|" + "---|" * len(per_pool)]
    for cls in (*CANDIDATES, IN_USE):
        L.append(f"| {cls}: {R.LABEL[cls]} | " + " | ".join(
            f"{t[cls]['rules']['D4']['coverage']:.3f}" for t in per_pool.values()) + " |")
    L += ["", "## Gate 3: the five pools pooled per key (D4)", "", *HEAD]
    L += [_row(f"{cls}: {R.LABEL[cls]}", pooled[cls]) for cls in (*CANDIDATES, IN_USE)]
    L += ["", "Per key over the five pools (coverage / with T_s x 1.5):", ""]
    for cls in (*CANDIDATES, IN_USE):
        c = pooled[cls]
        L.append(f"- {cls}: " + "; ".join(f"`{k}` {a:.3f} / {b:.3f}" for k, a, b in
                                          zip(c["keys"], c["per_key"], c["per_key_ts15"])))
    L += ["", "Reported, deciding nothing: pools A-D alone pooled per key (selection data).", "",
          *HEAD]
    L += [_row(f"{cls}: {R.LABEL[cls]}", earlier[cls]) for cls in (*CANDIDATES, IN_USE)]
    L += ["", f"## Pool {FRESH} alone (every candidate; reported)", "",
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
          "## Outcome (the plan's rules)", ""]
    for cls in CANDIDATES:
        x = dec[cls]
        L.append(f"- {cls} ({R.LABEL[cls]}): gate 1 {x['gate1']:.3f}; gate 2 "
                 + ", ".join(f"{p} {v:.3f}" for p, v in x["gate2"].items())
                 + f"; gate 3 {'passes' if x['gate3'][0] else 'fails: ' + x['gate3'][1]}. "
                 f"**{x['action']}**")
    L.append(f"- {IN_USE} ({R.LABEL[IN_USE]}, in use): **{dec[IN_USE]['action']}**")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--earlier-only", action="store_true", help="pools A-D pooled per key alone")
    ap.add_argument("--chances", action="store_true", help="the plan's binomial figures")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    ch = chances()
    if a.chances:
        for k, v in ch.items():
            print(k, round(v, 4) if isinstance(v, float) else v)
        return
    earlier_pools = {name: P.load_pool(seed, n) for name, seed, n in POOLS if name != FRESH}
    earlier = {cls: pooled_cell(list(earlier_pools.values()), cls)
               for cls in (*CANDIDATES, IN_USE)}
    if a.earlier_only:
        H.write("\n".join(_row(f"{cls}: {R.LABEL[cls]}", c) for cls, c in earlier.items()) + "\n",
                a.out)
        return
    name, seed, n = POOLS[-1]
    fresh = P.load_pool(seed, n)  # refuses fewer than the plan's 200 finished subsets
    pools = {**earlier_pools, name: fresh}
    per_pool = {p: D.table(d) for p, d in pools.items()}
    pooled = {cls: pooled_cell(list(pools.values()), cls) for cls in (*CANDIDATES, IN_USE)}
    dec = decide(per_pool, pooled)
    H.write(markdown(ch, per_pool, pooled, earlier, dec, fresh), a.out)


if __name__ == "__main__":
    main()
