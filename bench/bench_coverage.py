"""Coverage of candidate 95 % interval procedures on simulated training runs with a known
truth (bnmem.attack.coverage): every figure a verdict uses, one arm and paired differences.

    python bench/bench_coverage.py [--runs 500] [--draws 100] [--workers 2]
"""
import argparse
import json
import time
from pathlib import Path

import bnmem  # noqa: F401  (pins the CPU kernels before numpy loads)
import lscpu  # noqa: E402  (bench/lscpu.py: the machine line)
from bnmem.attack.coverage import EXTRA_FIGURES, FIGURES, VLOW_FIGURES, coverage_table
from bnmem.attack.intervals import PROCEDURES


def _cpu() -> str:
    return lscpu.model_name()


def study_args(p: argparse.ArgumentParser) -> None:
    """The simulation-study options both coverage benchmarks take."""
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--n", type=int, default=1250)
    p.add_argument("--draws", type=int, default=100)
    p.add_argument("--truth-runs", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--flipped", type=float, default=0.1, help="share of flipped samples")
    p.add_argument("--ood", type=float, default=0.0,
                   help="share of OOD samples (the fz_ood figures need some; the default run: 0.01)")


def cell(row: dict) -> str:
    """A table cell: coverage [its Monte Carlo range] / mean width, and the misses on each
    side (nominal 0.025 each)."""
    if row["coverage"] is None:
        return "n/a"
    out = f"{row['coverage']:.3f}"
    if row.get("mc_range"):
        out += f" [{row['mc_range'][0]:.3f}, {row['mc_range'][1]:.3f}]"
    out += f" / {row['mean_width']:.4f}"
    if row.get("miss_below") is not None:
        out += f"; misses {row['miss_below']:.3f} below, {row['miss_above']:.3f} above"
    return out


def keep_timing(res: dict, out: Path) -> None:
    """A study re-tabulated from a complete store keeps the wall time and start of the call
    that ran it (the earlier output of the same command), and says so."""
    if not out.is_file():
        return
    prior = json.loads(out.read_text())
    if prior.get("command") == res["command"] and prior.get("seconds", 0) > res["seconds"]:
        res["seconds"], res["retabulated"] = prior["seconds"], True
        res["started"] = prior.get("started")  # None where that call did not record it


def sample_flags(args: argparse.Namespace) -> str:
    """The sample-composition flags of a study's command line (only where not the default)."""
    return ((f" --flipped {args.flipped}" if args.flipped != 0.1 else "")
            + (f" --ood {args.ood}" if args.ood else ""))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    study_args(p)
    p.add_argument("--procedures", default=",".join(PROCEDURES))
    p.add_argument("--out", default="results/coverage.json")
    p.add_argument("--md", default="bench/results/coverage.md")
    p.add_argument("--seed", type=int, default=0, help="fresh runs for a confirmation study")
    p.add_argument("--arm-rho", type=float, default=1.0,
                   help="model noise shared between the arms (real shadows: about 0.3, "
                        "bench/results/noise_structure.md); 1 shares all of it")
    p.add_argument("--n-models", type=int, default=16, help="shadow models (even)")
    p.add_argument("--store", default=None,
                   help="resumable record of finished units (.jsonl): a killed study resumes")
    p.add_argument("--extra", action="store_true",
                   help="also Feldman-Zhang on OOD samples (with --ood) and held-out accuracy")
    p.add_argument("--vlow", action="store_true",
                   help="also TPR at FPR 1e-4 (needs n-models/2 x n >= 100 000 negatives)")
    args = p.parse_args()
    if args.vlow and args.n_models // 2 * args.n < 100_000:
        p.error(f"--vlow: TPR at 1e-4 needs >= 100 000 negatives; --n-models {args.n_models} x "
                f"--n {args.n} give {args.n_models // 2 * args.n} (e.g. --n-models 64 --n 3200)")
    t0, started = time.perf_counter(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    procs = tuple(args.procedures.split(","))
    res = coverage_table(args.runs, n=args.n, draws=args.draws, truth_runs=args.truth_runs,
                         workers=args.workers, procedures=procs, seed=args.seed,
                         arm_rho=args.arm_rho, n_models=args.n_models,
                         figures=(VLOW_FIGURES if args.vlow else FIGURES)
                         + (EXTRA_FIGURES if args.extra else ()),
                         store=Path(args.store) if args.store else None,
                         flipped=args.flipped, ood=args.ood)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["started"] = started
    res["cpu"] = _cpu()
    res["command"] = (f"python bench/bench_coverage.py --runs {args.runs} --n {args.n} "
                      f"--draws {args.draws} --truth-runs {args.truth_runs} --workers {args.workers} "
                      f"--procedures {args.procedures} --seed {args.seed} --arm-rho {args.arm_rho}"
                      + (f" --n-models {args.n_models}" if args.n_models != 16 else "")
                      + (" --vlow" if args.vlow else "") + (" --extra" if args.extra else "")
                      + sample_flags(args)
                      + (f" --store {args.store}" if args.store else ""))
    if args.store:
        keep_timing(res, Path(args.out))
    Path(args.out).write_text(json.dumps(res, indent=2, sort_keys=True) + "\n")
    names = list(res["truth"])
    md = ["# Coverage of 95 % interval procedures (bench/bench_coverage.py)", "",
          f"{res['runs']} simulated runs of {res['n_models']} shadow models "
          f"({res['n_models'] // 2} complementary "
          f"pairs) x {res['n']} samples ({res['flipped']:.0%} flipped"
          + (f", {res['ood']:.0%} OOD" if res.get("ood") else "") + ": harder and memorized "
          "more), two paired arms with membership effects "
          f"{res['effects'][0]} / {res['effects'][1]} whose model noise correlates "
          f"{res['arm_rho']} (bnmem.attack.simulate); {res['draws']} "
          "resamples per procedure and run; the truth is the mean point estimate over "
          f"{res['truth_runs']} independent runs. Nominal coverage 0.95; target 0.93-0.97. "
          "Each cell: coverage [its 95 % Monte Carlo range over the runs] / mean width; "
          "misses: runs whose interval lies wholly below / above the truth (nominal 0.025 "
          "each).", "",
          "| figure | truth | " + " | ".join(f"{p}: coverage / width" for p in procs) + " |",
          "|---|---:|" + "---:|" * len(procs)]
    for name in names:
        cells = [cell(res["table"][proc][name]) for proc in procs]
        md.append(f"| {name} | {res['truth'][name]:.4f} | " + " | ".join(cells) + " |")
    md += ["", f"`{res['command']}`: {res['seconds']:.0f} s on {res['cpu']}"
           + (f", started {res['started']}" if res.get("started") else "")
           + (" (re-tabulated from the complete store)" if res.get("retabulated") else "")
           + f"; result also in `{args.out}`."]
    Path(args.md).write_text("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
