"""The analysis of bench/results/real_shadows_sixth_plan.md (fixed before pool F's halves and
delete-d stores existed): a sixth, fresh pool re-checks D4 (`delete4_halves`) for class A,
all samples' AUC difference at the common point of matched held-out accuracy and fit, the
rule the default run's headline interval uses.

    python bench/real_shadow_sixth.py --out bench/results/real_shadows_sixth.md

Decision (class A only): D4 stays if pool F alone passes every confirmation gate with the
fresh-pool key floors (0.91 / 0.90) and the six pools weighted equally per key pass them
with the pooled floors (0.93 / 0.92); else class A reverts to jacksum. Classes B and E are
reported, deciding nothing.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_shadow_deleted as D  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_keypooled as K  # noqa: E402
import real_shadow_pooled as P  # noqa: E402
import real_shadow_rules as R  # noqa: E402

POOLS = K.POOLS + (("F", 6, 200),)
FRESH = "F"
DECIDED = "A"
REPORTED = ("B", "E")
HEADLINE = "batchnorm_minus_none/auc_matched"


def decide(per_pool: dict, six: dict) -> dict:
    """The plan's two gates for class A: pool F alone (fresh floors), the six pools per key
    (pooled floors)."""
    ok1, why1 = K.gates(per_pool[FRESH][DECIDED]["rules"]["D4"], K.BAND, K.FRESH_FLOORS)
    ok2, why2 = K.gates(six[DECIDED], K.BAND, K.POOLED_FLOORS)
    fails = ([f"pool {FRESH}: {why1}"] if not ok1 else []) + ([f"six pools: {why2}"] if not ok2 else [])
    return {"gate1": (ok1, why1), "gate2": (ok2, why2), "stays": not fails,
            "action": ("D4 stays for class A" if not fails
                       else "class A reverts to jacksum (" + "; ".join(fails) + ")")}


def headline(pools: dict) -> dict:
    """The headline key's D4 coverage per pool (mean over its subsets)."""
    return {name: float(np.nanmean(K._records(d, DECIDED, HEADLINE, "D4")[0])) for name, d in pools.items()}


def head_lines(title: str, plan: str, written: str, fresh: str, many: str, classes: tuple,
               per_pool: dict, head: dict, command: str | None = None,
               gate1: tuple[str, ...] = ()) -> list[str]:
    """A fresh-pool table's first part: title, plan and command, D4 per pool, the headline
    key, and the fresh pool's cells (`many`: "six", "seven"; `gate1`: the pools whose key
    floors are judged each alone, default the fresh one)."""
    names = list(per_pool)
    L = [f"# Real shadows: {title}", "",
         f"Plan: [real_shadows_{plan}_plan.md](real_shadows_{plan}_plan.md) ({written}). "
         f"`{command or f'python bench/real_shadow_{plan}.py --out bench/results/real_shadows_{plan}.md'}`. V_4 in "
         f"split-mean form; band [0.93, 0.97]; key floors {K.FRESH_FLOORS[0]} / {K.FRESH_FLOORS[1]} "
         + (f"on pool {fresh} alone, " if len(gate1) < 2 else "on pools " + " and ".join(gate1) + ", each alone, ")
         + f"{K.POOLED_FLOORS[0]} / {K.POOLED_FLOORS[1]} per key over the "
         f"{many} pools (equal weights).",
         "", "## D4 per pool (class coverage)", "",
         "| class | " + " | ".join(f"pool {p}" for p in names) + " |", "|---|" + "---|" * len(names)]
    for cls in classes:
        L.append(f"| {cls}: {R.LABEL[cls]} | " + " | ".join(
            f"{per_pool[p][cls]['rules']['D4']['coverage']:.3f}" for p in names) + " |")
    L += ["", f"The headline key (`{HEADLINE}`, BN − none at matched held-out accuracy), D4 per pool: "
          + ", ".join(f"{p} {v:.3f}" for p, v in head.items()) + f"; over the {many} pools "
          f"{np.mean(list(head.values())):.3f}.", "",
          f"## Pool {fresh} alone", "", *K.HEAD]
    return L + [K._row(f"{cls}: {R.LABEL[cls]}", per_pool[fresh][cls]["rules"]["D4"]) for cls in classes]


def markdown(per_pool: dict, six: dict, dec: dict, head: dict) -> str:
    L = head_lines("a sixth pool (F) re-checks D4 for class A", "sixth",
                   "written before pool F's halves and delete-d stores existed", FRESH, "six",
                   (DECIDED, *REPORTED), per_pool, head)
    L += ["", "## The six pools per key, weighted equally", "", *K.HEAD]
    L += [K._row(f"{cls}: {R.LABEL[cls]}", six[cls]) for cls in (DECIDED, *REPORTED)]
    L += ["", "Per key over the six pools (coverage / with T_s x 1.5):", ""]
    for cls in (DECIDED, *REPORTED):
        c = six[cls]
        L.append(f"- {cls}: " + "; ".join(f"`{k}` {a:.3f} / {b:.3f}" for k, a, b in
                                          zip(c["keys"], c["per_key"], c["per_key_ts15"])))
    L += ["", "## Outcome (class A; B and E reported only)", "",
          f"- Gate 1 (pool {FRESH} alone): " + ("passes" if dec["gate1"][0] else "fails: " + dec["gate1"][1]),
          "- Gate 2 (six pools per key): " + ("passes" if dec["gate2"][0] else "fails: " + dec["gate2"][1]),
          f"- **{dec['action']}**"]
    for cls in REPORTED:
        ok1, why1 = K.gates(per_pool[FRESH][cls]["rules"]["D4"], K.BAND, K.FRESH_FLOORS)
        ok2, why2 = K.gates(six[cls], K.BAND, K.POOLED_FLOORS)
        L.append(f"- Reported, {cls} ({R.LABEL[cls]}), the same gates: pool {FRESH} "
                 + ("passes" if ok1 else "fails: " + why1) + "; six pools "
                 + ("pass" if ok2 else "fail: " + why2) + " (nothing changes)")
    return "\n".join(L) + "\n"


def load_tables(spec: tuple) -> tuple[dict, dict]:
    """({pool: its stores}, {pool: real_shadow_deleted.table}) for (name, seed, subsets) pools."""
    pools = {name: P.load_pool(seed, n) for name, seed, n in spec}
    return pools, {p: D.table(d) for p, d in pools.items()}


def out_argument(doc: str) -> Path | None:
    """The scripts' one option, --out (where to write the table besides stdout)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    return ap.parse_args().out


def main() -> None:
    out = out_argument(__doc__)
    pools, per_pool = load_tables(POOLS)
    six = {cls: K.pooled_cell(list(pools.values()), cls) for cls in (DECIDED, *REPORTED)}
    dec = decide(per_pool, six)
    H.write(markdown(per_pool, six, dec, headline(pools)), out)


if __name__ == "__main__":
    main()
