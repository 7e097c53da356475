"""Coverage of the models+samples intervals on synthetic shadow outputs with a known truth
(bnmem.simulate.coverage): >= 200 simulated runs, 16 shadow models, two arms.

    python bench/bench_coverage.py [--runs 200] [--out results/coverage.json]
"""
import argparse
import json
import time
from pathlib import Path

import bnmem  # noqa: F401  (pins the CPU kernels before numpy loads)
from bnmem.simulate import coverage


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--n", type=int, default=400)
    p.add_argument("--draws", type=int, default=200)
    p.add_argument("--out", default="results/coverage.json")
    p.add_argument("--md", default="bench/results/coverage.md")
    args = p.parse_args()
    t0 = time.perf_counter()
    res = coverage(args.runs, n=args.n, draws=args.draws, truth_runs=400)
    res["seconds"] = round(time.perf_counter() - t0, 1)
    res["command"] = f"python bench/bench_coverage.py --runs {args.runs} --n {args.n} --draws {args.draws}"
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2, sort_keys=True)
        f.write("\n")
    md = ["# Coverage of the models+samples intervals (bench/bench_coverage.py)", "",
          f"{res['runs']} simulated runs of {res['n_models']} shadow models (complementary pairs) "
          f"x {res['n']} samples, two arms with different membership effects and model-to-model "
          f"variation (bnmem.simulate); {res['draws']} bootstrap draws per run; the truth is the "
          "mean point estimate over 400 independent runs.", "",
          "| figure | truth | coverage of the 95 % interval | mean width |", "|---|---:|---:|---:|",
          f"| one arm's AUC | {res['truth_auc']:.4f} | {res['coverage_auc']:.3f} | "
          f"{res['mean_width_auc']:.4f} |",
          f"| paired AUC difference | {res['truth_delta']:.4f} | {res['coverage_delta']:.3f} | "
          f"{res['mean_width_delta']:.4f} |", "",
          f"{res['seconds']:.0f} s; result also in `results/coverage.json`."]
    Path(args.md).write_text("\n".join(md) + "\n")
    print(json.dumps(res, indent=2, sort_keys=True))


if __name__ == "__main__":
    main()
