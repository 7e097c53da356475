"""The analysis of bench/results/real_shadows_eighth_plan.md (fixed before any of pool H's
figures): an eighth, fresh pool (H, data seed 8) re-checks the rules the seventh plan and the
fullread plan left in use.

- The AUC classes (the seventh's analysis, pool H added): D4 (`delete4_halves`) stays for
  classes A and E, and is adopted for class B, if pool H alone and the eight pools per key
  pass the plan's gates; else A and E revert to jacksum and B keeps `both`.
- Memorization at the common point (the fullread analysis, pool H added): jacksum against
  theta_full, the read on all of a pool's pairs, for K1 and K2 (gates 0.90 on pool H, 0.93
  over the eight pools).

    # needs pool H's logits (/work/realpool8): its full read, 10 random splits into two
    # 64-pair halves and 200 stratified reweightings of its samples
    python bench/real_shadow_eighth.py compute
    python bench/real_shadow_eighth.py table --out bench/results/real_shadows_eighth.md
    # the same analysis as of pool G (pools A-G, G fresh; the check made before pool H)
    python bench/real_shadow_eighth.py table --as-of G
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import lscpu  # noqa: E402
import real_shadow_fullread as F  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_keypooled as K  # noqa: E402
import real_shadow_pareto as P  # noqa: E402
import real_shadow_rules as R  # noqa: E402
import real_shadow_sixth as S  # noqa: E402
import real_shadow_seventh as V  # noqa: E402

FRESH = ("H", 8, 200)
POOLS = V.POOLS + (FRESH,)
OUT = ROOT / "results" / "real_shadows_eighth.json"
DECIDED = V.DECIDED  # A, B, E
IN_USE = {"A": "D4", "B": "both", "E": "D4"}  # before this plan
OTHERWISE = {"A": "jacksum", "B": "both", "E": "jacksum"}
MANY = {7: "seven", 8: "eight"}


def gates(c: dict, floors: tuple[float, float], split_upper: bool) -> tuple[bool, str]:
    return K.gates(c, K.BAND, floors, split_upper)


def decide(per_pool: dict, pooled: dict, fresh: str) -> dict:
    """Per class: the plan's gates (split_upper=False: where V_h's floor binds or is free only
    0.93 counts), on the fresh pool (fresh floors) and over all pools per key (pooled floors),
    the action, and (reported) the seventh's gates."""
    out = {}
    for cls in DECIDED:
        c1, c2 = per_pool[fresh][cls]["rules"]["D4"], pooled[cls]
        g1, g2 = gates(c1, K.FRESH_FLOORS, False), gates(c2, K.POOLED_FLOORS, False)
        fails = ([f"pool {fresh}: {g1[1]}"] if not g1[0] else []) + \
                ([f"all pools: {g2[1]}"] if not g2[0] else [])
        ok = not fails
        if IN_USE[cls] == "D4":
            action = (f"D4 stays for class {cls}" if ok else
                      f"class {cls} reverts to {OTHERWISE[cls]} (" + "; ".join(fails) + ")")
        else:
            action = (f"D4 adopted for class {cls}" if ok else
                      f"class {cls} keeps {OTHERWISE[cls]} (" + "; ".join(fails) + ")")
        out[cls] = {"gate1": g1, "gate2": g2, "d4": ok, "action": action,
                    "old": (gates(c1, K.FRESH_FLOORS, True), gates(c2, K.POOLED_FLOORS, True))}
    return out


