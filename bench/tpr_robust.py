"""The seventh TPR plan (bench/results/tpr32_robust_plan.md): a rule for TPR above 8 pairs
that holds a lower-side criterion (coverage >= 0.93, neither tail above 0.04; not the
93-97 % band) under both normal and Student-t (3 df) scores.

    python bench/tpr_robust.py select [--md out.md]
    python bench/tpr_robust.py confirm results/tpr32_components_robust_normal_seed40.jsonl \
        results/tpr32_components_robust_t3_seed41.jsonl [--md out.md]

`select` reads the five 20-draw stores of seeds 35-39 (read before the plan: a post-hoc
selection); `confirm` the two fresh stores, after the store and study checks (the store's
fingerprint recomputed from the planned command, bench_tpr_components.study_args). A rule
qualifies in a cell (TPR at FPR 1e-3 / 1e-4; one arm, arm a, or the paired difference a - b)
when every run has a finite interval, coverage is at least FLOOR and neither tail misses
more than TAIL; rules as bench/tpr_rules.py defines them, each run against its store's own
truth. The confirmation also asks, of arm b alone (amended before the read), that the rule
qualifies there or covers at least as often as C1 on the same runs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import jsonl  # noqa: E402  (bench/jsonl.py)
import tpr_rules as T  # noqa: E402  (bench/tpr_rules.py)

ROOT = Path(__file__).resolve().parents[1]
FLOOR, TAIL, UPPER = 0.93, 0.04, 0.97  # UPPER: reported, never deciding
CANDIDATES = ("C0", "C1", "C3", "C4", "C7", "C11")
SELECTION = tuple(f"results/{s}.jsonl" for s in (
    "tpr32_components_20draws_seed35", "tpr32_components_20draws_seed36",
    "tpr32_components_heavy_seed37", "tpr32_components_matched3_seed38",
    "tpr32_components_matched4_seed39"))
SELECTED = "C4"  # what `select` gave when the plan was written (tested)
_STUDY = ("python bench/bench_tpr_components.py --seed {seed} --runs 500 --truth-runs 1000 "
          "--n 3200 --n-models 64 --flipped 0.1 --ood 0.0 --vlow --draws 20{noise} --workers 1 "
          "--store results/tpr32_components_robust_{name}_seed{seed}.jsonl")
PLANNED = {"normal": _STUDY.format(seed=40, noise="", name="normal"),
           "t3": _STUDY.format(seed=41, noise=" --noise-df 3", name="t3")}
BESIDE = ("C0", "C1", "C11")


def planned_fingerprint(regime: str) -> str:
    """The fingerprint (bnmem.attack.coverage._fingerprint) the planned study of `regime`
    writes on its store's first line: every unit's arguments, so seeds, effects, noise,
    sample kinds and draws, not only the command's words."""
    return study_fingerprint(PLANNED[regime])


def study_fingerprint(command: str) -> str:
    """The fingerprint a bench_tpr_components.py command's store carries, from the command
    alone (its parser and argument tuples, bench_tpr_components.study_args)."""
    import bench_tpr_components as comp  # (imports bnmem: only when a fingerprint is asked for)
    from bnmem.attack.coverage import _fingerprint
    truth_args, run_args, _ = comp.study_args(comp.parse(command.split()[2:]))
    return _fingerprint(truth_args, run_args)


def check_fingerprint(store: Path, regime: str) -> None:
    """SystemExit with one line unless `store`'s first line names the planned study's
    fingerprint (a relabelled meta file cannot pass: the units' arguments decide)."""
    head = jsonl.lines(store)[0] or {}
    want = planned_fingerprint(regime)
    if head.get("study") != want:
        raise SystemExit(f"{store}: its units are study {head.get('study')}, not the planned "
                         f"{regime} study's {want}; no decision is read")


