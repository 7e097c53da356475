"""The analysis of bench/results/real_shadows_seventh_plan.md (fixed before any of pool G's AUC
figures): a seventh, fresh pool re-checks D4 (`delete4_halves`) for the three AUC classes, A
(the common point of matched held-out accuracy and fit), B (their overlap) and E (equal
epochs or budgets), with the sixth plan's gates unchanged.

    python bench/real_shadow_seventh.py --out bench/results/real_shadows_seventh.md

Decision, per class: D4 is adopted if pool G alone passes every confirmation gate with the
fresh-pool key floors (0.91 / 0.90) and the seven pools weighted equally per key pass them
with the pooled floors (0.93 / 0.92); else the class keeps its rule.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_shadow_halves as H  # noqa: E402
import real_shadow_keypooled as K  # noqa: E402
import real_shadow_rules as R  # noqa: E402
import real_shadow_sixth as S  # noqa: E402

POOLS = S.POOLS + (("G", 7, 200),)
FRESH = "G"
DECIDED = ("A", "B", "E")
KEEPS = {"A": "jacksum", "B": "both", "E": "jacksum"}  # each class's rule if D4 is not adopted


def decide(per_pool: dict, seven: dict) -> dict:
    """Per class: the plan's two gates (pool G alone, fresh floors; the seven pools per key,
    pooled floors) and the action."""
    out = {}
    for cls in DECIDED:
        ok1, why1 = K.gates(per_pool[FRESH][cls]["rules"]["D4"], K.BAND, K.FRESH_FLOORS)
        ok2, why2 = K.gates(seven[cls], K.BAND, K.POOLED_FLOORS)
        fails = ([f"pool {FRESH}: {why1}"] if not ok1 else []) + ([f"seven pools: {why2}"] if not ok2 else [])
        out[cls] = {"gate1": (ok1, why1), "gate2": (ok2, why2), "adopted": not fails,
                    "action": (f"D4 adopted for class {cls}" if not fails else
                               f"class {cls} keeps {KEEPS[cls]} (" + "; ".join(fails) + ")")}
    return out


TITLE = ("a seventh pool (G) re-checks D4 for the three AUC classes", "seventh",
         "written before any of pool G's AUC figures")


def markdown(per_pool: dict, seven: dict, dec: dict, head: dict, fresh: str = FRESH,
             many: str = "seven", title: tuple[str, str, str] = TITLE, command: str | None = None,
             rules_in_use: bool = True, gate1: tuple[str, ...] = ()) -> str:
    """The table; `fresh`: the fresh pool, `many`: how many pools, in words; `title`: (title,
    the plan's name, when it was written); `command`: the one that makes it (default: the
    plan's script with --out); `rules_in_use`: the fresh pool's lines on R.CLASSES' rules;
    `gate1`: the pools whose gate 1 decides, each alone (default the fresh one; with several,
    each class's decision holds per pool "gates" {"pool X": (ok, why), "all pools": ...})."""
    L = S.head_lines(title[0], title[1], title[2], fresh, many, DECIDED, per_pool, head, command, gate1)
    if rules_in_use:
        L += ["", f"Pool {fresh}, the rules in use (deciding nothing):", ""]
    for cls in DECIDED if rules_in_use else ():
        t = per_pool[fresh][cls]
        today = t["today"]
        if today in t["rules"]:
            c = t["rules"][today]
            L.append(f"- {cls}: {H.name(today)} covers {c['coverage']:.3f} at "
                     f"{c['width_calibrated']:.2f}x the calibrated width")
        else:
            L.append(f"- {cls}: {H.name(today)}: not in pool {fresh}'s stores (no coverage subsets "
                     "with the samples' rows)")
    L += ["", f"## The {many} pools per key, weighted equally", "", *K.HEAD]
    L += [K._row(f"{cls}: {R.LABEL[cls]}", seven[cls]) for cls in DECIDED]
    L += ["", f"Per key over the {many} pools (coverage / with T_s x 1.5):", ""]
    for cls in DECIDED:
        c = seven[cls]
        L.append(f"- {cls}: " + "; ".join(f"`{k}` {a:.3f} / {b:.3f}" for k, a, b in
                                          zip(c["keys"], c["per_key"], c["per_key_ts15"])))
    L += ["", "## Outcome", ""]
    for cls in DECIDED:
        g1, g2 = dec[cls]["gate1"], dec[cls]["gate2"]
        first = (f"gate 1 (pool {fresh} alone) " + ("passes" if g1[0] else "fails: " + g1[1])
                 if len(gate1) < 2 else "gate 1 (" + "; ".join(
                     f"{w} alone " + ("passes" if ok else "fails: " + why)
                     for w, (ok, why) in dec[cls]["gates"].items() if w != "all pools") + ")")
        L += [f"- Class {cls} ({R.LABEL[cls]}): {first}; gate 2 ({many} pools per key) "
              + ("passes" if g2[0] else "fails: " + g2[1]) + f". **{dec[cls]['action']}**"]
    return "\n".join(L) + "\n"


def main() -> None:
    out = S.out_argument(__doc__)
    pools, per_pool = S.load_tables(POOLS)
    seven = {cls: K.pooled_cell(list(pools.values()), cls) for cls in DECIDED}
    dec = decide(per_pool, seven)
    H.write(markdown(per_pool, seven, dec, S.headline(pools)), out)


if __name__ == "__main__":
    main()
