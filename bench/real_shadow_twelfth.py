"""The analysis of bench/results/real_shadows_twelfth_plan.md (committed before any of pool L's
stores was read; this script was committed before they were read too): a twelfth, fresh pool
(L, data seed 12) re-checks every real-shadow rule in use, no rule proposed.

- Class A (all samples' AUC difference at the common point of matched held-out accuracy and
  of matched fit) under D4s (`delete4_halves_s`, the eleventh plan's); classes B (over their
  overlap) and E (at equal epochs or budgets) under D4 (`delete4_halves`). Gate 1: pool L
  alone, the fresh-pool key floors (0.91; 0.90 at T_s × 1.5); gate 2: the twelve pools A-L
  per key, weighted equally, the pooled floors (0.93; 0.92): real_shadow_keypooled.gates
  with split_upper=False on their lower side (band (0.93, inf)). A class that fails either
  reverts (A and E to jacksum, B to `both`); a failure on the upper side alone is named and
  decides nothing. The stopping rule for class A: D4s stays unless a lower-side gate fails.
- Memorization at the common point under `jacksum_s` against theta_full with pool L fresh:
  the tenth plan's check (its gates and caveat rule), which changes no rule.
- Reported, deciding nothing: each class's over-coverage (keys, and where V_h's floor binds
  or is free, above 0.97), the between-pool SD of each class's coverage and of the headline
  key's, and class A on pools I-L (out of sample for the D4s formula, written before I and
  J's AUC stores were read).

    # needs pool L's logits (/work/realpool12): its full read and V_j check
    python bench/real_shadow_twelfth.py compute
    python bench/real_shadow_twelfth.py table --out bench/results/real_shadows_twelfth.md
    # pools A-K (L not read): class A's cells are the eleventh table's, the check made before pool L
    python bench/real_shadow_twelfth.py table --as-of K
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import real_shadow_deleted as D  # noqa: E402
import real_shadow_eleventh as E11  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_keypooled as K  # noqa: E402
import real_shadow_pooled as PO  # noqa: E402
import real_shadow_rules as R  # noqa: E402
import real_shadow_sixth as S  # noqa: E402
import real_shadow_tenth as T  # noqa: E402

FRESH = ("L", 12, 200)
POOLS = E11.POOLS + (FRESH,)  # A, C, B, D, E, F, G, H, I, J, K, L
OUT = ROOT / "results" / "real_shadows_twelfth.json"
RULES = {"A": D.SATTERTHWAITE, "B": "D4", "E": "D4"}  # the rules in use (intervals.MIXED_RULES)
OTHERWISE = {"A": "jacksum", "B": "both", "E": "jacksum"}  # their fallbacks (HALVES_FALLBACK)
LOW_BAND = E11.LOW_BAND
TOP = K.BAND[1]  # 0.97
MANY = T.MANY
OUT_OF_SAMPLE = ("I", "J", "K", "L", "N")  # pools whose class A stores were read after the D4s formula was written


def class_cells(pools: dict, cls: str) -> dict:
    """One class under its rule in use: each pool's cell, the pools' cell per key (weighted
    equally) and each key's coverage per pool."""
    rule, names = RULES[cls], list(pools)
    keys = H.class_keys(pools[names[0]], cls)
    return {"per_pool": {p: E11.pool_cell(d, rule, cls) for p, d in pools.items()},
            "pooled": K.pooled_cell(list(pools.values()), cls, rule),
            "per_key": {k: [E11.key_coverage(pools[p], k, rule, cls) for p in names] for k in keys}}


def decide(c: dict, fresh: str, cls: str) -> dict:
    """Gate 1 (the fresh pool alone) and gate 2 (all pools per key), in full and on their
    lower side (what decides), and the action."""
    cells = {f"pool {fresh}": (c["per_pool"][fresh], K.FRESH_FLOORS), "all pools": (c["pooled"], K.POOLED_FLOORS)}
    full = {w: K.gates(x, K.BAND, fl, False) for w, (x, fl) in cells.items()}
    low = {w: K.gates(x, LOW_BAND, fl, False) for w, (x, fl) in cells.items()}
    under = [f"{w}: {low[w][1]}" for w in cells if not low[w][0]]
    rule = RULES[cls]
    return {"gates": full, "lower": low, "stays": not under,
            "action": (f"{rule} stays for class {cls}" if not under else
                       f"class {cls} reverts to {OTHERWISE[cls]} (" + "; ".join(under) + ")")}


def over_lines(c: dict, fresh: str, many: str) -> list[str]:
    """What covers above 0.97 (keys; where V_h's floor binds or is free), on the fresh pool
    and over all pools: reported, deciding nothing."""
    out = []
    for where, cell, cov in ((f"pool {fresh}", c["per_pool"][fresh], {k: v[-1] for k, v in c["per_key"].items()}),
                             (f"{many} pools", c["pooled"], {k: float(np.mean(v)) for k, v in c["per_key"].items()})):
        keys = [f"`{k}` {v:.3f}" for k, v in cov.items() if v > TOP]
        parts = ([f"class {cell['coverage']:.3f}"] if cell["coverage"] > TOP else []) + (
            [f"where V_h's floor binds {cell['bound']:.3f}"] if cell["bound"] > TOP else []) + (
            [f"where it is free {cell['free']:.3f}"] if cell["free"] > TOP else [])
        out.append(f"{where}: " + ("; ".join(parts + [f"{len(keys)} of {len(cov)} keys: " + ", ".join(keys)])
                                   if keys or parts else "nothing above 0.97"))
    return out


