"""Coverage of the matched-utility difference: BN - none at matched held-out accuracy,
interpolated between annealed endpoints (bnmem.attack.frontier), on simulated runs with a known
truth (bench/bench_coverage_matched.py writes the table; a small seeded version is a test).

A run is two paired arms x K endpoints (complete training runs of increasing budget) of
16 shadow models (8 complementary pairs) x N samples. Endpoint k of arm j adds a utility
shift u_jk to every sample's logit-scaled confidence (members and non-members alike: the
model gets better, so its held-out accuracy rises) and a membership effect e_jk on its
members (bnmem.attack.simulate's form: per-sample d_i, per-model strength; flipped samples hard
and memorized 3x more). Endpoints of one run share samples, keep masks and model seeds,
with noise correlated 0.7 between endpoints (separate training runs from the same seeds).
The truth of a figure is its expected point estimate over fresh runs. Every draw goes
through the production path: bnmem.attack.resample.arm_draw per endpoint, then
bnmem.attack.frontier.draw_compare at the common held-out accuracy and over the overlap, and the
interval from bnmem.attack.intervals.IntervalPlan, exactly as the attack stage reports it.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bnmem.attack.lira import PairSignals
from bnmem.attack.coverage import sample_kinds, simulate_all, tabulate
from bnmem.attack.frontier import draw_compare
from bnmem.attack.intervals import IntervalPlan, simulated_designs
from bnmem.core.keep import keep_matrix
from bnmem.attack.resample import arm_draw, draw_designs

VARIANT = "lira_online_fixed"
# (figure, criterion, key of draw_compare's row): the primary criterion (held-out accuracy)
# at the common point and over the overlap, and matched fit, which the verdict checks against
# it; fz_ood figures need OOD samples (`ood` > 0), nan otherwise
FIGURES = (("auc_matched", "heldout", "auc_all"), ("auc_overlap", "heldout", "auc_all_overlap"),
           ("fz_flipped_matched", "heldout", "fz_flipped"),
           ("tpr_low_matched", "heldout", "tpr_low_all"),
           ("fz_flipped_overlap", "heldout", "fz_flipped_overlap"),
           ("fz_ood_matched", "heldout", "fz_ood"),
           ("auc_fit", "fit", "auc_all"), ("auc_fit_overlap", "fit", "auc_all_overlap"),
           ("fz_flipped_fit", "fit", "fz_flipped"), ("fz_ood_fit", "fit", "fz_ood"))
COMPARED = ("auc_all", "fz_flipped", "fz_ood", "tpr_low_all")  # the figures draw_compare reads
# the figure key and read each FIGURES entry's interval is made for, as
# bnmem.attack.frontier.compare tags it (bnmem.attack.intervals.mixed_procedure)
PLAN_NAME = {name: (f"{key.removesuffix('_overlap')}/{crit}@overlap" if key.endswith("_overlap")
                    else f"{key}/{crit}@common") for name, crit, key in FIGURES}
# arm a leaks more per endpoint but also gains utility faster; b is the slower learner
UTILITY = ((-1.2, -0.5, 0.0), (-1.4, -0.8, -0.3))
EFFECT = ((0.25, 0.45, 0.65), (0.2, 0.35, 0.45))
RHO = 0.7


def simulate(n_models: int, n: int, kind: np.ndarray, seed: int,
             utility=UTILITY, effect=EFFECT, arm_rho: float | None = None,
             end_rho: float | None = None, model_sd: float = 0.3,
             sample_rho: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(phi [arms, K, m, N, 1] float64, keep [m, N]) of one run (module docstring).

    arm_rho None, end_rho None: the first design (both arms share all model noise; the
    endpoints' noise correlates RHO^2 = 0.49). Otherwise arm j's models get their own noise,
    correlated `arm_rho` with the other arm's (per-sample noise, shift, strength), and each
    endpoint's noise follows the previous one's with correlation `end_rho` (AR(1) over the
    budgets), as measured on real shadows (bench/results/noise_structure.md).

    model_sd: the SD of each model's shift and membership strength (0.3 by default); lower
    values leave less of a figure's variance to the models (pairs) and more to the samples:
    the study at the real run's V_s / V_p (bench/results/real_ratio_plan.md).
    sample_rho (with arm_rho / end_rho): None shares each sample's membership effect d_i
    between the arms; otherwise arm j's is |sqrt(rho) z_i + sqrt(1 - rho) z_ij| (z_i the
    shared draw d_i = |z_i| came from, z_ij the arm's own): the arms memorize partly
    different samples, which adds variance of the samples' own to a difference a - b."""
    rng = np.random.default_rng([seed, 0xF207])
    keep = keep_matrix(n_models, n, seed)
    loc, spread = rng.normal(1.0, 2, n), rng.uniform(0.5, 1.5, n)
    z = rng.normal(0, 1, n)
    d = np.abs(z)
    hard = np.asarray(kind) >= 1  # flipped and OOD samples
    loc, d = np.where(hard, loc - 3.0, loc), np.where(hard, 3.0 * d, d)
    strength = rng.normal(1, model_sd, (n_models, 1))
    shift = rng.normal(0, model_sd, (n_models, 1))
    common = rng.normal(size=(n_models, n))
    k_end, n_arms = len(utility[0]), len(utility)
    own = rng.normal(size=(k_end, n_models, n))
    phi = np.empty((n_arms, k_end, n_models, n, 1))
    if arm_rho is None and end_rho is None:
        for k in range(k_end):
            noise = RHO * common + np.sqrt(1 - RHO ** 2) * own[k]
            base = loc[None] + shift + spread[None] * noise
            for j in range(n_arms):
                phi[j, k, ..., 0] = base + utility[j][k] + effect[j][k] * strength * d * keep
        return phi, keep
    a_rho = 1.0 if arm_rho is None else arm_rho
    e_rho = RHO ** 2 if end_rho is None else end_rho
    la, ca, ce = np.sqrt(a_rho), np.sqrt(1 - a_rho), np.sqrt(1 - e_rho ** 2)  # la, ca: loadings
    arm_rng = [np.random.default_rng([seed, 0xF208, j]) for j in range(n_arms)]
    st = [1 + la * (strength - 1) + ca * r.normal(0, model_sd, strength.shape) for r in arm_rng]
    sh = [la * shift + ca * r.normal(0, model_sd, shift.shape) for r in arm_rng]
    fresh = [[la * own[k] + ca * r.normal(size=own[k].shape) for k in range(k_end)]
             for r in arm_rng]  # [arm][endpoint] innovations, correlated a_rho across arms
    if sample_rho is None:
        d_arm = [d] * n_arms
    else:  # each arm's own part of every sample's membership effect (its own stream)
        own_z = [np.random.default_rng([seed, 0xF20A, j]).normal(0, 1, n) for j in range(n_arms)]
        d_arm = [np.abs(np.sqrt(sample_rho) * z + np.sqrt(1 - sample_rho) * oz) for oz in own_z]
        d_arm = [np.where(hard, 3.0 * dj, dj) for dj in d_arm]
    for j in range(n_arms):
        noise = fresh[j][0]
        for k in range(k_end):
            if k:
                noise = e_rho * noise + ce * fresh[j][k]
            phi[j, k, ..., 0] = (loc[None] + sh[j] + spread[None] * noise + utility[j][k]
                                 + effect[j][k] * st[j] * d_arm[j] * keep)
    return phi, keep


