"""Every TPR interval of a committed membership.json read again under another rule, from
the design SDs the record keeps (no rerun): for runs made before a rule changed, e.g. the
full-scale run's 32-pair TPR intervals under the rule bench/results/tpr32_rules_second_plan.md
confirmed (bnmem.attack.intervals.rules_for).

    python tools/rerule.py results/fullscale/results/membership.json --md results/fullscale/tpr_rerule.md
    python tools/rerule.py membership.json --rule sum     # any procedure of IntervalPlan

A rule whose designs the record lacks (e.g. `both` in a run made before `mixed` drew it) is
one line naming the missing design, exit ≠ 0.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from bnmem.attack.intervals import (PROCEDURES, SQRT_PROCEDURES, IntervalPlan,  # noqa: E402
                                    designs, interval_records, record_arms, rules_for,
                                    variance_from_sd)


def intervals(membership: dict):
    """(path, record) for every interval record of a TPR figure that keeps its design SDs."""
    return ((path, rec) for path, rec in interval_records(membership)
            if "sd" in rec and "/tpr_" in path and rec["value"] is not None)


def rerule(membership: dict, rule: str) -> list[dict]:
    """Each TPR interval's record before and under `rule` (same point, recorded SDs)."""
    pairs = int(membership["pairs"])
    rows = []
    for path, rec in intervals(membership):
        var = {k: variance_from_sd(v) for k, v in rec["sd"].items()}
        missing = [d for d in designs(rule) if var.get(d) is None]
        if missing:
            raise SystemExit(f"{path}: the record has no {', '.join(missing)} SD, which rule "
                             f"{rule} needs (recorded: {', '.join(sorted(rec['sd'])) or 'none'})")
        # a difference of two runs (a comparison's record) is read as one: a rule that builds
        # it from its arms (SQRT_PROCEDURES) needs the arms the record keeps
        figure = "tpr@equal" if "/compare/" in path or "mitigations" in path else "tpr"
        arms = record_arms(rec)
        if rule in SQRT_PROCEDURES and figure != "tpr" and arms is None:
            raise SystemExit(f"{path}: a difference under {rule} is built from its arms' points "
                             "and SDs, which this record does not keep (a run before the rule: "
                             "re-run the attack stage)")
        lo, hi = IntervalPlan(rule, pairs, {}).ci_from(rec["value"], var, figure, arms=arms)
        rows.append({"figure": path.lstrip("/"), "value": rec["value"], "before": [rec["lo"], rec["hi"]],
                     "after": [lo, hi], "width_ratio": (hi - lo) / (rec["hi"] - rec["lo"])})
    return rows


def markdown(rows: list[dict], rule: str, source: str, pairs: int) -> str:
    def f(x: float) -> str:
        return f"{x:.5f}"
    lines = [f"# TPR intervals of `{source}` under `{rule}` ({pairs} pairs)", "",
             "Read from the design SDs the record keeps (`python tools/rerule.py "
             f"{source}`); the points are unchanged.", "",
             "| figure | point | before | under the rule | width ratio |", "|---|---:|---|---|---:|"]
    lines += [f"| {r['figure']} | {f(r['value'])} | [{f(r['before'][0])}, {f(r['before'][1])}] | "
              f"[{f(r['after'][0])}, {f(r['after'][1])}] | {r['width_ratio']:.3f} |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("membership", type=Path)
    ap.add_argument("--rule", choices=PROCEDURES + SQRT_PROCEDURES, help="default: the TPR rule at the record's "
                    "pair count (bnmem.attack.intervals.rules_for)")
    ap.add_argument("--md", type=Path, help="write the table here")
    a = ap.parse_args(argv)
    if not a.membership.is_file():
        raise SystemExit(f"{a.membership}: no such file (a results/membership.json)")
    membership = json.loads(a.membership.read_text())
    if "pairs" not in membership:
        raise SystemExit(f"{a.membership}: no 'pairs' key; not a membership.json of the attack stage")
    rule = a.rule or rules_for(int(membership["pairs"]))[("tpr", "one")]
    text = markdown(rerule(membership, rule), rule, str(a.membership), int(membership["pairs"]))
    if a.md:
        a.md.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
