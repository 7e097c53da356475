"""Which interval is calibrated: coverage of candidate procedures on simulated training runs
where the truth is known (bench/bench_coverage.py writes the table; a small seeded version
is a test).

A run is 16 shadow models (8 complementary pairs) x N samples of two paired arms with
different membership effects (bnmem.simulate.synthetic_phi, flipped samples memorized
more). The truth of a figure is its expected point estimate over fresh runs (new samples,
models and noise). Every procedure turns one run's resamples into point +- 1.96 sd:

- `both`: pairs and samples drawn together (bnmem.resample.draw_plan), sd x sqrt(P/(P-1))
  (the procedure before this study);
- `pairs`: pairs drawn, samples fixed, sd x sqrt(P/(P-1));
- `sum`: sqrt(V_p + V_s), pairs-only and samples-only variances added;
- `twoway`: the pigeonhole correction (Owen 2007): with V_p, V_s, V_b the variances of
  pairs-only, samples-only and both, sqrt(2 (V_p + V_s) - V_b) (floored at V_p), which
  removes the interaction term that drawing both counts twice;
- `jackknife`: leave one pair out (P estimates), (P-1)/P sum of squared deviations.
"""
from __future__ import annotations

import multiprocessing as mp

import numpy as np

from bnmem.attack import PairSignals
from bnmem.resample import arm_draw
from bnmem.roc import bootstrap_weights
from bnmem.simulate import synthetic_phi

PROCEDURES = ("both", "pairs", "sum", "twoway", "jackknife")
FIGURES = ("auc_all", "fz_flipped", "tpr_low_all")  # one arm; each also as arm0 - arm1
VARIANT = "lira_online_fixed"
Z = 1.96


def _kind(n: int, flipped: float) -> np.ndarray:
    kind = np.zeros(n, np.int8)
    kind[: int(round(flipped * n))] = 1
    return kind


def _figures(phi: np.ndarray, keep: np.ndarray, kind: np.ndarray, counts: np.ndarray,
             weights: np.ndarray) -> np.ndarray:
    """[arms, draws, figures] of `FIGURES` for each draw (counts [D, P], weights [D, N])."""
    ids = np.arange(keep.shape[0])
    out = []
    for p in phi:
        data = {"phi": p, "keep": keep, "correct": p[..., 0] > 0, "model_ids": ids}
        ps = PairSignals.build(p, keep, ids)
        rows = [arm_draw(data, ps, [], c, w, kind, VARIANT, True) for c, w in zip(counts, weights)]
        out.append([[r[f] for f in FIGURES] for r in rows])
    return np.array(out, dtype=np.float64)


def _simulate(n_models: int, n: int, effects: tuple[float, float], kind: np.ndarray,
              seed: int) -> tuple[np.ndarray, np.ndarray]:
    return synthetic_phi(n_models, n, 1, 0.0, seed, arm_effects=effects, kind=kind)


def _truth_row(args: tuple) -> np.ndarray:
    n_models, n, effects, kind, seed = args
    phi, keep = _simulate(n_models, n, effects, kind, seed)
    p = n_models // 2
    v = _figures(phi, keep, kind, np.ones((1, p), np.int64), np.ones((1, n)))[:, 0]
    return np.concatenate([v[0], v[0] - v[1]])


def _run(args: tuple) -> dict[str, np.ndarray]:
    """One simulated run: {procedure: [2, n_figures x 2] (lo, hi)} and the point."""
    n_models, n, effects, kind, draws, seed = args
    phi, keep = _simulate(n_models, n, effects, kind, seed)
    p = n_models // 2
    rng = np.random.default_rng([seed, 0xC0F])
    ones_c, ones_w = np.ones((draws, p), np.int64), np.ones((draws, n))
    mult = rng.multinomial(p, np.full(p, 1.0 / p), size=draws)
    boot = bootstrap_weights(kind, draws, rng)
    jack = np.ones((p, p), np.int64) - np.eye(p, dtype=np.int64)
    design = {"point": (np.ones((1, p), np.int64), np.ones((1, n))), "pairs": (mult, ones_w),
              "samples": (ones_c, boot), "both": (mult, boot), "jackknife": (jack, np.ones((p, n)))}
    vals = {}
    for name, (c, w) in design.items():
        f = _figures(phi, keep, kind, c, w)  # [2, D, F]
        vals[name] = np.concatenate([f[0], f[0] - f[1]], axis=1)  # [D, 2F]
    point = vals["point"][0]
    corr = p / (p - 1)

    def var(x: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return np.nanvar(x, axis=0, ddof=1)

    v_p, v_s, v_b = var(vals["pairs"]) * corr, var(vals["samples"]), var(vals["both"]) * corr
    jk = vals["jackknife"]
    v_j = (p - 1) / p * np.nansum((jk - np.nanmean(jk, axis=0)) ** 2, axis=0)
    sds = {"both": np.sqrt(v_b), "pairs": np.sqrt(v_p), "sum": np.sqrt(v_p + v_s),
           "twoway": np.sqrt(np.maximum(2 * (v_p + v_s) - v_b, v_p)), "jackknife": np.sqrt(v_j)}
    return {"point": point, **{k: np.stack([point - Z * sd, point + Z * sd]) for k, sd in sds.items()}}


def coverage_table(runs: int, n: int = 1250, n_models: int = 16, draws: int = 100,
                   effects: tuple[float, float] = (0.6, 0.3), truth_runs: int = 400,
                   flipped: float = 0.1, seed: int = 0, workers: int = 1) -> dict:
    """Coverage and mean width of every procedure for every figure (see the module
    docstring); runs and truth runs use disjoint seeds."""
    kind = _kind(n, flipped)
    names = list(FIGURES) + [f"{f}_delta" for f in FIGURES]
    truth_args = [(n_models, n, effects, kind, seed * 1_000_003 + 500_000 + s)
                  for s in range(truth_runs)]
    run_args = [(n_models, n, effects, kind, draws, seed * 1_000_003 + r) for r in range(runs)]
    if workers > 1 and "fork" in mp.get_all_start_methods():
        with mp.get_context("fork").Pool(workers) as pool:
            truth_rows = pool.map(_truth_row, truth_args, chunksize=8)
            done = pool.map(_run, run_args, chunksize=4)
    else:
        truth_rows = [_truth_row(a) for a in truth_args]
        done = [_run(a) for a in run_args]
    truth = np.nanmean(np.array(truth_rows), axis=0)
    table = {}
    for proc in PROCEDURES:
        lo = np.array([d[proc][0] for d in done])
        hi = np.array([d[proc][1] for d in done])
        ok = np.isfinite(lo) & np.isfinite(hi)
        cover = (lo <= truth) & (truth <= hi)
        table[proc] = {name: {"coverage": float(cover[ok[:, i], i].mean()) if ok[:, i].any() else None,
                              "mean_width": float((hi - lo)[ok[:, i], i].mean()) if ok[:, i].any() else None,
                              "runs": int(ok[:, i].sum())}
                       for i, name in enumerate(names)}
    return {"runs": runs, "n": n, "n_models": n_models, "draws": draws, "effects": list(effects),
            "flipped": flipped, "truth_runs": truth_runs,
            "truth": {name: float(t) for name, t in zip(names, truth)}, "table": table}