def endpoint_draws(phi: np.ndarray, keep: np.ndarray, kind: np.ndarray, counts: np.ndarray,
                   weights: np.ndarray) -> list[list[list[dict]]]:
    """Every draw's figures per arm and endpoint through the production path (arm_draw):
    [arm][draw][endpoint]."""
    ids = np.arange(keep.shape[0])
    ends = []
    for arm in phi:
        per_end = []
        for p in arm:
            data = {"phi": p, "keep": keep, "correct": p[..., 0] > 0, "model_ids": ids}
            ps, cache = PairSignals.build(p, keep, ids), {}
            per_end.append([arm_draw(data, ps, [], c, w, kind, VARIANT, True, cache)
                            for c, w in zip(counts, weights)])
        ends.append([[per_end[k][r] for k in range(len(per_end))] for r in range(len(counts))])
    return ends


def _rows(phi: np.ndarray, keep: np.ndarray, kind: np.ndarray, counts: np.ndarray,
          weights: np.ndarray, arms: bool = False):
    """[draws, figures]: a - b of every FIGURES entry, one row per draw; with `arms`, also
    each arm's own value there ([2, draws, figures]: draw_compare's "<key>_arms")."""
    out, sides = [], []
    criteria = tuple(dict.fromkeys(c for _, c, _ in FIGURES))
    for ea, eb in zip(*endpoint_draws(phi, keep, kind, counts, weights)):
        r = {c: draw_compare(ea, eb, c, COMPARED) for c in criteria}
        out.append([r[c][key] for _, c, key in FIGURES])
        sides.append([r[c][f"{key}_arms"] for _, c, key in FIGURES])
    vals = np.array(out, dtype=np.float64)
    return (vals, np.moveaxis(np.array(sides, dtype=np.float64), -1, 0)) if arms else vals


