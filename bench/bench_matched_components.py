"""Per-run variance components of every read of BN - none across annealed endpoints, on the
matched-utility simulation (bnmem.attack.coverage_matched): at the common held-out accuracy
and matched fit, over the overlap, and at each equal budget. So that interval rules can be
compared per read on one set of runs without rerunning them, selected on one seed and
confirmed on another (bench/results/matched_rules_plan.md).

Per run and read the store keeps the point and each design's variance (pairs-only,
samples-only, joint, the pairs' jackknife; bnmem.attack.intervals.IntervalPlan.variances),
in bench/tpr_rules.py's record layout (its percentile and covariance fields left nan).
Every draw goes through the production path: bnmem.attack.resample.arm_draw per endpoint,
bnmem.attack.frontier.draw_compare per criterion (coverage_matched.endpoint_draws).

    python bench/bench_matched_components.py --seed 25 --store results/matched_components_seed25.jsonl

Analysis: bench/matched_rules.py reads the store.
"""
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

from bnmem.attack.coverage import sample_kinds, simulate_all  # noqa: E402
from bnmem.attack.coverage_matched import COMPARED, FIGURES, endpoint_draws, simulate  # noqa: E402
from bnmem.attack.frontier import draw_compare  # noqa: E402
from bnmem.attack.intervals import IntervalPlan  # noqa: E402
from bnmem.attack.resample import draw_designs  # noqa: E402

DESIGNS = ("pairs", "samples", "both", "jackknife")
EQUAL = ("auc_all", "fz_flipped", "fz_ood", "tpr_low_all")  # read at each equal budget
K_END = 3


def names() -> list[str]:
    """Every read: coverage_matched.FIGURES (matched utility and fit), then eq<k>_<figure>
    (a - b at equal budget k, 0-based)."""
    return [f for f, _, _ in FIGURES] + [f"eq{k}_{f}" for k in range(K_END) for f in EQUAL]


def rows(phi, keep, kind, counts, weights) -> np.ndarray:
    """[draws, reads]: a - b of every read, one row per draw."""
    out = []
    criteria = tuple(dict.fromkeys(c for _, c, _ in FIGURES))
    for ea, eb in zip(*endpoint_draws(phi, keep, kind, counts, weights)):
        r = {c: draw_compare(ea, eb, c, COMPARED) for c in criteria}
        out.append([r[c][key] for _, c, key in FIGURES]
                   + [ea[k][f] - eb[k][f] for k in range(K_END) for f in EQUAL])
    return np.array(out, dtype=np.float64)


def _run(args: tuple) -> dict:
    n_models, n, kind, draws, seed, rho = args
    phi, keep = simulate(n_models, n, kind, seed, **rho)
    p = n_models // 2
    counts, weights, seg = draw_designs(kind, p, draws, np.random.default_rng([seed, 0xC0F]),
                                        DESIGNS)
    vals = rows(phi, keep, kind, counts, weights)
    plan = IntervalPlan("both", p, seg)
    out = {}
    for j, name in enumerate(names()):
        var = plan.variances(vals[:, j])
        out[name] = np.array([vals[0, j], *(np.nan if var[d] is None else var[d] for d in DESIGNS),
                              np.nan, np.nan, np.nan])
    return out  # {read: [point, V_pairs, V_samples, V_both, V_jackknife, nan, nan, nan]}


def _truth(args: tuple) -> np.ndarray:
    n_models, n, kind, seed, rho = args
    phi, keep = simulate(n_models, n, kind, seed, **rho)
    return rows(phi, keep, kind, np.ones((1, n_models // 2), np.int64), np.ones((1, n)))[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--truth-runs", type=int, default=1000)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--n-models", type=int, default=16)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--flipped", type=float, default=0.05)
    ap.add_argument("--ood", type=float, default=0.01)
    ap.add_argument("--arm-rho", type=float, default=0.3)
    ap.add_argument("--end-rho", type=float, default=0.3)
    ap.add_argument("--model-sd", type=float, default=0.3,
                    help="SD of each model's shift and strength (coverage_matched.simulate)")
    ap.add_argument("--sample-rho", type=float, default=None,
                    help="arms' correlation of each sample's membership effect (None: shared)")
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--store", required=True)
    a = ap.parse_args()
    t0 = time.time()
    kind = sample_kinds(a.n, a.flipped, a.ood)
    rho = {"arm_rho": a.arm_rho, "end_rho": a.end_rho, "model_sd": a.model_sd,
           "sample_rho": a.sample_rho}
    truth_args = [(a.n_models, a.n, kind, a.seed * 1_000_003 + 500_000 + s, rho)
                  for s in range(a.truth_runs)]
    run_args = [(a.n_models, a.n, kind, a.draws, a.seed * 1_000_003 + r, rho)
                for r in range(a.runs)]
    truth, done = simulate_all(_truth, truth_args, _run, run_args, a.workers, Path(a.store))
    meta = {"truth": dict(zip(names(), map(float, truth))), "seconds": round(time.time() - t0, 1),
            "cpu": lscpu.model_name(), "command": "python " + " ".join(sys.argv),
            "runs": len(done)}
    Path(a.store).with_suffix(".meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
