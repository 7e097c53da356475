"""Why the intervals over-cover at matched held-out accuracy: per simulated run (the
matched-coverage simulation, bnmem.attack.coverage_matched), the point estimate of BN -
none and each variance component the interval procedures combine (pairs' jackknife,
samples-only bootstrap, pairs-only bootstrap), for the same difference read three ways:
at the data-dependent common point (production), at a fixed held-out accuracy (no
data-dependent level), and at the top equal budget (no interpolation). The true SD is the
SD of the point estimates over the runs; a component's row is the root of its mean
variance over the runs.

    python bench/bench_coverage_components.py [--runs 120] [--level 0.59] [--draws 60]
"""
import argparse
import multiprocessing as mp
import time

import bnmem  # noqa: F401  (pins the CPU kernels before numpy loads)
import numpy as np

from bnmem.attack.coverage_matched import endpoint_draws, simulate
from bnmem.attack.frontier import _series, draw_compare, pareto_grid
from bnmem.attack.resample import draw_designs

from bench_coverage import _cpu

N, M = 1250, 16
FIGS = ("auc_all", "fz_flipped")
READS = ("common point", "fixed level", "equal budget")
COMPONENTS = ("jackknife", "samples", "pairs")


def one(args: tuple) -> dict:
    seed, level, draws = args
    kind = np.zeros(N, np.int8)
    kind[: N // 10] = 1
    phi, keep = simulate(M, N, kind, seed)
    p = M // 2
    counts, weights, seg = draw_designs(kind, p, draws, np.random.default_rng([seed, 0xC0F]),
                                        COMPONENTS)
    rows = []
    for ea, eb in zip(*endpoint_draws(phi, keep, kind, counts, weights)):
        r = draw_compare(ea, eb, "heldout", FIGS)
        ua, ub = _series(ea, "out_acc_clean", 1.0), _series(eb, "out_acc_clean", 1.0)
        fixed = [pareto_grid(ua, _series(ea, f, None), [level])[0]
                 - pareto_grid(ub, _series(eb, f, None), [level])[0] for f in FIGS]
        rows.append([*(r[f] for f in FIGS), *fixed, *(ea[-1][f] - eb[-1][f] for f in FIGS),
                     r["level"]])
    v = np.array(rows)
    out = {"point": v[0]}
    for name, (a, b) in seg.items():
        s = v[a:b]
        if name == "jackknife":
            out[name] = (p - 1) / p * ((s - s.mean(0)) ** 2).sum(0)
        else:
            out[name] = np.nanvar(s, 0, ddof=1) * (p / (p - 1) if name == "pairs" else 1.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=120)
    ap.add_argument("--level", type=float, default=0.59, help="the fixed held-out accuracy "
                    "(below the common point's mean, 0.62, so every run reaches it)")
    ap.add_argument("--draws", type=int, default=60)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--md", default="bench/results/coverage_components.md")
    args = ap.parse_args()
    t0 = time.perf_counter()
    jobs = [(10_000 + r, args.level, args.draws) for r in range(args.runs)]
    with mp.get_context("fork").Pool(args.workers) as pool:
        res = pool.map(one, jobs)
    pts = np.array([r["point"] for r in res])
    lines = ["# Variance components at matched held-out accuracy (bench/bench_coverage_components.py)",
             "",
             f"{args.runs} simulated runs of the matched-coverage simulation (bnmem.attack.coverage_matched: "
             f"two paired arms x 3 annealed endpoints, {M} shadow models, {N} samples, 10 % flipped), "
             f"{args.draws} draws per design; BN - none of LiRA AUC and Feldman-Zhang (flipped). "
             "True SD: of the point estimates over the runs. Components: root mean variance. "
             f"Common point: mean held-out accuracy {pts[:, -1].mean():.4f} (SD over runs "
             f"{pts[:, -1].std(ddof=1):.4f}); fixed level {args.level}.", "",
             "| figure | read at | true SD | jackknife | samples | pairs | jackknife + samples (mixed) | mixed / true |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for j in range(len(READS) * len(FIGS)):
        read, fig = READS[j // len(FIGS)], FIGS[j % len(FIGS)]
        true = float(np.nanstd(pts[:, j], ddof=1))
        comp = {k: float(np.sqrt(np.nanmean([r[k][j] for r in res]))) for k in COMPONENTS}
        mixed = float(np.hypot(comp["jackknife"], comp["samples"]))
        lines.append(f"| {fig} | {read} | {true:.5f} | {comp['jackknife']:.5f} | "
                     f"{comp['samples']:.5f} | {comp['pairs']:.5f} | {mixed:.5f} | {mixed / true:.2f} |")
    lines += ["", f"`python bench/bench_coverage_components.py --runs {args.runs} --level {args.level} "
              f"--draws {args.draws} --workers {args.workers}`: {time.perf_counter() - t0:.0f} s on {_cpu()}."]
    open(args.md, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