# a plan that re-checks every rule in use on a fresh pool: its ordinal, its fresh pool, the pool
# read last before it (the `--as-of` check) and, for the table, the pools out of sample for D4s
STUDY = {"ordinal": "twelfth", "fresh": "L", "before": "K"}


def auc_part(spec: tuple, study: dict = STUDY, extra=None) -> tuple[list[str], dict]:
    """The AUC classes' tables, gates and decisions over the pools in `spec`, the last one
    fresh; deciding where it is `study`'s fresh pool; `extra(got, names)` adds reported
    lines (a later plan's)."""
    pools = {name: PO.load_pool(seed, n) for name, seed, n in spec}
    names = list(pools)
    fresh, many = names[-1], MANY[len(names)]
    word, before = study["ordinal"], study["before"]
    deciding = fresh == study["fresh"]
    got = {cls: class_cells(pools, cls) for cls in RULES}
    dec = {cls: decide(got[cls], fresh, cls) for cls in RULES}
    head = S.HEADLINE
    L = [f"# Real shadows: a {word} pool re-checks every real-shadow rule in use, pool {fresh} "
         + ("fresh" if deciding else f"last (pools A-{before}: the check made before pool {study['fresh']}, "
            "deciding nothing)"), "",
         (f"`python bench/real_shadow_{word}.py table --out bench/results/real_shadows_{word}.md`" if deciding
          else f"`python bench/real_shadow_{word}.py table --as-of {before}`")
         + f" (plan: real_shadows_{word}_plan.md). {many.capitalize()} pools: " + ", ".join(names)
         + "; 200 coverage subsets of 8 pairs each (pool B 100), each pool scored against its own truth. "
         "Class A under D4s (V_4 + max(V_h, 0), ± t_nu sd, nu = (V_4 + V_h+)² / (V_4² / 7)); classes B and E "
         "under D4 (the same variance, ± 1.96 sd).", ""]
    for cls in RULES:
        c = got[cls]
        L += [f"## Class {cls} ({R.LABEL[cls]}) under {RULES[cls]}, per key and pool", "",
              "| key | " + " | ".join(names) + f" | {many} pools (lowest pool) |", "|---|" + "---|" * (len(names) + 1)]
        for k, v in c["per_key"].items():
            L.append(f"| `{k}`" + (" (headline)" if k == head else "") + " | " + " | ".join(f"{x:.3f}" for x in v)
                     + f" | {np.mean(v):.3f} ({min(v):.3f}) |")
        L += ["", *K.HEAD, K._row(f"pool {fresh}: {RULES[cls]}", c["per_pool"][fresh]),
              K._row(f"{many} pools: {RULES[cls]}", c["pooled"]), ""]
        g, lo = dec[cls]["gates"], dec[cls]["lower"]
        for w, floors in ((f"pool {fresh}", K.FRESH_FLOORS), ("all pools", K.POOLED_FLOORS)):
            L.append(f"- Gate {1 if w != 'all pools' else 2} ({w if w != 'all pools' else many + ' pools per key'}; "
                     f"key floors {floors[0]}, {floors[1]} at T_s × 1.5): "
                     + E11.gate_text(lo[w], g[w]))
        L.append(f"- **{dec[cls]['action']}**" if deciding else f"- (deciding nothing as of pool {fresh}: "
                 f"{dec[cls]['action']})")
        L += ["- Above 0.97, deciding nothing: " + " — ".join(over_lines(c, fresh, many)), ""]
    L += ["## Reported, deciding nothing: the spread between pools", "",
          "The SD over the pools of each pool's class coverage (the 95 % ranges above resample one pool's "
          "subsets: Monte Carlo only): " + "; ".join(
              f"{cls} {np.std([x['coverage'] for x in got[cls]['per_pool'].values()], ddof=1):.3f} "
              f"({min(x['coverage'] for x in got[cls]['per_pool'].values()):.3f}–"
              f"{max(x['coverage'] for x in got[cls]['per_pool'].values()):.3f})" for cls in RULES)
          + f"; the headline key (`{head}`) under D4s {np.std(got['A']['per_key'][head], ddof=1):.3f} "
          f"({min(got['A']['per_key'][head]):.3f}–{max(got['A']['per_key'][head]):.3f}).", ""]
    oos = [p for p in OUT_OF_SAMPLE if p in pools]
    L += ["Class A under D4s on the pools read after its formula was written (the tenth plan, before pools I "
          "and J's AUC stores were read): " + "; ".join(
              f"pool {p} {got['A']['per_pool'][p]['coverage']:.3f} (headline key "
              f"{got['A']['per_key'][head][names.index(p)]:.3f})" for p in oos) + "."]
    if extra is not None:
        L += extra(got, names)
    return L, {"decision": dec, "cells": got, "pools": pools}


mem_load, mem_part, table_main, compute_main = E11.plan_commands(
    FRESH, "K", POOLS, E11.POOLS, lambda: E11.mem_load("K"), auc_part, OUT)


def main() -> None:
    E11.cli(__doc__, FRESH, "K", compute_main, table_main)


if __name__ == "__main__":
    main()