def auc_part(spec: tuple, loaded: tuple[dict, dict] | None = None) -> tuple[str, dict]:
    """The AUC part's text and figures for the pools of `spec`, the last fresh (`loaded`:
    S.load_tables of these pools or more, to take them from)."""
    pools, per_pool = loaded or S.load_tables(spec)
    names = [name for name, _, _ in spec]
    pools, per_pool = {p: pools[p] for p in names}, {p: per_pool[p] for p in names}
    fresh, many = spec[-1][0], MANY[len(spec)]
    pooled = {cls: K.pooled_cell(list(pools.values()), cls) for cls in DECIDED}
    dec = decide(per_pool, pooled, fresh)
    title = ((f"an eighth pool ({fresh})" if fresh == "H" else f"the eighth plan's analysis as of pool {fresh}")
             + " re-checks the AUC classes' rules and the memorization keys at the common point", "eighth",
             "written before any of pool H's figures" if fresh == "H" else
             "pools A-G, pool G as the fresh one: the check made before pool H, deciding nothing")
    command = ("python bench/real_shadow_eighth.py table --out bench/results/real_shadows_eighth.md"
               if fresh == "H" else "python bench/real_shadow_eighth.py table --as-of G --out "
               "bench/results/real_shadows_eighth_as_of_G.md")
    text = V.markdown(per_pool, pooled, dec, S.headline(pools), fresh, many, title, command).rstrip("\n")
    L = [text, "", "The gates decide with split_upper=False (where V_h's floor binds or is free, "
         "only the lower end 0.93 counts); the seventh plan's gates (both ends), reported:", ""]
    for cls in DECIDED:
        (o1, w1), (o2, w2) = dec[cls]["old"]
        L.append(f"- {cls}: pool {fresh} " + ("passes" if o1 else "fails: " + w1) + f"; {many} pools "
                 + ("pass" if o2 else "fail: " + w2))
    return "\n".join(L), {"decision": dec, "pooled": pooled, "per_pool": per_pool,
                          "headline": S.headline(pools)}


def with_h(loaded: tuple[list, dict] | None = None) -> tuple[list, dict]:
    """F.load_all()'s pools A-G and full reads (`loaded`, not changed) with pool H and its
    full read, 64-pair halves and sample reweightings (results/real_shadows_eighth.json)."""
    pools, full = loaded or F.load_all()
    here = json.loads(OUT.read_text())
    if here["H"]["pool"] != F._meta_pool(FRESH[1]):
        raise SystemExit("pool H's full read comes from another pool")
    return ([*pools, P.load(*FRESH)],
            {**full, "H": here["H"], "halves": {**full["halves"], "H": here["halves"]["H"]},
             "boot": {**full["boot"], "H": here["boot"]["H"]}})


def memorization_part(spec: tuple, loaded: tuple[list, dict] | None = None) -> tuple[list[str], dict]:
    """The memorization part's lines and figures for the pools of `spec`, the last fresh
    (`loaded`: F.load_all()'s pools A-G and full reads, to take them from; not changed)."""
    fresh = spec[-1][0]
    pools, full = with_h(loaded) if fresh == "H" else (loaded or F.load_all())
    head = (f"## Memorization at the common point against theta_full: pool {fresh} (plan: "
            "real_shadows_eighth_plan.md)",
            "`python bench/real_shadow_eighth.py table` from the committed stores, "
            "results/real_shadows_fullread.json and results/real_shadows_eighth.json (`compute`: "
            f"pool H's read on its 128 pairs, {F.SPLITS} random splits of its pairs into two 64-pair "
            f"halves, {F.BOOT} stratified reweightings of its samples). " if fresh == "H" else
            "`python bench/real_shadow_eighth.py table --as-of G` from the committed stores and "
            "results/real_shadows_fullread.json (pools A-G, as the fullread plan read them). ")
    return F.table(pools, full, head, MANY[len(spec)], ("no caveat", "caveat"))


def table_main(a: argparse.Namespace) -> None:
    spec = POOLS if a.as_of == "H" else V.POOLS
    auc, _ = auc_part(spec)
    mem, _ = memorization_part(spec)
    H.write(auc + "\n\n" + "\n".join(mem), a.out)


def compute_main(a: argparse.Namespace) -> None:
    t0, started = time.time(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    label, seed, subsets = FRESH
    g = P.full_pool(label, seed, subsets)
    halves = {label: F.half_reads(label, seed)}
    boot = {label: F.boot_reads(label, seed)}
    meta = {"started": started, "seconds": round(time.time() - t0, 1), "cpu": lscpu.model_name(),
            "command": "python " + " ".join(sys.argv)}
    OUT.write_text(json.dumps({"meta": meta, label: g, "halves": halves, "boot": boot}, indent=1) + "\n")
    print(json.dumps(meta, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("compute", help="pool H's full read, half reads and sample reweightings (needs the logits)")
    t = sub.add_parser("table", help="the plan's tables and decisions")
    t.add_argument("--out", type=Path)
    t.add_argument("--as-of", choices=("G", "H"), default="H",
                   help="G: the analysis on pools A-G with G fresh (the check made before pool H)")
    a = ap.parse_args()
    {"compute": compute_main, "table": table_main}[a.cmd](a)


if __name__ == "__main__":
    main()
