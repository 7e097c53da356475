"""Per-run variance components of TPR at FPR 1e-3 (and all-sample AUC, for reference), one
arm and the paired difference, on the coverage study's simulation (bnmem.attack.coverage):
so that interval rules for TPR at low FPR can be compared on one set of runs without
rerunning them, selected on one seed and confirmed on another (the TPR rows of every
committed coverage table over-cover: 0.972-0.984 with `both`).

Per run and figure the store keeps the point, each design's variance (pairs-only,
samples-only, joint, the pairs' jackknife; bnmem.attack.intervals.IntervalPlan.variances),
the 2.5 / 97.5 percentiles of the joint draws, and for the difference each arm's joint
variance and the arms' joint covariance (what a MOVER interval needs).

    python bench/bench_tpr_components.py --seed 22 --store results/tpr_components_seed22.jsonl

`--effects A B` lowers (or raises) the arms' membership effects, e.g. to a heavy-tailed
study's true TPR under normal noise (bench/results/tpr32_matched_plan.md); without it the
arguments, and so the store's fingerprint, are every earlier study's.

Analysis: bench/tpr_rules.py reads the store.
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

from bnmem.attack.coverage import draw_figures, sample_kinds, simulate_all, simulate_run, truth_row  # noqa: E402
from bnmem.attack.intervals import IntervalPlan  # noqa: E402
from bnmem.attack.resample import draw_designs  # noqa: E402

FIGS = ("auc_all", "tpr_low_all")
VLOW_FIGS = FIGS + ("tpr_vlow_all",)  # --vlow: TPR at 1e-4 too (needs >= 100 000 negatives)
DESIGNS = ("pairs", "samples", "both", "jackknife")
EFFECTS = (0.6, 0.3)  # the arms' membership effects of every study before tpr32_matched_plan.md


def _run(args: tuple) -> dict:
    n_models, n, effects, kind, draws, seed, arm_rho, *rest = args
    figs = rest[0] if rest else FIGS  # (without --vlow the arguments, and so the store's
    # fingerprint, are those of the seed-22/23 studies; without --noise-df those of seed 36's)
    noise_df = rest[1] if len(rest) > 1 else None
    phi, keep = simulate_run(n_models, n, effects, kind, seed, arm_rho, noise_df)
    p = n_models // 2
    counts, weights, seg = draw_designs(kind, p, draws, np.random.default_rng([seed, 0xC0F]),
                                        DESIGNS)
    f = draw_figures(phi, keep, kind, counts, weights, figs)  # [2, R, F]
    plan = IntervalPlan("both", p, seg)
    a, b = seg["both"]
    out = {}
    for j, name in enumerate(figs):
        for label, vals in (("a", f[0, :, j]), ("b", f[1, :, j]), ("d", f[0, :, j] - f[1, :, j])):
            var = plan.variances(vals)
            joint = vals[a:b][np.isfinite(vals[a:b])]
            rec = {"point": float(vals[0]), **{k: var[k] for k in DESIGNS},
                   "pct": [float(x) for x in np.percentile(joint, [2.5, 97.5])] if joint.size else None}
            if label == "d":
                xa, xb = f[0, a:b, j], f[1, a:b, j]
                ok = np.isfinite(xa) & np.isfinite(xb)
                rec["cov_both"] = float(np.cov(xa[ok], xb[ok])[0, 1] * p / (p - 1))
            out[f"{name}_{label}"] = np.array(
                [rec["point"], *(np.nan if rec[d] is None else rec[d] for d in DESIGNS),
                 *(rec["pct"] or [np.nan, np.nan]), rec.get("cov_both", np.nan)])
    return out  # {figure_arm: [point, V_pairs, V_samples, V_both, V_jackknife, p2.5, p97.5, cov]}


def _truth(args: tuple) -> np.ndarray:
    n_models, n, effects, kind, seed, arm_rho, *rest = args
    figs = rest[0] if rest else FIGS
    noise_df = rest[1] if len(rest) > 1 else None
    phi, keep = simulate_run(n_models, n, effects, kind, seed, arm_rho, noise_df)
    p = n_models // 2
    v = draw_figures(phi, keep, kind, np.ones((1, p), np.int64), np.ones((1, n)), figs)[:, 0]
    return np.concatenate([v[0], v[1], v[0] - v[1]])


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=500)
    ap.add_argument("--truth-runs", type=int, default=1000)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--n-models", type=int, default=16)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--flipped", type=float, default=0.05)
    ap.add_argument("--ood", type=float, default=0.01)
    ap.add_argument("--arm-rho", type=float, default=0.3)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--store", required=True)
    ap.add_argument("--vlow", action="store_true", help="TPR at FPR 1e-4 too (>= 100 000 "
                    "negatives: e.g. --n-models 64 --n 3200, the full-scale run's P = 32)")
    ap.add_argument("--noise-df", type=float, help="Student-t noise on this many df (> 2; "
                    "bnmem.attack.simulate.synthetic_phi): heavy-tailed scores, members' too")
    ap.add_argument("--effects", type=float, nargs=2, default=list(EFFECTS),
                    metavar=("A", "B"), help="the arms' membership effects (default "
                    f"{EFFECTS[0]} {EFFECTS[1]}): e.g. a lower TPR under normal noise")
    return ap


def study_args(a: argparse.Namespace) -> tuple[list, list, tuple]:
    """(truth units' arguments, run units' arguments, figures) of a parsed study command:
    what simulate_all runs and fingerprints (bnmem.attack.coverage._fingerprint), so that a
    plan can recompute the fingerprint its store must carry (bench/tpr_robust.py)."""
    kind = sample_kinds(a.n, a.flipped, a.ood)
    eff = tuple(a.effects)
    figs = VLOW_FIGS if a.vlow else FIGS
    extra = (figs,) if a.vlow else ()
    if a.noise_df is not None:
        extra = (figs, a.noise_df)
    truth_args = [(a.n_models, a.n, eff, kind, a.seed * 1_000_003 + 500_000 + s, a.arm_rho,
                   *extra) for s in range(a.truth_runs)]
    run_args = [(a.n_models, a.n, eff, kind, a.draws, a.seed * 1_000_003 + r, a.arm_rho, *extra)
                for r in range(a.runs)]
    return truth_args, run_args, figs


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = parser()
    a = ap.parse_args(argv)
    if not all(0 <= e for e in a.effects):
        ap.error(f"--effects {a.effects[0]} {a.effects[1]}: valid: two numbers >= 0")
    if a.noise_df is not None and not a.vlow:
        ap.error("--noise-df needs --vlow (the figures ride in the same argument slot)")
    return a


def main() -> None:
    a = parse()
    t0 = time.time()
    truth_args, run_args, figs = study_args(a)
    truth, done = simulate_all(_truth, truth_args, _run, run_args, a.workers, Path(a.store))
    names = [f"{f}_{s}" for s in ("a", "b", "d") for f in figs]
    meta = {"truth": dict(zip(names, map(float, truth))), "seconds": round(time.time() - t0, 1),
            "cpu": lscpu.model_name(), "command": "python " + " ".join(sys.argv),
            "runs": len(done)}
    Path(a.store).with_suffix(".meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
