"""The analysis of bench/results/real_shadows_eleventh_plan.md (fixed before any of pool K's
stores existed; this script was written and committed before any of them was read): D4 with
a Satterthwaite quantile (`delete4_halves_s`, D4s: V_4 + max(V_h, 0), Student's t on
(V_4 + V_h+)² / (V_4² / 7)) for class A, the all-sample AUC difference at the common point
of matched held-out accuracy and of matched fit.

- Gate 1: pool K alone, the fresh-pool key floors (0.91; 0.90 at T_s × 1.5). Gate 2: the
  eleven pools A-K per key, weighted equally, the pooled floors (0.93; 0.92). Both are
  real_shadow_keypooled.gates with split_upper=False on their lower side (band (0.93, inf)).
  Both pass: D4s is adopted for class A; either fails: jacksum stays. A failure on the upper
  side alone is named and decides nothing (jacksum over-covers more).
- Reported, deciding nothing (fixed here, before pool K was read): class A under D4 on pool K
  and over the eleven pools, with its width beside D4s's (jacksum, in use, cannot be read on
  pools J and K: their main stores hold no coverage subsets, so no samples' bootstrap);
  memorization at the common point under jacksum_s with pool K fresh, the tenth plan's check
  (its gates and its caveat rule), which changes no rule.

    # needs pool K's logits (/work/realpool11): its full read and V_j check
    python bench/real_shadow_eleventh.py compute
    python bench/real_shadow_eleventh.py table --out bench/results/real_shadows_eleventh.md
    # pools A-J (K not read): reproduces the tenth table's D4s figures (headline key 0.963,
    # lowest pool 0.942), the check made before pool K
    python bench/real_shadow_eleventh.py table --as-of J
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import real_shadow_deleted as D  # noqa: E402
import real_shadow_fullread as F  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_keypooled as K  # noqa: E402
import real_shadow_ninth as N  # noqa: E402
import real_shadow_pareto as P  # noqa: E402
import real_shadow_pooled as PO  # noqa: E402
import real_shadow_rules as R  # noqa: E402
import real_shadow_sixth as S  # noqa: E402
import real_shadow_tenth as T  # noqa: E402

FRESH = ("K", 11, 200)
POOLS = T.POOLS + (FRESH,)  # A, C, B, D, E, F, G, H, I, J, K
OUT = ROOT / "results" / "real_shadows_eleventh.json"
CLS = "A"
RULE = D.SATTERTHWAITE  # "D4s"
LOW_BAND = (K.BAND[0], np.inf)
MANY = T.MANY


def spec_of(as_of: str) -> tuple:
    return POOLS if as_of == "K" else T.POOLS


def pool_cell(d: dict, rule: str = RULE, cls: str = CLS) -> dict:
    """One pool's class cell under `rule` with the gates' sensitivity reads (T_s × 1.5, the
    empirical samples' part, V_h at B8), as real_shadow_deleted.table builds D4's."""
    keys = H.class_keys(d, cls)
    comps = {k: H.components(d, k) for k in keys}
    c = D.cell(d, cls, keys, comps, rule)
    c["ts15"] = D.cell(d, cls, keys, comps, rule, 1.5)
    c["emp"] = D.cell(d, cls, keys, comps, rule, empirical=True)
    c["b8"] = D.cell(d, cls, keys, comps, rule, to_b8=True) if rule in (*D.RULES, RULE) else c
    return c


def key_coverage(d: dict, key: str, rule: str = RULE, cls: str = CLS) -> float:
    p, _, _, _ = D.per_subset(d, key, rule, cls, H.components(d, key))
    return float(p.mean())


def decide(per_pool: dict, pooled: dict, fresh: str) -> dict:
    """Gate 1 on the fresh pool alone, gate 2 over all pools per key, each in full (band
    [0.93, 0.97]) and on its lower side alone (what decides)."""
    cells = {f"pool {fresh}": (per_pool[fresh], K.FRESH_FLOORS), "all pools": (pooled, K.POOLED_FLOORS)}
    full = {w: K.gates(c, K.BAND, fl, False) for w, (c, fl) in cells.items()}
    low = {w: K.gates(c, LOW_BAND, fl, False) for w, (c, fl) in cells.items()}
    under = [f"{w}: {low[w][1]}" for w in cells if not low[w][0]]
    over = [f"{w}: {full[w][1]}" for w in cells if low[w][0] and not full[w][0]]
    return {"gates": full, "lower": low, "adopt": not under, "over": over,
            "action": ("adopt D4s for class A" if not under else
                       "jacksum stays for class A (" + "; ".join(under) + ")")
            + (" (over-covers: " + "; ".join(over) + "; jacksum over-covers more)" if over and not under else "")}


def gate_text(lower: tuple, full: tuple) -> str:
    """One gate's reading: the lower side decides (passes, or fails and why); where the full
    gate (band [0.93, 0.97]) fails while the lower side passes, it fails above 0.97, and the
    line says so rather than leave it to a parenthesis."""
    if not lower[0]:
        return "fails: " + lower[1] + ("" if full[0] else f" (in full: {full[1]})")
    return "passes" + ("" if full[0] else " on the lower side, which decides; in full (band "
                       f"[0.93, 0.97]) it fails above: {full[1]}")


def auc_part(spec: tuple) -> tuple[list[str], dict]:
    pools = {name: PO.load_pool(seed, n) for name, seed, n in spec}
    names = list(pools)
    fresh, many = names[-1], MANY[len(names)]
    keys = H.class_keys(pools[names[0]], CLS)
    per_pool = {p: pool_cell(d) for p, d in pools.items()}
    pooled = K.pooled_cell(list(pools.values()), CLS, RULE)
    cov = {k: [key_coverage(pools[p], k) for p in names] for k in keys}
    dec = decide(per_pool, pooled, fresh)
    ctx = {"fresh": pool_cell(pools[fresh], "D4"), "all": K.pooled_cell(list(pools.values()), CLS, "D4")}
    head = S.HEADLINE
    deciding = fresh == "K"
    L = [f"# Real shadows: D4 with a Satterthwaite quantile (D4s) for the AUC difference at the common "
         f"point, pool {fresh} " + ("fresh" if deciding else "last (pools A-J: the check made before pool K, "
                                                               "deciding nothing)"), "",
         ("`python bench/real_shadow_eleventh.py table --out bench/results/real_shadows_eleventh.md`" if deciding
          else "`python bench/real_shadow_eleventh.py table --as-of J`")
         + f" (plan: real_shadows_eleventh_plan.md). {many.capitalize()} pools: " + ", ".join(names)
         + "; 200 coverage subsets of 8 pairs each (pool B 100), each pool scored against its own truth. D4s: "
         "V_4 + max(V_h, 0), ± t_nu sd, nu = (V_4 + V_h+)² / (V_4² / 7). Class A: "
         f"{R.LABEL[CLS]} (BN − none, reg − none, reg − BN at matched held-out accuracy and at matched fit).", "",
         f"## Class A under D4s, per key and pool", "",
         "| key | " + " | ".join(names) + f" | {many} pools (lowest pool) |",
         "|---|" + "---|" * (len(names) + 1)]
    for k in keys:
        L.append(f"| `{k}`" + (" (headline)" if k == head else "") + " | "
                 + " | ".join(f"{x:.3f}" for x in cov[k]) + f" | {np.mean(cov[k]):.3f} ({min(cov[k]):.3f}) |")
    L += ["", f"The cells the gates read (pool {fresh} alone; the {many} pools per key, weighted equally):", "",
          *K.HEAD, K._row(f"pool {fresh}: D4s", per_pool[fresh]), K._row(f"{many} pools: D4s", pooled), "",
          "## Decision (the plan's gates, lower side)", ""]
    g = dec["gates"]
    L += [f"- Gate 1 (pool {fresh} alone; key floors {K.FRESH_FLOORS[0]}, {K.FRESH_FLOORS[1]} at T_s × 1.5): "
          + gate_text(dec["lower"][f"pool {fresh}"], g[f"pool {fresh}"]),
          f"- Gate 2 ({many} pools per key; key floors {K.POOLED_FLOORS[0]}, {K.POOLED_FLOORS[1]} at T_s × 1.5): "
          + gate_text(dec["lower"]["all pools"], g["all pools"]),
          f"- **{dec['action']}**" if deciding else f"- (deciding nothing as of pool {fresh}: {dec['action']})", "",
          f"## Reported, deciding nothing: class A under D4 (1.96), pool {fresh} and {many} pools", "",
          *K.HEAD, K._row(f"pool {fresh}: D4", ctx["fresh"]), K._row(f"{many} pools: D4", ctx["all"]), "",
          f"Mean width over the calibrated (1.96 sqrt(T_p + T_s)), class A, {many} pools: D4s "
          f"{pooled['width_calibrated']:.2f}, D4 {ctx['all']['width_calibrated']:.2f}. The headline key "
          f"(`{head}`) on pool {fresh}: D4s {cov[head][-1]:.3f}, D4 {key_coverage(pools[fresh], head, 'D4'):.3f}."]
    return L, {"decision": dec, "per_key": cov, "pooled": pooled, "per_pool": per_pool, "context": ctx,
               "pools": pools}


def with_fresh(pools: list[dict], full: dict, fresh: tuple, out: Path) -> tuple[list[dict], dict]:
    """`pools` and their full reads plus a fresh pool's, its full read from `out` (`compute`),
    checked against its main store's fingerprint."""
    label, seed, _ = fresh
    here = json.loads(out.read_text())
    if here[label]["pool"] != F._meta_pool(seed):
        raise SystemExit(f"pool {label}'s full read comes from another pool")
    full[label] = here[label]
    return [*pools, P.load(*fresh)], full


def mem_load(as_of: str) -> tuple[list[dict], dict]:
    """Pools A-J (as_of "J") or A-K with their full reads."""
    pools, full = T.mem_load("J")
    return (pools, full) if as_of == "J" else with_fresh(pools, full, FRESH, OUT)


def mem_part(pools: list[dict], full: dict, fresh: str = FRESH[0]) -> tuple[list[str], dict]:
    """The tenth plan's memorization check with the last pool fresh; where that pool is the
    plan's `fresh` one, its verdict (a check: jacksum_s stays whatever it shows) and V_j
    check."""
    L, m = T.mem_part(pools, full)
    many = MANY[len(pools)]
    if pools[-1]["label"] == fresh:
        caveat = T.caveat_lines(m["figures"], m["decision"], fresh, many)
        L.append("- A check, deciding nothing (jacksum_s stays whatever it shows): "
                 + ("passes, no caveat follows" if not caveat else "the report's caveat: " + " ".join(caveat)))
        L += ["", N.vj_check_line(full, fresh)]
    return L, m


def table_text(spec: tuple, auc, mem: tuple[list[dict], dict], mem_fn) -> tuple[str, dict, dict]:
    """A plan's table as `table` writes it (`auc(spec)`'s lines, the store checks,
    `mem_fn(*mem)`'s lines), with the AUC part's and the memorization part's figures."""
    lines, got = auc(spec)
    mem_pools, full = mem
    checks = T.check_stores(spec, got["pools"], mem_pools, full)
    mem_lines, m = mem_fn(mem_pools, full)
    return "\n".join(lines) + "\n\n" + checks + "\n\n" + "\n".join(mem_lines) + "\n", got, m


def write_table(spec: tuple, auc, mem: tuple[list[dict], dict], mem_fn, out: Path | None) -> None:
    H.write(table_text(spec, auc, mem, mem_fn)[0].rstrip("\n"), out)


def table_main(a: argparse.Namespace) -> None:
    write_table(spec_of(a.as_of), auc_part, mem_load(a.as_of), mem_part, a.out)


def compute_main(a: argparse.Namespace) -> None:
    N.write_full_read(FRESH, OUT)


def plan_commands(fresh: tuple, before: str, spec: tuple, spec_before: tuple, mem_before, auc, out: Path):
    """A re-check plan's commands over the pools in `spec`, the last, `fresh`, read after the
    check as of `before` (over `spec_before`; `mem_before()` its memorization pools and full
    reads): (mem_load, mem_part, table_main, compute_main)."""
    def mem_load(as_of: str) -> tuple[list[dict], dict]:
        pools, full = mem_before()
        return (pools, full) if as_of == before else with_fresh(pools, full, fresh, out)

    def mem_fn(pools: list[dict], full: dict) -> tuple[list[str], dict]:
        return mem_part(pools, full, fresh[0])

    def table_main(a: argparse.Namespace) -> None:
        write_table(spec if a.as_of == fresh[0] else spec_before, auc, mem_load(a.as_of), mem_fn, a.out)

    def compute_main(a: argparse.Namespace) -> None:
        N.write_full_read(fresh, out)

    return mem_load, mem_fn, table_main, compute_main


def cli(doc: str, fresh: tuple, before: str, compute, table) -> None:
    """The plans' command line: `compute` (the fresh pool's full read) and `table` (with
    --as-of `before`, the check made before the fresh pool was read)."""
    label = fresh[0]
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("compute", help=f"pool {label}'s full read and V_j check (needs the logits)")
    t = sub.add_parser("table", help="the plan's tables and decisions")
    t.add_argument("--out", type=Path)
    t.add_argument("--as-of", choices=(before, label), default=label,
                   help=f"{before}: pools up to {before}, {before} last (the check made before pool {label})")
    a = ap.parse_args()
    {"compute": compute, "table": table}[a.cmd](a)


def main() -> None:
    cli(__doc__, FRESH, "J", compute_main, table_main)


if __name__ == "__main__":
    main()
