"""Which interval is calibrated: coverage of candidate procedures on simulated training runs
where the truth is known (bench/bench_coverage.py writes the table; a small seeded version
is a test).

A run is 16 shadow models (8 complementary pairs) x N samples of two paired arms with
different membership effects (bnmem.attack.simulate.synthetic_phi, flipped samples memorized
more). The truth of a figure is its expected point estimate over fresh runs (new samples,
models and noise). Every procedure is the production one, `bnmem.attack.intervals.IntervalPlan`
over the rows `bnmem.attack.resample.draw_designs` lays out (pairs-only, samples-only and joint
bootstraps, the pairs' jackknife), so the table measures exactly what the attack stage
reports.
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import warnings
from pathlib import Path

import numpy as np

from bnmem.attack.lira import PairSignals
from bnmem.attack.intervals import PROCEDURES, IntervalPlan, simulated_designs
from bnmem.attack.resample import arm_draw, draw_designs
from bnmem.attack.simulate import synthetic_phi
from bnmem.core.kinds import SUBSETS

FIGURES = ("auc_all", "fz_flipped", "tpr_low_all")  # one arm; each also as arm0 - arm1
# TPR at FPR 1e-4 exists only with >= 100 000 negatives (e.g. 64 models x 3 200 samples,
# the full-scale run's shape): a study of it asks for it with figures=VLOW_FIGURES
VLOW_FIGURES = FIGURES + ("tpr_vlow_all",)
# the other figures a verdict reads at equal epochs: memorization of the OOD samples (needs
# `ood` > 0) and held-out accuracy (the regularizer's accuracy claim); each also as a - b
EXTRA_FIGURES = ("fz_ood", "out_acc_clean")
VARIANT = "lira_online_fixed"


def sample_kinds(n: int, flipped: float, ood: float = 0.0) -> np.ndarray:
    """[n] sample kinds: the first round(flipped n) flipped (1), the next round(ood n) OOD
    (2), the rest clean (0)."""
    kind = np.zeros(n, np.int8)
    n_flip, n_ood = int(round(flipped * n)), int(round(ood * n))
    kind[:n_flip] = 1
    kind[n_flip:n_flip + n_ood] = 2
    return kind


def draw_figures(phi: np.ndarray, keep: np.ndarray, kind: np.ndarray, counts: np.ndarray,
             weights: np.ndarray, figures: tuple[str, ...] = FIGURES) -> np.ndarray:
    """[arms, draws, figures] of `figures` for each draw (counts [D, P], weights [D, N]);
    nan where a draw lacks a figure (TPR unsupported). The attack stage's fast paths, which
    leave every figure as it is to the bit (test): the unresampled pairs' scores and
    rankings are kept across draws (the point and every samples-only draw share them), and
    the per-subset AUCs are computed only when a figure asks for one."""
    ids = np.arange(keep.shape[0])
    subset_aucs = {f"auc_{s}" for s in SUBSETS if SUBSETS[s] is not None}
    level = "full" if subset_aucs & set(figures) else "lean"
    out = []
    for p in phi:
        data = {"phi": p, "keep": keep, "correct": p[..., 0] > 0, "model_ids": ids}
        ps = PairSignals.build(p, keep, ids)
        cache: dict = {}
        rows = [arm_draw(data, ps, [], c, w, kind, VARIANT, True, cache, level)
                for c, w in zip(counts, weights)]
        # TPR at 1e-4 is absent where unsupported; any other figure must be there
        out.append([[r.get(f, np.nan) if f == "tpr_vlow_all" else r[f] for f in figures]
                    for r in rows])
    return np.array(out, dtype=np.float64)


def simulate_run(n_models: int, n: int, effects: tuple[float, float], kind: np.ndarray,
              seed: int, arm_rho: float = 1.0, noise_df: float | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    return synthetic_phi(n_models, n, 1, 0.0, seed, arm_effects=effects, kind=kind,
                         arm_rho=arm_rho, noise_df=noise_df)


def truth_row(args: tuple) -> np.ndarray:
    n_models, n, effects, kind, seed, arm_rho, figures = args
    phi, keep = simulate_run(n_models, n, effects, kind, seed, arm_rho)
    p = n_models // 2
    v = draw_figures(phi, keep, kind, np.ones((1, p), np.int64), np.ones((1, n)), figures)[:, 0]
    return np.concatenate([v[0], v[0] - v[1]])


def _run(args: tuple) -> dict[str, np.ndarray]:
    """One simulated run: {procedure: [2, 2F] (lo, hi)} for every procedure asked."""
    n_models, n, effects, kind, draws, seed, procedures, arm_rho, figures = args
    phi, keep = simulate_run(n_models, n, effects, kind, seed, arm_rho)
    p = n_models // 2
    names = tuple(dict.fromkeys(d for proc in procedures for d in simulated_designs(proc)))
    counts, weights, segments = draw_designs(kind, p, draws, np.random.default_rng([seed, 0xC0F]),
                                             names)
    f = draw_figures(phi, keep, kind, counts, weights, figures)  # [2, R, F]
    vals = np.concatenate([f[0], f[0] - f[1]], axis=1)  # [R, 2F], row 0 the point
    out = {}
    for proc in procedures:
        # simulated logits are not the real shadows' recipe: `mixed` reads the fallbacks
        plan = IntervalPlan(proc, p, {d: segments[d] for d in simulated_designs(proc)}, real_shadow=False)
        # one arm's figures, then the paired differences, read as the attack stage reads a - b
        # at equal epochs (bnmem.attack.intervals.MIXED_RULES)
        reads = list(figures) + [f"{f}@equal" for f in figures]
        # a difference's arms (a rule that builds it from them reads them: both_sqrt)
        arms = [None] * len(figures) + [(f[0][:, j], f[1][:, j]) for j in range(len(figures))]
        ci = [plan.ci(float(vals[0, j]), vals[:, j], reads[j], arms=arms[j])
              for j in range(vals.shape[1])]
        out[proc] = np.array([[np.nan if c[0] is None else c[0] for c in ci],
                              [np.nan if c[1] is None else c[1] for c in ci]])
    return out


def coverage_table(runs: int, n: int = 1250, n_models: int = 16, draws: int = 100,
                   effects: tuple[float, float] = (0.6, 0.3), truth_runs: int = 400,
                   flipped: float = 0.1, seed: int = 0, workers: int = 1,
                   procedures: tuple[str, ...] = PROCEDURES, arm_rho: float = 1.0,
                   figures: tuple[str, ...] = FIGURES, store: Path | None = None,
                   ood: float = 0.0) -> dict:
    """Coverage and mean width of every procedure for every figure (see the module
    docstring); runs and truth runs use disjoint seeds; `arm_rho`: how much model noise
    the two arms share (bnmem.attack.simulate.synthetic_phi); `store`: a resumable
    record of the finished units (simulate_all); `ood`: the share of OOD samples (hard and
    memorized like flipped ones), which fz_ood needs."""
    kind = sample_kinds(n, flipped, ood)
    names = list(figures) + [f"{f}_delta" for f in figures]
    truth_args = [(n_models, n, effects, kind, seed * 1_000_003 + 500_000 + s, arm_rho, figures)
                  for s in range(truth_runs)]
    run_args = [(n_models, n, effects, kind, draws, seed * 1_000_003 + r, procedures, arm_rho,
                 figures) for r in range(runs)]
    truth, done = simulate_all(truth_row, truth_args, _run, run_args, workers, store)
    table = tabulate(done, truth, names, procedures)
    return {"procedures": list(procedures), "runs": runs, "n": n, "n_models": n_models, "draws": draws, "effects": list(effects),
            "flipped": flipped, "ood": ood, "arm_rho": arm_rho, "truth_runs": truth_runs,
            "truth": {name: float(t) for name, t in zip(names, truth)}, "table": table}


def simulate_all(truth_row, truth_args: list, run, run_args: list, workers: int,
                 store: Path | None = None) -> tuple[np.ndarray, list]:
    """(truth: the mean of truth_row over truth_args, nan where a figure never exists;
    [run(a) for a in run_args]), on `workers` forked processes when more than one.

    `store` (a .jsonl file): every finished unit (a truth row or a run) is appended to it as
    it lands, and units already there are not recomputed, so a study killed (or a session
    ended) resumes where it stopped; the results equal an uninterrupted run's (test). The
    file holds the units of one study: its first line names the arguments' fingerprint, and
    a file of another study is refused."""
    if store is None:
        if workers > 1 and "fork" in mp.get_all_start_methods():
            with mp.get_context("fork").Pool(workers) as pool:
                truth_rows = pool.map(truth_row, truth_args, chunksize=8)
                done = pool.map(run, run_args, chunksize=2)
        else:
            truth_rows = [truth_row(a) for a in truth_args]
            done = [run(a) for a in run_args]
    else:
        truth_rows, done = _stored(truth_row, truth_args, run, run_args, workers, Path(store))
    with warnings.catch_warnings():  # a figure nan in every run (TPR unsupported): nan truth
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(np.array(truth_rows), axis=0), done


def read_store(store: Path | str) -> tuple[str | None, dict[tuple[str, int], object]]:
    """A simulate_all store's study (the fingerprint on its first line; None if it has
    none) and its finished units {(kind, i): value}, kind "truth" or "run": a truth row as
    an array (nan where a figure does not exist), a run as {procedure: array}. A line a kill
    cut short is skipped: that unit is unfinished."""
    lines = Path(store).read_text().splitlines()
    try:
        head = json.loads(lines[0]) if lines else {}
    except ValueError:
        head = {}
    units: dict[tuple[str, int], object] = {}
    for line in lines[1:]:
        try:
            rec = json.loads(line)
        except ValueError:  # the line a kill cut short: that unit runs again
            continue
        value = rec["value"]
        units[rec["kind"], rec["i"]] = (np.array(value, float) if rec["kind"] == "truth" else
                                        {k: np.array(v, float) for k, v in value.items()})
    return (head.get("study") if isinstance(head, dict) else None), units


def _unit(job: tuple) -> tuple[str, int, object]:
    kind, i, fn, args = job
    return kind, i, fn(args)


def _fingerprint(truth_args: list, run_args: list) -> str:
    """The study's identity: every unit's arguments (arrays by their bytes)."""
    h = hashlib.sha256()
    for args in truth_args + [None] + run_args:
        for x in (args or ("|",)):
            h.update(x.tobytes() if isinstance(x, np.ndarray) else repr(x).encode())
            h.update(b"\0")
    return h.hexdigest()[:16]


def _stored(truth_row, truth_args: list, run, run_args: list, workers: int, store: Path
            ) -> tuple[list, list]:
    """simulate_all's units through the resumable `store` (see there)."""
    key = _fingerprint(truth_args, run_args)
    have: dict[tuple[str, int], object] = {}
    if store.is_file():
        cut = False
        with open(store, "rb") as f:  # only the last byte: is the last line whole?
            if f.seek(0, 2):  # not empty
                f.seek(-1, 2)
                cut = f.read(1) != b"\n"
        if cut:  # a kill cut the last line: end it, so the next unit starts a line of its own
            with open(store, "ab") as f:
                f.write(b"\n")
        study, have = read_store(store)
        if study != key:
            raise ValueError(f"{store}: holds another study's units ({study}); "
                             f"this one is {key}: give another --store")
    else:
        store.parent.mkdir(parents=True, exist_ok=True)
        store.write_text(json.dumps({"study": key}) + "\n")
    jobs = [("truth", i, truth_row, a) for i, a in enumerate(truth_args) if ("truth", i) not in have]
    jobs += [("run", i, run, a) for i, a in enumerate(run_args) if ("run", i) not in have]

    def save(kind: str, i: int, value) -> None:
        have[kind, i] = value
        out = (np.asarray(value).tolist() if kind == "truth"
               else {k: np.asarray(v).tolist() for k, v in value.items()})
        with open(store, "a") as f:  # one line per unit, flushed as it lands
            f.write(json.dumps({"kind": kind, "i": i, "value": out}) + "\n")

    if workers > 1 and len(jobs) > 1 and "fork" in mp.get_all_start_methods():
        with mp.get_context("fork").Pool(workers) as pool:
            for kind, i, value in pool.imap_unordered(_unit, jobs):
                save(kind, i, value)
    else:
        for job in jobs:
            save(*_unit(job))
    return ([have["truth", i] for i in range(len(truth_args))],
            [have["run", i] for i in range(len(run_args))])


