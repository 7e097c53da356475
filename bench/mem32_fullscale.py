"""The full-scale run's memorization reads that the coverage_mem32 plan's rule would have
covered (bench/results/coverage_mem32_plan.md: `twoway` for the five Feldman-Zhang cells the
matched simulator has, from 32 pairs; not confirmed, so not adopted), read again from the design SDs its committed membership.json keeps (no rerun): each
record's jacksum interval (the rule it was made under), its `twoway` interval, the width
ratio, V_both / (V_pairs + V_samples) and whether `twoway`'s floor at V_pairs binds; and
the coverage_mem32_split plan's rule (bench/results/coverage_mem32_split_plan.md: `twoway`
for OOD samples, the mean of jacksum's and `twoway`'s variances for flipped ones), its
width against the recorded one.

    python bench/mem32_fullscale.py [results/fullscale/results/membership.json] [--md F]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
from bnmem.attack.coverage_matched import PLAN_NAME  # noqa: E402
from bnmem.attack.intervals import (IntervalPlan, interval_records,  # noqa: E402
                                    rule_variance, twoway_floored, variance_from_sd)

# the five memorization cells the matched simulator has ("<key>/<criterion>@<read>"), which
# the plan's rule would have covered
CELLS = tuple(k for f, k in PLAN_NAME.items() if f.startswith("fz"))

_PATH = re.compile(r"/frontier/compare/([^/]+)/criteria/([^/]+)/figures/([^/]+)/(at_common|overlap)$")


def rows(membership: dict) -> list[dict]:
    """One row per record of one of the CELLS that keeps its design SDs."""
    pairs = int(membership["pairs"])
    out = []
    for path, rec in interval_records(membership):
        m = _PATH.search(path)
        if not m or rec.get("value") is None or "sd" not in rec:
            continue
        comparison, criterion, figure, read = m.groups()
        read = "common" if read == "at_common" else "overlap"
        key = f"{figure}/{criterion}"
        if f"{key}@{read}" not in CELLS:
            continue
        var = {k: variance_from_sd(v) for k, v in rec["sd"].items()}
        lo, hi = IntervalPlan("twoway", pairs, {}).ci_from(rec["value"], var, f"{key}@{read}")
        out.append({"comparison": comparison, "cell": f"{key}@{read}", "value": rec["value"],
                    "rule": rec.get("rule"), "before": [rec["lo"], rec["hi"]], "twoway": [lo, hi],
                    "width_ratio": (hi - lo) / (rec["hi"] - rec["lo"]),
                    "vb_ratio": var["both"] / (var["pairs"] + var["samples"]),
                    "floored": twoway_floored({**rec, "rule": "twoway"}),
                    "split_ratio": split_width(key, var) / (rec["hi"] - rec["lo"])})
    return out


def split_width(key: str, var: dict) -> float:
    """The split plan's interval width from recorded design variances: `twoway`'s for an
    OOD cell, 1.96 sqrt((V_jacksum + V_twoway) / 2) x 2 for a flipped one."""
    v = (rule_variance("twoway", var) if key.startswith("fz_ood") else
         (rule_variance("jacksum", var) + rule_variance("twoway", var)) / 2)
    return 2 * 1.96 * v ** 0.5


def markdown(rs: list[dict], source: str) -> str:
    f = "{:+.5f}".format
    md = [f"# The full-scale run's memorization cells under `twoway` (`{source}`)", "",
          f"`python bench/mem32_fullscale.py {source}`: the records of the five cells the "
          "coverage_mem32 plan's rule would have covered (not confirmed), their recorded interval and `twoway`'s from the "
          "same recorded design SDs (20 draws per design each).", "",
          "| comparison | cell | point | recorded (rule) | `twoway` | width ratio | V_b / (V_p + V_s) | floor binds | split rule's width ratio |",
          "|---|---|---:|---|---|---:|---:|---|---:|"]
    for r in rs:
        md.append(f"| {r['comparison']} | {r['cell']} | {f(r['value'])} | [{f(r['before'][0])}, "
                  f"{f(r['before'][1])}] ({r['rule']}) | [{f(r['twoway'][0])}, {f(r['twoway'][1])}] | "
                  f"{r['width_ratio']:.3f} | {r['vb_ratio']:.2f} | {'yes' if r['floored'] else ''} | "
                  f"{r['split_ratio']:.3f} |")
    w = [r["width_ratio"] for r in rs]
    sp = [r["split_ratio"] for r in rs]
    v = [r["vb_ratio"] for r in rs]
    md += ["", f"{len(rs)} records: `twoway` {min(w):.2f}-{max(w):.2f} times the recorded width, "
           f"wider in {sum(x > 1 for x in w)}; V_b / (V_p + V_s) {min(v):.2f}-{max(v):.2f}; the "
           f"floor binds in {sum(r['floored'] for r in rs)}. The split plan's rule: "
           f"{min(sp):.2f}-{max(sp):.2f} times the recorded width, wider in {sum(x > 1 for x in sp)}."]
    return "\n".join(md) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("membership", nargs="?", default="results/fullscale/results/membership.json")
    ap.add_argument("--md", type=Path, default=None)
    a = ap.parse_args()
    m = json.loads(Path(a.membership).read_text())
    rs = rows(m)
    if not rs:
        raise SystemExit(f"{a.membership}: no record of the five cells keeps its design SDs "
                         f"({m.get('pairs')} pairs; a run made before records kept them, or "
                         "one with other figures): nothing to read again")
    text = markdown(rs, a.membership)
    if a.md:
        a.md.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