def cells(store: Path, rule: str, arms: tuple[str, ...] = ("a", "d")) -> dict:
    """{(figure, arm): score} of `rule` on `store` for TPR at 1e-3 and 1e-4; arm "a" one arm,
    "d" the paired difference (by MOVER for C4 / C7, as tpr_rules.difference), "b" arm b
    alone."""
    truth, rec, pairs = T.load(store)
    out = {}
    for fig in T.FIGS2:
        ra, rb, rd = rec[f"{fig}_a"], rec[f"{fig}_b"], rec[f"{fig}_d"]
        for arm in arms:
            lo, hi = (T.difference(ra, rb, rd, rule, pairs) if arm == "d" else
                      T.one_arm(ra if arm == "a" else rb, rule, pairs))
            out[fig, arm] = T.score(lo, hi, truth[f"{fig}_{arm}"])
    return out


def qualifies(score: dict, runs: int) -> bool:
    """The plan's criterion for one cell: `runs` finite intervals, coverage >= FLOOR, neither
    tail above TAIL."""
    return (score["runs"] == runs and score["coverage"] >= FLOOR
            and score["miss_below"] <= TAIL and score["miss_above"] <= TAIL)


def select(stores=SELECTION, rules=CANDIDATES, runs: int = T.SECOND_RUNS) -> dict:
    """{"rows": {rule: summary}, "selected": rule or None}: a rule qualifies when it does in
    every cell of every store; the narrowest (mean width summed over the cells) is selected."""
    rows = {}
    for rule in rules:
        got = [(Path(s).name, key, x) for s in stores for key, x in cells(ROOT / s, rule).items()]
        rows[rule] = {
            "lowest": min(x["coverage"] for *_, x in got),
            "below": max(x["miss_below"] for *_, x in got),
            "above": max(x["miss_above"] for *_, x in got),
            "over_upper": sum(x["coverage"] > UPPER for *_, x in got),
            "width": sum(x["mean_width"] for *_, x in got),
            "failing": [(s, k) for s, k, x in got if not qualifies(x, runs)],
            "cells": len(got)}
        rows[rule]["qualifies"] = not rows[rule]["failing"]
    ok = [r for r in rules if rows[r]["qualifies"]]
    return {"rows": rows, "selected": min(ok, key=lambda r: rows[r]["width"]) if ok else None}


def confirm(normal: Path, t3: Path, rule: str = SELECTED) -> dict:
    """The plan's decision: the store and study checks (SystemExit on a refusal: no decision),
    then {"rule", "confirms": bool (the decision cells and the arm-b clause), "decision_cells":
    bool, "arm_b_ok": {(regime, figure, "b"): bool}, "cells": {(regime, figure, arm):
    score}, "beside": {rule: cells}, "arm_b": {rule (this one and C1): arm b's cells}}."""
    stores = {"normal": normal, "t3": t3}
    for regime, store in stores.items():
        T.check_store(store)
        T.check_study(store, PLANNED[regime])
        check_fingerprint(store, regime)
    got = {(regime, *k): x for regime, st in stores.items() for k, x in cells(st, rule).items()}
    beside = {r: {(regime, *k): x for regime, st in stores.items() for k, x in cells(st, r).items()}
              for r in BESIDE}
    arm_b = {r: {(regime, *k): x for regime, st in stores.items()
                 for k, x in cells(st, r, ("b",)).items()} for r in (rule, "C1")}
    b_ok = {k: qualifies(x, T.SECOND_RUNS) or (x["runs"] == T.SECOND_RUNS
                                                and x["coverage"] >= arm_b["C1"][k]["coverage"])
            for k, x in arm_b[rule].items()}
    decided = all(qualifies(x, T.SECOND_RUNS) for x in got.values())
    return {"rule": rule, "confirms": decided and all(b_ok.values()), "decision_cells": decided,
            "arm_b_ok": b_ok, "cells": got, "beside": beside, "arm_b": arm_b}


def _cell(x: dict) -> str:
    if not x["runs"]:
        return "no finite interval"
    return (f"{x['coverage']:.3f} [{x['mc_range'][0]:.3f}, {x['mc_range'][1]:.3f}] / "
            f"{x['mean_width'] * 1e3:.2f}; {x['miss_below']:.3f}, {x['miss_above']:.3f}")