def tabulate(done: list, truth: np.ndarray, names: list[str], procedures) -> dict:
    """{procedure: {figure: coverage, mean width, runs, miss_below, miss_above, mc_range}} of
    the runs' (lo, hi) [2, F]: miss_below, the share of runs whose interval lies wholly
    below the truth (it understates the figure), miss_above, wholly above (nominal 0.025
    each: two-sided coverage says nothing of one tail); mc_range, the 95 % Wilson range of
    the coverage over that many runs (the study's own Monte Carlo error)."""
    table = {}
    for proc in procedures:
        lo = np.array([d[proc][0] for d in done])
        hi = np.array([d[proc][1] for d in done])
        ok = np.isfinite(lo) & np.isfinite(hi)
        cover = (lo <= truth) & (truth <= hi)
        table[proc] = {}
        for i, name in enumerate(names):
            k = ok[:, i]
            if not k.any():
                table[proc][name] = {"coverage": None, "mean_width": None, "runs": 0,
                                     "miss_below": None, "miss_above": None, "mc_range": None}
                continue
            c = float(cover[k, i].mean())
            table[proc][name] = {"coverage": c, "mean_width": float((hi - lo)[k, i].mean()),
                                 "runs": int(k.sum()),
                                 "miss_below": float((hi[k, i] < truth[i]).mean()),
                                 "miss_above": float((lo[k, i] > truth[i]).mean()),
                                 "mc_range": wilson(c, int(k.sum()))}
    return table


def wilson(p: float, n: int, z: float = 1.96) -> list[float]:
    """The 95 % Wilson score interval of a proportion p observed over n trials."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return [float(centre - half), float(centre + half)]
