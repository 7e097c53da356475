"""The eighth TPR plan's readout (bench/results/tpr32_lowregion_plan.md): `both_sqrt` as the
pipeline implements it (bnmem.attack.intervals.sqrt_ci and mover_ci: the seventh plan's C4
with a low region below p = 1.96 sd / 2) on the fresh t3 study of seed 42, against the
seventh plan's criterion (tpr_robust.qualifies), with arm b's clause and C4 as confirmed
beside.

    python bench/tpr_lowregion.py results/tpr32_components_lowregion_t3_seed42.jsonl [--md out.md]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import jsonl  # noqa: E402  (bench/jsonl.py)
import tpr_robust as R  # noqa: E402
import tpr_rules as T  # noqa: E402
from bnmem.attack.intervals import in_low_region, mover_ci, sqrt_ci  # noqa: E402

PLANNED = ("python bench/bench_tpr_components.py --seed 42 --runs 500 --truth-runs 1000 "
           "--n 3200 --n-models 64 --flipped 0.1 --ood 0.0 --vlow --draws 20 --noise-df 3 "
           "--workers 2 --store /work/tpr42/tpr32_components_lowregion_t3_seed42.jsonl")
FINGERPRINT = "9be46a04386e7620"  # the plan's, from PLANNED (tested)
FIGS = T.FIGS2
ARMS = ("a", "d")  # the decision cells' arms; b is arm b's clause


def pipeline(ra: np.ndarray, rb: np.ndarray, rd: np.ndarray) -> dict[str, tuple]:
    """{"a", "b", "d": (lo, hi)} of both_sqrt as implemented, run by run."""
    n = len(ra)
    one = {k: np.array([sqrt_ci(r[i, 0], r[i, 3], T.Z) for i in range(n)], float).reshape(n, 2)
           for k, r in (("a", ra), ("b", rb))}
    d = np.array([mover_ci(rd[i, 0], rd[i, 3], ((ra[i, 0], ra[i, 3]), (rb[i, 0], rb[i, 3])), T.Z)
                  for i in range(n)], float).reshape(n, 2)
    return {"a": tuple(one["a"].T), "b": tuple(one["b"].T), "d": tuple(d.T)}


def c4_clipped(ra: np.ndarray, rb: np.ndarray, rd: np.ndarray) -> dict[str, tuple]:
    """C4 exactly as confirmed (tpr_rules.one_arm / difference), each arm's upper end
    clipped at 1 before MOVER and the difference's ends within [-1, 1] (the plan's fallback)."""
    arms = {}
    for k, r in (("a", ra), ("b", rb)):
        lo, hi = T.one_arm(r, "C4", 32)
        arms[k] = (lo, np.minimum(hi, 1.0))
    (la, ua), (lb, ub) = arms["a"], arms["b"]
    a, b, d = ra[:, 0], rb[:, 0], rd[:, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.clip((ra[:, 3] + rb[:, 3] - rd[:, 3]) / (2 * np.sqrt(ra[:, 3] * rb[:, 3])), -1, 1)
    rho = np.where(np.isfinite(rho), rho, 0.0)
    lo = d - np.sqrt(np.maximum((a - la) ** 2 + (ub - b) ** 2 - 2 * rho * (a - la) * (ub - b), 0))
    hi = d + np.sqrt(np.maximum((ua - a) ** 2 + (b - lb) ** 2 - 2 * rho * (ua - a) * (b - lb), 0))
    return {**arms, "d": (np.maximum(lo, -1.0), np.minimum(hi, 1.0))}


def check(store: Path) -> None:
    """The plan's store checks (SystemExit with one line: no decision is read): complete,
    the planned command apart from --workers and --store, the planned fingerprint."""
    T.check_store(store)
    T.check_study(store, PLANNED)
    head = jsonl.lines(store)[0] or {}
    if head.get("study") != FINGERPRINT:
        raise SystemExit(f"{store}: its units are study {head.get('study')}, not the planned "
                         f"{FINGERPRINT}; no decision is read")


def confirm(store: Path) -> dict:
    """{"confirms", "decision_cells", "arm_b_ok", "cells": {(figure, arm): score} of the
    rule, "c4": C4 clipped's, "c1_b": twoway's arm b, "low": {(figure, arm): runs in the low
    region, with coverage and tails among them under the rule and under C4}, "fallback":
    whether the plan's fallback applies and qualifies}."""
    check(store)
    truth, rec, pairs = T.load(store)
    runs = len(rec[f"{FIGS[0]}_a"])
    cells, c4, c1_b, low = {}, {}, {}, {}
    for f in FIGS:
        ra, rb, rd = rec[f"{f}_a"], rec[f"{f}_b"], rec[f"{f}_d"]
        ours, old = pipeline(ra, rb, rd), c4_clipped(ra, rb, rd)
        region = {k: in_low_region(r[:, 0], r[:, 3], T.Z) for k, r in (("a", ra), ("b", rb))}
        region["d"] = region["a"] | region["b"]
        for k in "abd":
            t = truth[f"{f}_{k}"]
            cells[f, k], c4[f, k] = T.score(*ours[k], t), T.score(*old[k], t)
            m = region[k]
            low[f, k] = {"runs": int(m.sum()),
                         **({"rule": T.score(ours[k][0][m], ours[k][1][m], t),
                             "c4": T.score(old[k][0][m], old[k][1][m], t)} if m.any() else {})}
        c1_b[f, "b"] = T.score(*T.one_arm(rb, "C1", pairs), truth[f"{f}_b"])
    decision = all(R.qualifies(cells[f, k], runs) for f in FIGS for k in ARMS)
    arm_b = {f: R.qualifies(cells[f, "b"], runs)
             or cells[f, "b"]["coverage"] >= c1_b[f, "b"]["coverage"] for f in FIGS}
    ok = decision and all(arm_b.values())
    failed = [(f, k) for f in FIGS for k in ARMS if not R.qualifies(cells[f, k], runs)]
    fallback = (not ok and bool(failed)
                and all(R.qualifies(c4[f, k], runs) for f, k in failed))
    return {"confirms": ok, "decision_cells": decision, "arm_b_ok": arm_b, "cells": cells,
            "c4": c4, "c1_b": c1_b, "low": low, "fallback": fallback, "runs": runs}


def markdown(res: dict, store: str) -> str:
    def cell(x: dict) -> str:
        return (f"{x['coverage']:.3f} ({x['miss_below']:.3f} / {x['miss_above']:.3f}), "
                f"width {x['mean_width']:.2e}")
    lines = [f"# Eighth TPR plan: readout of `{store}`", "",
             f"`python bench/tpr_lowregion.py {store}` ([plan](tpr32_lowregion_plan.md)); "
             f"{res['runs']} runs; coverage (wholly below / wholly above the truth), mean width.", "",
             "| figure | arm | both_sqrt (as implemented) | C4 as confirmed, clipped | qualifies | "
             "runs in the low region | among them: rule / C4 |",
             "|---|---|---|---|---|---:|---|"]
    for (f, k), x in res["cells"].items():
        lo = res["low"][f, k]
        among = (f"{lo['rule']['coverage']:.3f} / {lo['c4']['coverage']:.3f}"
                 if lo["runs"] else "—")
        q = R.qualifies(x, res["runs"]) if k != "b" else res["arm_b_ok"][f]
        lines.append(f"| {f} | {k} | {cell(x)} | {cell(res['c4'][f, k])} | "
                     f"{'yes' if q else 'no'} | {lo['runs']} | {among} |")
    lines += ["", "Arm b's clause: `twoway` (C1) on arm b covers "
              + ", ".join(f"{res['c1_b'][f, 'b']['coverage']:.3f} ({f})" for f in FIGS) + ".", "",
              f"**Decision cells (arm a, paired) qualify: {'yes' if res['decision_cells'] else 'no'}; "
              f"arm b's clause holds: {'yes' if all(res['arm_b_ok'].values()) else 'no'}; "
              f"the rule {'confirms' if res['confirms'] else 'does not confirm'} under t3.**"
              + ("" if res["confirms"] else
                 f" The plan's fallback (C4 clipped) {'applies' if res['fallback'] else 'does not apply'}.")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("store", type=Path)
    ap.add_argument("--md", type=Path)
    a = ap.parse_args(argv)
    text = markdown(confirm(a.store), str(a.store))
    if a.md:
        a.md.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
