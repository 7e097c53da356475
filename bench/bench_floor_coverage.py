"""Coverage of the two-way interval, 2 (V_p + V_s) - V_b floored at V_p, split by whether
the floor binds, at the pipeline's 100 draws: the question the reverted two-way rules left
open (bench/results/coverage_seed15_plan.md, "Reverted"). Same simulation, truth and draws
as bench/bench_coverage.py (bnmem.attack.coverage); per run and figure it records whether
the floor binds and whether twoway, jacksum and both cover the truth.

    python bench/bench_floor_coverage.py [--runs 500] [--truth-runs 600] [--seed 16] [--workers 2]

Writes bench/results/floor_coverage.md and results/floor_coverage.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
import bnmem  # noqa: E402,F401  (pins the CPU kernels before numpy loads)
import lscpu  # noqa: E402  (bench/lscpu.py: the machine line)
import numpy as np  # noqa: E402

from bnmem.attack.coverage import FIGURES, draw_figures, sample_kinds, simulate_run, truth_row, simulate_all  # noqa: E402
from bnmem.attack.intervals import IntervalPlan, designs  # noqa: E402
from bnmem.attack.resample import draw_designs  # noqa: E402

PROCS = ("twoway", "jacksum", "both")
N_MODELS, N, EFFECTS, FLIPPED, DRAWS, ARM_RHO = 16, 1250, (0.6, 0.3), 0.1, 100, 0.3


def _run(seed: int) -> dict:
    kind = sample_kinds(N, FLIPPED)
    phi, keep = simulate_run(N_MODELS, N, EFFECTS, kind, seed, ARM_RHO)
    p = N_MODELS // 2
    names = tuple(dict.fromkeys(d for proc in PROCS for d in designs(proc)))
    counts, weights, segments = draw_designs(kind, p, DRAWS, np.random.default_rng([seed, 0xC0F]),
                                             names)
    f = draw_figures(phi, keep, kind, counts, weights)
    vals = np.concatenate([f[0], f[0] - f[1]], axis=1)
    labels = list(FIGURES) + [f"{x}_delta" for x in FIGURES]
    out = {}
    for j, name in enumerate(labels):
        row = {}
        for proc in PROCS:
            plan = IntervalPlan(proc, p, {d: segments[d] for d in designs(proc)})
            row[proc] = plan.ci(float(vals[0, j]), vals[:, j], name)
        var = IntervalPlan("twoway", p, {d: segments[d] for d in designs("twoway")}).variances(vals[:, j])
        ok = None not in (var.get("pairs"), var.get("samples"), var.get("both"))
        row["floored"] = (bool(2 * (var["pairs"] + var["samples"]) - var["both"] < var["pairs"])
                          if ok else None)
        out[name] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--truth-runs", type=int, default=600)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "results/floor_coverage.json"))
    ap.add_argument("--md", default=str(ROOT / "bench/results/floor_coverage.md"))
    a = ap.parse_args()
    t0 = time.time()
    kind = sample_kinds(N, FLIPPED)
    truth_args = [(N_MODELS, N, EFFECTS, kind, a.seed * 1_000_003 + 500_000 + s, ARM_RHO, FIGURES)
                  for s in range(a.truth_runs)]
    runs = [a.seed * 1_000_003 + r for r in range(a.runs)]
    truth, done = simulate_all(truth_row, truth_args, _run, runs, a.workers)
    labels = list(FIGURES) + [f"{x}_delta" for x in FIGURES]
    table = {}
    for j, name in enumerate(labels):
        t = truth[j]
        rows = [d[name] for d in done]
        fl = np.array([r["floored"] is True for r in rows])
        res = {"floor_share": float(fl.mean()), "truth": float(t)}
        for proc in PROCS:
            cov = np.array([r[proc][0] is not None and r[proc][0] <= t <= r[proc][1] for r in rows])
            has = np.array([r[proc][0] is not None for r in rows])
            res[proc] = {
                "all": float(cov[has].mean()) if has.any() else None,
                "floored": float(cov[has & fl].mean()) if (has & fl).any() else None,
                "not_floored": float(cov[has & ~fl].mean()) if (has & ~fl).any() else None,
                "runs": int(has.sum()), "runs_floored": int((has & fl).sum())}
        table[name] = res
    secs = time.time() - t0
    model = lscpu.model_name()
    cmd = (f"python bench/bench_floor_coverage.py --runs {a.runs} --truth-runs {a.truth_runs} "
           f"--seed {a.seed} --workers {a.workers}")
    Path(a.out).write_text(json.dumps({"command": cmd, "seconds": secs, "table": table}, indent=1))
    L = ["# Two-way interval coverage by whether its floor binds (bench/bench_floor_coverage.py)", "",
         f"`{cmd}` on {model}, {secs:.0f} s: {a.runs} simulated runs (16 models x 1 250 "
         f"samples, 10 % flipped, effects 0.6 / 0.3, arm_rho 0.3, {DRAWS} draws per design: "
         "the pipeline's), truth over the truth runs as in bench_coverage. *floored*: runs "
         "where 2 (V_p + V_s) - V_b < V_p, so twoway is pairs-only. Target 0.93-0.97.", "",
         "| figure | floor binds in | twoway: all / floored / not | jacksum: all / floored / not | both: all / floored / not |",
         "|---|---:|---|---|---|"]
    fmt = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    for name, r in table.items():
        cells = [f"{fmt(r[p]['all'])} / {fmt(r[p]['floored'])} / {fmt(r[p]['not_floored'])}" for p in PROCS]
        L.append(f"| {name} | {r['floor_share']:.2f} ({r['twoway']['runs_floored']}) | " + " | ".join(cells) + " |")
    Path(a.md).write_text("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    main()