def select_markdown(sel: dict) -> str:
    L = ["Selection over " + ", ".join(f"`{s}`" for s in SELECTION) + " (each run against its "
         f"store's own truth; a cell qualifies with every interval finite, coverage >= {FLOOR}"
         f" and both tails <= {TAIL}).", "",
         "| rule | lowest coverage | largest miss below | largest miss above | cells above "
         f"{UPPER} | summed width x 10^3 | qualifies | failing cells |",
         "|---|---:|---:|---:|---:|---:|---|---|"]
    for r, x in sel["rows"].items():
        fail = "; ".join(f"{s} {k[0]} {k[1]}" for s, k in x["failing"]) or "-"
        L.append(f"| {r} | {x['lowest']:.3f} | {x['below']:.3f} | {x['above']:.3f} | "
                 f"{x['over_upper']} of {x['cells']} | {x['width'] * 1e3:.2f} | "
                 f"{'yes' if x['qualifies'] else 'no'} | {fail} |")
    L += ["", f"selected: {sel['selected'] or 'none qualifies'}"]
    return "\n".join(L) + "\n"


def confirm_markdown(res: dict, normal: Path, t3: Path) -> str:
    rule = res["rule"]
    L = [f"Confirmation of {rule} on `{normal}` (normal noise) and `{t3}` (t3 noise): each "
         "cell coverage [MC range] / mean width x 10^3; misses below, above.", "",
         "| regime | figure | cell | " + " | ".join((rule, *res["beside"])) + " |",
         "|---|---|---|" + "---|" * (1 + len(res["beside"]))]
    for key, x in res["cells"].items():
        regime, fig, arm = key
        others = [_cell(res["beside"][r][key]) for r in res["beside"]]
        mark = "" if qualifies(x, T.SECOND_RUNS) else " **(fails)**"
        L.append(f"| {regime} | {fig} | {'one arm' if arm == 'a' else 'paired'} | "
                 f"{_cell(x)}{mark} | " + " | ".join(others) + " |")
    bad_b = [f"{k[0]} {k[1]}" for k, ok in res["arm_b_ok"].items() if not ok]
    L += ["", f"Decision cells (arm a, paired): {'all qualify' if res['decision_cells'] else 'not all qualify'}; "
          f"arm b, qualifying or at least C1's coverage: "
          + ("every cell" if not bad_b else "fails in " + "; ".join(bad_b)) + ".", "",
          f"**{rule} confirms: {res['confirms']}**", "",
          "Arm b (effect 0.3), deciding through the amended clause: each cell qualifies, or "
          f"{rule} covers at least as often as C1 on the same runs.", "",
          "| regime | figure | " + " | ".join(res["arm_b"]) + " | clause |",
          "|---|---|" + "---|" * len(res["arm_b"]) + "---|"]
    for key, x in res["arm_b"][rule].items():
        how = ("qualifies" if qualifies(x, T.SECOND_RUNS) else
               "fails the criterion; at least C1's coverage" if res["arm_b_ok"][key] else "fails")
        L.append(f"| {key[0]} | {key[1]} | " + " | ".join(_cell(res["arm_b"][r][key])
                                                          for r in res["arm_b"]) + f" | {how} |")
    over = [f"{k[0]} {k[1]} {'one arm' if k[2] == 'a' else 'paired'} {x['coverage']:.3f}"
            for k, x in res["cells"].items() if x["coverage"] > UPPER]
    L += ["", "Beside, deciding nothing:", "",
          f"- {rule} decision cells above {UPPER}: " + ("; ".join(over) or "none") + "."]
    for regime in dict.fromkeys(k[0] for k in res["cells"]):
        ratio = [res["cells"][k]["mean_width"] / res["beside"]["C1"][k]["mean_width"]
                 for k in res["cells"] if k[0] == regime]
        L.append(f"- {rule}'s mean width over C1's in the {regime} store's decision cells: "
                 f"{min(ratio):.3f}-{max(ratio):.3f}.")
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("select")
    s.add_argument("--md", type=Path)
    c = sub.add_parser("confirm")
    c.add_argument("normal", type=Path)
    c.add_argument("t3", type=Path)
    c.add_argument("--md", type=Path)
    a = ap.parse_args()
    if a.cmd == "select":
        text = select_markdown(select())
    else:
        text = confirm_markdown(confirm(a.normal, a.t3), a.normal, a.t3)
    print(text)
    if a.md:
        a.md.write_text(text)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