def _truth_row(args: tuple) -> np.ndarray:
    n_models, n, kind, seed, rho = args
    phi, keep = simulate(n_models, n, kind, seed, **rho)
    p = n_models // 2
    return _rows(phi, keep, kind, np.ones((1, p), np.int64), np.ones((1, n)))[0]


def _run(args: tuple) -> dict[str, np.ndarray]:
    """One simulated run: {procedure: [2, F] (lo, hi)}."""
    n_models, n, kind, draws, seed, procedures, rho = args
    phi, keep = simulate(n_models, n, kind, seed, **rho)
    p = n_models // 2
    names = tuple(dict.fromkeys(d for proc in procedures for d in simulated_designs(proc)))
    counts, weights, segments = draw_designs(kind, p, draws, np.random.default_rng([seed, 0xC0F]),
                                             names)
    vals, sides = _rows(phi, keep, kind, counts, weights, arms=True)
    out = {}
    for proc in procedures:
        # simulated logits are not the real shadows' recipe: `mixed` reads the fallbacks
        plan = IntervalPlan(proc, p, {d: segments[d] for d in simulated_designs(proc)}, real_shadow=False)
        ci = [plan.ci(float(vals[0, j]), vals[:, j], PLAN_NAME[f], arms=(sides[0][:, j], sides[1][:, j]))
              for j, (f, _, _) in enumerate(FIGURES)]
        out[proc] = np.array([[np.nan if c[0] is None else c[0] for c in ci],
                              [np.nan if c[1] is None else c[1] for c in ci]])
    return out


def matched_coverage(runs: int, n: int = 800, n_models: int = 16, draws: int = 40,
                     truth_runs: int = 400, flipped: float = 0.1, seed: int = 0,
                     workers: int = 1, procedures: tuple[str, ...] = ("mixed",),
                     arm_rho: float | None = None, end_rho: float | None = None,
                     ood: float = 0.0, store: Path | None = None) -> dict:
    """Coverage and mean width of each procedure for every FIGURES entry; runs and truth
    runs use disjoint seeds; arm_rho / end_rho as in `simulate`; `ood`: the share of OOD
    samples (hard and memorized like flipped ones), which the fz_ood figures need; `store`:
    a resumable record of the finished units (coverage.simulate_all)."""
    rho = {"arm_rho": arm_rho, "end_rho": end_rho}
    kind = sample_kinds(n, flipped, ood)
    truth_args = [(n_models, n, kind, seed * 1_000_003 + 500_000 + s, rho)
                  for s in range(truth_runs)]
    run_args = [(n_models, n, kind, draws, seed * 1_000_003 + r, procedures, rho)
                for r in range(runs)]
    truth, done = simulate_all(_truth_row, truth_args, _run, run_args, workers, store)
    names = [f for f, _, _ in FIGURES]
    table = tabulate(done, truth, names, procedures)
    return {"procedures": list(procedures), "runs": runs, "n": n, "n_models": n_models,
            "draws": draws, "flipped": flipped, "ood": ood, "truth_runs": truth_runs,
            "utility": [list(u) for u in UTILITY], "effect": [list(e) for e in EFFECT],
            "arm_rho": arm_rho, "end_rho": end_rho,
            "truth": {name: float(t) for name, t in zip(names, truth)}, "table": table}
