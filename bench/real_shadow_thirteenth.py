"""The analysis of bench/results/real_shadows_thirteenth_plan.md (committed before any of pool
M's stores existed; this script was committed before they were read): a thirteenth, fresh
pool (M, data seed 13) re-checks every real-shadow rule in use, no rule proposed, the twelfth
plan's stopping rule at the common point standing.

The twelfth plan's analysis (bench/real_shadow_twelfth.py: its gates, floors, fallbacks and
memorization check) with pool M fresh and the thirteen pools A-M, plus two reported
figures, deciding nothing: whether each class's coverage is beyond 0.97 (or short of 0.93) by
more than the pools' spread (the mean of the per-pool class coverage, its standard error
between pools, z), and class E's longest-budget keys.

    # needs pool M's logits (/work/realpool13): its full read and V_j check
    python bench/real_shadow_thirteenth.py compute
    python bench/real_shadow_thirteenth.py table --out bench/results/real_shadows_thirteenth.md
    # pools A-L (M not read): the twelfth table's cells, the check made before pool M
    python bench/real_shadow_thirteenth.py table --as-of L
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import real_shadow_eleventh as E11  # noqa: E402
import real_shadow_keypooled as K  # noqa: E402
import real_shadow_ninth as N  # noqa: E402
import real_shadow_twelfth as T12  # noqa: E402

FRESH = ("M", 13, 200)
POOLS = T12.POOLS + (FRESH,)  # A, C, B, D, E, F, G, H, I, J, K, L, M
OUT = ROOT / "results" / "real_shadows_thirteenth.json"
STUDY = {"ordinal": "thirteenth", "fresh": "M", "before": "L"}
LONGEST = "/eq3_"  # class E's longest-budget keys


def spread(per_pool: dict) -> dict:
    """The pools' class coverage: mean, between-pool SD and standard error, and z against the
    band's ends (0.97 above, 0.93 below)."""
    c = np.array([x["coverage"] for x in per_pool.values()])
    sd = float(np.std(c, ddof=1))
    se = sd / math.sqrt(c.size)
    return {"mean": float(c.mean()), "sd": sd, "se": se, "n": int(c.size),
            "z_top": (float(c.mean()) - K.BAND[1]) / se, "z_low": (float(c.mean()) - K.BAND[0]) / se}


def reported(got: dict, names: list[str]) -> list[str]:
    """The plan's two reported figures (deciding nothing)."""
    fresh, many = names[-1], T12.MANY[len(names)]
    L = ["", "## Reported, deciding nothing: over-coverage against the pools' spread", "",
         f"Over the {many} pools, the mean of each pool's class coverage, its standard error (between-pool SD / "
         f"√{len(names)}) and z against the band's ends; z above 1.64 against 0.97 reads as coverage above 0.97 "
         "beyond the pools' spread, z below −1.64 against 0.93 as coverage below 0.93.", "",
         "| class (rule) | mean | SD | SE | z against 0.97 | z against 0.93 |", "|---|---|---|---|---|---|"]
    for cls, rule in T12.RULES.items():
        s = spread(got[cls]["per_pool"])
        L.append(f"| {cls} ({rule}) | {s['mean']:.4f} | {s['sd']:.4f} | {s['se']:.4f} | {s['z_top']:+.2f} | "
                 f"{s['z_low']:+.2f} |")
    e = got["E"]["per_key"]
    last = {k: v for k, v in e.items() if LONGEST in k}
    L += ["", f"Class E's longest-budget keys (`{LONGEST}`): " + "; ".join(
        f"`{k}` {v[-1]:.3f} on pool {fresh}, {np.mean(v):.3f} over {many} (lowest pool {min(v):.3f})"
        for k, v in last.items()) + "."]
    return L


def auc_part(spec: tuple) -> tuple[list[str], dict]:
    return T12.auc_part(spec, STUDY, reported)


def spec_of(as_of: str) -> tuple:
    return POOLS if as_of == "M" else T12.POOLS


def mem_load(as_of: str) -> tuple[list[dict], dict]:
    """Pools A-L (as_of "L") or A-M with their full reads."""
    pools, full = T12.mem_load("L")
    return (pools, full) if as_of == "L" else E11.with_fresh(pools, full, FRESH, OUT)


def mem_part(pools: list[dict], full: dict) -> tuple[list[str], dict]:
    return E11.mem_part(pools, full, FRESH[0])


def table_main(a: argparse.Namespace) -> None:
    E11.write_table(spec_of(a.as_of), auc_part, mem_load(a.as_of), mem_part, a.out)


def compute_main(a: argparse.Namespace) -> None:
    N.write_full_read(FRESH, OUT)


def main() -> None:
    E11.cli(__doc__, FRESH, "L", compute_main, table_main)


if __name__ == "__main__":
    main()
