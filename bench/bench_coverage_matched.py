"""Coverage of the 95 % intervals of BN - none at matched held-out accuracy (annealed
endpoints interpolated at the common point and averaged over the overlap) on simulated
runs with a known truth (bnmem.attack.coverage_matched).

    python bench/bench_coverage_matched.py [--runs 500] [--draws 100] [--workers 2]
        [--n-models 16] [--out results/coverage_matched.json] [--md bench/results/coverage_matched.md]

--n-models sets the shadow models per arm and endpoint (pairs: half of it; the full-scale
run's 64, 32 pairs, whose TPR reads `both_sqrt`: bnmem.attack.intervals.rules_for).
"""
import argparse
import json
import time
from pathlib import Path

import bnmem  # noqa: F401  (pins the CPU kernels before numpy loads)
from bnmem.attack.coverage_matched import matched_coverage

from bench_coverage import _cpu, cell, sample_flags, study_args


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    study_args(p)
    p.add_argument("--procedures", default="mixed,both,jackknife,jacksum")
    p.add_argument("--seed", type=int, default=0, help="fresh runs for a confirmation study")
    p.add_argument("--n-models", type=int, default=16,
                   help="shadow models per arm and endpoint (an even count: complementary pairs)")
    p.add_argument("--arm-rho", type=float, default=None,
                   help="model noise shared between the arms (real shadows: about 0.3); "
                        "unset: the first design, arms share all of it")
    p.add_argument("--end-rho", type=float, default=None,
                   help="AR(1) correlation of one arm's noise between successive endpoints "
                        "(real shadows: 0.26-0.65, bench/results/noise_structure.md)")
    p.add_argument("--store", default=None,
                   help="resumable record of finished units (.jsonl): a killed study resumes")
    p.add_argument("--out", default="results/coverage_matched.json")
    p.add_argument("--md", default="bench/results/coverage_matched.md")
    args = p.parse_args()
    t0, started = time.perf_counter(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    procs = tuple(args.procedures.split(","))
    if args.n_models < 4 or args.n_models % 2:
        raise SystemExit(f"--n-models {args.n_models}: needs an even count >= 4 (complementary pairs)")
    res = matched_coverage(args.runs, n=args.n, n_models=args.n_models, draws=args.draws,
                           truth_runs=args.truth_runs,
                           workers=args.workers, procedures=procs, seed=args.seed,
                           arm_rho=args.arm_rho, end_rho=args.end_rho,
                           flipped=args.flipped, ood=args.ood,
                           store=Path(args.store) if args.store else None)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["started"] = started
    res["cpu"] = _cpu()
    res["command"] = (f"python bench/bench_coverage_matched.py --runs {args.runs} --n {args.n} "
                      f"--draws {args.draws} --truth-runs {args.truth_runs} "
                      f"--workers {args.workers} --procedures {args.procedures} --seed {args.seed}"
                      + (f" --n-models {args.n_models}" if args.n_models != 16 else "")
                      + (f" --arm-rho {args.arm_rho}" if args.arm_rho is not None else "")
                      + (f" --end-rho {args.end_rho}" if args.end_rho is not None else "")
                      + sample_flags(args) + (f" --store {args.store}" if args.store else ""))
    Path(args.out).write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    md = ["# Coverage at matched held-out accuracy (bench/bench_coverage_matched.py)", "",
          f"{res['runs']} simulated runs, each two paired arms x 3 annealed endpoints of "
          f"{res['n_models']} shadow models ({res['n_models'] // 2} complementary pairs) x {res['n']} samples "
          f"({res['flipped']:.0%} flipped" + (f", {res['ood']:.0%} OOD" if res.get("ood") else "")
          + f"), utility shifts {res['utility']} and membership "
          f"effects {res['effect']} per arm and endpoint (bnmem.attack.coverage_matched), "
          + ("arms sharing all model noise and endpoints' noise correlated 0.49"
             if res["arm_rho"] is None and res["end_rho"] is None else
             f"model noise correlated {res['arm_rho']} between arms and {res['end_rho']} "
             "between successive endpoints (AR(1))") + "; "
          f"{res['draws']} resamples per design and run; every draw through "
          "bnmem.attack.resample.arm_draw and bnmem.attack.frontier.draw_compare (criterion: held-out "
          "accuracy). The truth is the mean point estimate over "
          f"{res['truth_runs']} independent runs. Nominal 0.95; target 0.93-0.97. Each cell: "
          "coverage [its 95 % Monte Carlo range over the runs] / mean width; misses: runs "
          "whose interval lies wholly below / above the truth (nominal 0.025 each).", "",
          "| figure (a - b) | truth | " + " | ".join(f"{p}: coverage / width" for p in procs) + " |",
          "|---|---:|" + "---:|" * len(procs)]
    for name, t in res["truth"].items():
        cells = [cell(res["table"][proc][name]) + f" ({res['table'][proc][name]['runs']})"
                 for proc in procs]
        md.append(f"| {name} | {t:.4f} | " + " | ".join(cells) + " |")
    md += ["", "(runs) = simulated runs where the figure and its interval exist.", "",
           f"`{res['command']}`: {res['seconds']:.0f} s on {res['cpu']}, started {res['started']}; result also in "
           f"`{args.out}`."]
    Path(args.md).write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
