"""Intervals that include training randomness: one bootstrap over shadow-model pairs and
pool samples together, and the matched-fit comparison computed inside every draw.

A draw takes the arm's P complementary shadow pairs with multinomial multiplicities
(the same draw for every arm: the shadow stage gives all arms the same keep masks and
seeds, so pairs correspond) and the pool samples with multiplicities stratified by kind.
Inside a draw every drawn model is the target once, with the *other* drawn pairs as its
shadows (balanced leave-one-pair-out, `bnmem.attack.lira.lira_draw`), so the interval covers
which shadow models were trained as well as which samples were drawn. Draw 0 is the
unresampled data: its values are the point estimates.

Per arm and draw (`arm_draw`): the headline attack's AUC per kind and TPR at the low FPR,
the shadows' fit (accuracy on IN clean samples, pooled over models), their memorization
(accuracy on IN flipped / OOD samples with the corrupted label) and the Feldman-Zhang
score (IN minus OUT accuracy) per kind; per epoch, fit, memorization and AUC (identity
query, the one recorded after every epoch). `compare` turns two arms' draws into
differences at equal epochs and at matched fit (linear between recorded epochs).
"""
from __future__ import annotations

import numpy as np

from bnmem.attack.lira import PairSignals, lira_draw
from bnmem.core.kinds import CLEAN, FLIPPED, KINDS, OOD, SUBSETS
from bnmem.attack.intervals import (DELETED_DESIGNS, DELETED_ROWS, HALVES_PAIRS, IntervalPlan,
                                    designs, halves_groups, real_shadow_rules_hold)
from bnmem.attack.matched import at_fit, common_fit, epoch_at, fit_grid
from bnmem.attack.roc import bootstrap_weights, ranked, ranked_curves, roc_summary, tpr_supported

LOW_FPR = 1e-3  # the headline low-FPR operating point
VLOW_FPR = 1e-4  # the lower one: supported from 100 000 negative (model, sample) pairs


def draw_plan(kind: np.ndarray, n_pairs: int, n_boot: int, rng: np.random.Generator,
              procedure: str = "both", recipe: bool = True
              ) -> tuple[np.ndarray, np.ndarray, IntervalPlan]:
    """(pair counts [R, P], sample weights [R, N], plan) for one interval procedure
    (`draw_designs` over the designs it needs); recipe False (a run on another recipe than
    the real shadows', intervals.real_shadow_recipe): no halves or delete-d rows, so their
    rules fall back. Nor under `mixed` wherever its real-shadow rules fall back anyway
    (intervals.real_shadow_rules_hold: another pair count, too few draws): rows no rule
    reads are not drawn."""
    real = (real_shadow_rules_hold(n_pairs, n_boot, recipe) if procedure == "mixed" else recipe)
    names = tuple(d for d in designs(procedure)
                  if real or d not in ("halves", *DELETED_DESIGNS))
    counts, weights, segments = draw_designs(kind, n_pairs, n_boot, rng, names)
    # `real` also turns off the real-shadow rules that read only rows every run draws
    # (jacksum_s: the jackknife and samples rows), so their scope is the plan's
    return counts, weights, IntervalPlan(procedure, n_pairs, segments, real_shadow=real)


def draw_designs(kind: np.ndarray, n_pairs: int, n_boot: int, rng: np.random.Generator,
                 names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, dict]:
    """(pair counts [R, P], sample weights [R, N], {design: (start, stop)}): row 0 is all
    ones (no resampling), then the rows of each design in `names`: `n_boot` with pairs
    drawn and samples fixed ("pairs"), samples drawn and pairs fixed ("samples"), or both
    together ("both"); P for the jackknife (each pair left out once, samples fixed); for
    "halves", 2 (n_boot // 2) rows in twos that share one stratified sample reweighting,
    the first on a random half of the pairs and the second on the other half (each half's
    pairs weighted to P in all: `halves_rows`); for "delete<d>", the pairs' delete-d
    jackknife's rows (`deleted_rows`). The halves and delete-d rows only at HALVES_PAIRS
    pairs: none at another count, whose rules do not read them."""
    counts, weights, segments = [np.ones((1, n_pairs), np.int64)], [np.ones((1, kind.size))], {}
    ones_c, ones_w = np.ones((n_boot, n_pairs), np.int64), np.ones((n_boot, kind.size))
    for design in names:
        if design == "jackknife":
            c = np.ones((n_pairs, n_pairs), np.int64) - np.eye(n_pairs, dtype=np.int64)
            w = np.ones((n_pairs, kind.size))
        elif design == "halves":  # read only by the real-shadow rules, at HALVES_PAIRS pairs
            c, w = (halves_rows(kind, n_pairs, n_boot // 2, rng) if n_pairs == HALVES_PAIRS
                    else (np.ones((0, n_pairs), np.int64), np.ones((0, kind.size))))
        elif design in DELETED_DESIGNS:
            c = deleted_rows(n_pairs, DELETED_DESIGNS[design], rng)
            w = np.ones((len(c), kind.size))
        else:
            c = (rng.multinomial(n_pairs, np.full(n_pairs, 1.0 / n_pairs), size=n_boot)
                 if design != "samples" else ones_c)
            w = bootstrap_weights(kind, n_boot, rng) if design != "pairs" else ones_w
        start = sum(len(x) for x in counts)
        segments[design] = (start, start + len(c))
        counts.append(c)
        weights.append(w)
    return np.vstack(counts), np.vstack(weights), segments


def halves_rows(kind: np.ndarray, n_pairs: int, n_shared: int, rng: np.random.Generator
                ) -> tuple[np.ndarray, np.ndarray]:
    """(pair counts [2 n_shared, P], sample weights [2 n_shared, N]) of the "halves" design:
    the pairs split at random into halves of P // 2 and P - P // 2, a split per group of
    reweightings (bnmem.attack.intervals.halves_groups); per shared reweighting k, row 2k
    counts its group's first half, row 2k + 1 the second, each half's counts adding to P
    (P // m per pair of a half of m, the remainder one each to its first pairs in the random
    order), both rows with reweighting k. The two rows' figures share the samples but no
    model, so their covariance over k within a split estimates the samples' part of a
    figure's variance without the model-by-sample interaction (halves_covariance); within a
    split the halves' pairs are fixed, so the pairs' own effects add nothing to it. The
    attack's leave-one-pair-out needs two other distinct pairs in a half, so each half needs
    three: P < 6 gives rows without figures (and an odd P halves of unequal weights)."""
    counts = np.zeros((2 * n_shared, n_pairs), np.int64)
    half = n_pairs // 2
    for group in halves_groups(n_shared):
        order = rng.permutation(n_pairs)
        for j, part in enumerate((order[:half], order[half:])):
            m = max(part.size, 1)
            c = np.full(part.size, n_pairs // m, np.int64)
            c[: n_pairs - c.sum()] += 1
            counts[np.ix_(2 * group + j, part)] = c
    w = bootstrap_weights(kind, n_shared, rng)
    return counts, np.repeat(w, 2, axis=0)


def deleted_rows(n_pairs: int, d: int, rng: np.random.Generator,
                 n_rows: int = DELETED_ROWS) -> np.ndarray:
    """Pair counts [rows, P] of the delete-d jackknife: each row keeps the pairs (1) but d
    (0); every d-subset where C(P, d) <= n_rows, for d = P / 2 a random n_rows / 2 of the
    complementary splits (both halves each), else a random n_rows of the d-subsets (without
    replacement). Only at HALVES_PAIRS pairs (the real-shadow study's count; no rows at
    another: its rules fall back there)."""
    from itertools import combinations
    if n_pairs != HALVES_PAIRS:
        return np.ones((0, n_pairs), np.int64)
    sets = list(combinations(range(n_pairs), d))
    if 2 * d == n_pairs:  # the set holding pair 0, then its complement
        first = [s for s in sets if 0 in s]
        pick = rng.choice(len(first), n_rows // 2, replace=False)
        chosen = [x for i in pick
                  for x in (first[i], tuple(sorted(set(range(n_pairs)) - set(first[i]))))]
    elif len(sets) <= n_rows:
        chosen = sets
    else:
        chosen = [sets[i] for i in rng.choice(len(sets), n_rows, replace=False)]
    c = np.ones((len(chosen), n_pairs), np.int64)
    for r, s in enumerate(chosen):
        c[r, list(s)] = 0
    return c


def _model_weights(ps: PairSignals, counts: np.ndarray, m: int) -> np.ndarray:
    w = np.zeros(m)
    w[ps.first], w[ps.second] = counts, counts
    return w


def _ranking(scores: dict[int, np.ndarray], keep: np.ndarray, cols: np.ndarray) -> tuple | None:
    """The (model, sample) pairs of `scores` at `cols` in descending-score order: (model
    indices, sample indices, labels, tie-group ends) in that order, or None when the pairs
    hold only members or only non-members."""
    rows = np.array(sorted(scores))
    lab = keep[np.ix_(rows, cols)]
    if not lab.any() or lab.all():
        return None
    order, ends = ranked(np.stack([scores[r][cols] for r in rows]).astype(np.float64).ravel())
    r, c = np.divmod(order, cols.size)
    return rows[r], cols[c], lab.ravel()[order], ends


def _roc(scores: dict[int, np.ndarray], keep: np.ndarray, mw: np.ndarray, sw: np.ndarray,
         cols: np.ndarray, rankings: dict | None = None, key=None) -> dict[str, float]:
    """AUC and TPR at LOW_FPR and VLOW_FPR of the (model, sample) pairs, weighted by mw x sw.

    rankings: a dict kept with a memoized `scores` (the unresampled pairs, `_lira`): the
    pairs' order under `key` is sorted once and reused by every draw that only reweights
    samples; the weights are taken in that order, so the curve is roc_points' to the bit.
    """
    if rankings is None or key not in rankings:
        ranking = _ranking(scores, keep, cols)
        if rankings is not None:
            rankings[key] = ranking
    else:
        ranking = rankings[key]
    if ranking is None:
        return {"auc": np.nan, "tpr": np.nan, "tpr_vlow": np.nan}
    r, c, lab, ends = ranking
    fpr, tpr = ranked_curves((mw[r] * sw[c])[None], lab, ends)
    summ = roc_summary(fpr[0], tpr[0], levels={"low": LOW_FPR, "vlow": VLOW_FPR})
    return {"auc": float(summ["auc"]), "tpr": float(summ["tpr_at_fpr_low"]),
            "tpr_vlow": float(summ["tpr_at_fpr_vlow"])}


def _pooled_acc(correct: np.ndarray, sel: np.ndarray, mw: np.ndarray, sw: np.ndarray) -> float:
    """Accuracy over the selected (model, sample) pairs, weighted mw x sw; nan if none."""
    den = mw @ sel @ sw
    return float(mw @ (correct & sel) @ sw / den) if den > 0 else np.nan


def _fz(correct: np.ndarray, keep: np.ndarray, mw: np.ndarray, sw: np.ndarray,
        mask: np.ndarray) -> float:
    """Feldman-Zhang memorization: sample-weighted mean of IN minus OUT accuracy."""
    n_in, n_out = mw @ keep, mw @ ~keep
    ok = mask & (n_in > 0) & (n_out > 0) & (sw > 0)
    if not ok.any():
        return np.nan
    score = (mw @ (correct & keep))[ok] / n_in[ok] - (mw @ (correct & ~keep))[ok] / n_out[ok]
    return float(np.average(score, weights=sw[ok]))


EPOCH_FIGURES = ("fit", "auc_all", "in_acc_flipped", "in_acc_ood", "fz_flipped", "fz_ood")


def _lira(cache: dict | None, key, ps: PairSignals, phi: np.ndarray, counts: np.ndarray,
          variant: str, one_sided: bool) -> tuple[dict, dict | None]:
    """(lira_draw, its rankings dict for `_roc` or None), memoized in `cache` for the
    unresampled pairs (all counts 1: the point and every samples-only row share one set of
    scores; only the sample weights differ)."""
    if cache is None or not (counts == 1).all():
        return lira_draw(ps, phi, counts, variant, one_sided), None
    if key not in cache:
        cache[key] = lira_draw(ps, phi, counts, variant, one_sided), {}
    return cache[key]


def arm_draw(data: dict, ps_final: PairSignals, ps_epochs: list[PairSignals],
             counts: np.ndarray, sw: np.ndarray, kind: np.ndarray, variant: str,
             one_sided: bool, cache: dict | None = None, level: str = "full"
             ) -> dict[str, float | np.ndarray]:
    """All figures of one arm in one draw (see the module docstring).

    data: {"phi" [m,N,Q], "keep" [m,N], "correct" [m,N], "epoch_phi" [m,E,N] | None,
    "epoch_correct" [m,E,N] | None, optionally "loss" [m,N] (per-pair cross-entropy: gives
    train_loss)}. cache: a dict kept across draws of this `data` (memoizes the unresampled
    pairs' scores). level: "full" computes every figure; "endpoints" leaves the per-epoch
    figures nan; "lean" also the per-subset AUCs (all samples' AUC and TPR, accuracies,
    memorization and loss are computed at every level, as are the utilities that locate a
    matched point): the rows of a design that no per-epoch figure, or no per-subset AUC
    either, reads (procedure `mixed`: bnmem.attack.intervals.design_levels).
    """
    if level not in ("full", "endpoints", "lean"):
        raise ValueError(f"level {level!r}: one of full, endpoints, lean")
    lean = level == "lean"
    keep, m = data["keep"], data["keep"].shape[0]
    mw = _model_weights(ps_final, counts, m)
    scores, rankings = _lira(cache, "final", ps_final, data["phi"], counts, variant, one_sided)
    out: dict = {"units": counts.size}
    for sub, code in SUBSETS.items():  # nan when no drawn model has another pair as shadows
        if lean and code is not None:
            out[f"auc_{sub}"] = np.nan
            continue
        cols = np.arange(kind.size) if code is None else np.flatnonzero(kind == code)
        r = (_roc(scores, keep, mw, sw, cols, rankings, sub) if cols.size and scores
             else {"auc": np.nan, "tpr": np.nan, "tpr_vlow": np.nan})
        out[f"auc_{sub}"] = r["auc"]
        if sub == "all":  # only where the negatives allow >= 10 false positives at the FPR
            # the point's support (all P pairs' negatives), inherited by every row: a row
            # estimates the P-pair run's spread, even a jackknife's smaller run (README
            # *Low FPR*)
            n_neg = int((~keep).sum())
            out["tpr_low_all"] = r["tpr"] if tpr_supported(n_neg, LOW_FPR) else np.nan
            if tpr_supported(n_neg, VLOW_FPR):  # absent below 100 000 negatives
                out["tpr_vlow_all"] = r["tpr_vlow"]
    for name, code in KINDS.items():
        sel = keep & (kind == code)[None]
        out[f"in_acc_{name}"] = _pooled_acc(data["correct"], sel, mw, sw)
        out[f"fz_{name}"] = _fz(data["correct"], keep, mw, sw, kind == code)
    # accuracy on clean samples a model did not train on: the shadows' test accuracy
    out["out_acc_clean"] = _pooled_acc(data["correct"], ~keep & (kind == CLEAN)[None], mw, sw)
    out["gen_gap"] = out["in_acc_clean"] - out["out_acc_clean"]
    if data.get("loss") is not None:  # mean cross-entropy on the training sets
        den = mw @ keep @ sw
        out["train_loss"] = float(mw @ (data["loss"] * keep) @ sw / den) if den > 0 else np.nan
    if data.get("epoch_phi") is not None and level != "full":
        nan = np.full(data["epoch_phi"].shape[1], np.nan)
        out["epoch"] = {k: nan for k in EPOCH_FIGURES}
    elif data.get("epoch_phi") is not None:
        e_auc, e_fit, e_flip, e_ood, e_fzf, e_fzo = [], [], [], [], [], []
        for e, ps in enumerate(ps_epochs):
            c = data["epoch_correct"][:, e]
            sc, rk = _lira(cache, e, ps, data["epoch_phi"][:, e, :, None], counts, variant,
                           one_sided)
            e_auc.append(_roc(sc, keep, mw, sw, np.arange(kind.size), rk, "all")["auc"]
                         if sc else np.nan)
            e_fit.append(_pooled_acc(c, keep & (kind == CLEAN)[None], mw, sw))
            e_flip.append(_pooled_acc(c, keep & (kind == FLIPPED)[None], mw, sw))
            e_ood.append(_pooled_acc(c, keep & (kind == OOD)[None], mw, sw))
            e_fzf.append(_fz(c, keep, mw, sw, kind == FLIPPED))
            e_fzo.append(_fz(c, keep, mw, sw, kind == OOD))
        out["epoch"] = {"fit": np.array(e_fit), "auc_all": np.array(e_auc),
                        "in_acc_flipped": np.array(e_flip), "in_acc_ood": np.array(e_ood),
                        "fz_flipped": np.array(e_fzf), "fz_ood": np.array(e_fzo)}
    return out


def epoch_pairs(data: dict) -> list[PairSignals]:
    """PairSignals of every recorded epoch (identity query), [] when none were recorded."""
    if data.get("epoch_phi") is None:
        return []
    ids = data["model_ids"]
    return [PairSignals.build(data["epoch_phi"][:, e, :, None].astype(np.float64),
                              data["keep"], ids) for e in range(data["epoch_phi"].shape[1])]


def compare(draws_a: list[dict], draws_b: list[dict], grid: np.ndarray | None = None,
            plan: IntervalPlan | None = None, epochs_at: tuple | None = None) -> dict:
    """a - b per figure at equal (final) epochs and at matched fit, point estimate (draw 0)
    with a 95 % interval from the other draws (models and samples resampled;
    `bnmem.attack.intervals.IntervalPlan`; the equal-epoch differences are read "@equal",
    the within-run matched-fit ones as one run's figures: MIXED_RULES). `epochs_at`: the
    epochs each arm's within-run curve was recorded at (the matched point's epoch_a / epoch_b are read on them; None:
    every epoch from 1).

    Matched fit: each draw's own common fit (the lower final shadow fit), every figure
    interpolated at it; `curve` gives the AUC difference over `grid` (default: draw 0's
    overlapping fit range).
    """
    plan = plan or _legacy_plan(draws_a)
    out: dict = {"equal_epochs": {}, "matched_fit": {}}
    for key in draws_a[0]:
        if key in ("epoch", "units", "endpoints"):
            continue
        arms = (np.array([a[key] for a in draws_a]), np.array([b[key] for b in draws_b]))
        out["equal_epochs"][key] = _summary(arms[0] - arms[1], plan, f"{key}@equal", arms)
    if "epoch" not in draws_a[0] or "epoch" not in draws_b[0]:
        return out
    # the per-epoch attack sees the identity query only (the one recorded during training), so
    # the equal-epoch figure that matched fit is compared with is its last epoch, not the
    # all-queries auc_all above
    vals = np.array([a["epoch"]["auc_all"][-1] - b["epoch"]["auc_all"][-1]
                     for a, b in zip(draws_a, draws_b)])
    out["equal_epochs"]["auc_identity"] = _summary(vals, plan, "auc_identity@equal")
    keys = {"auc_identity": "auc_all", "in_acc_flipped": "in_acc_flipped",
            "in_acc_ood": "in_acc_ood", "fz_flipped": "fz_flipped",
            "fz_ood": "fz_ood"}  # output name -> per-epoch figure
    rows, fits, epochs = {k: [] for k in keys}, [], []
    for a, b in zip(draws_a, draws_b):
        ea, eb = a["epoch"], b["epoch"]
        target = common_fit(ea["fit"], eb["fit"])
        fits.append(target)
        for k, fig in keys.items():
            va, pa = at_fit(ea["fit"], ea[fig], target)
            vb, pb = at_fit(eb["fit"], eb[fig], target)
            rows[k].append(va - vb)
        epochs.append((pa, pb))
    out["matched_fit"] = {k: _summary(np.array(v), plan, k) for k, v in rows.items()}
    out["matched_fit"]["fit"] = fits[0]
    # the matched point's epoch in each run, where the curves were recorded at `epochs`
    rec_a, rec_b = epochs_at or (None, None)
    out["matched_fit"]["epoch_a"], out["matched_fit"]["epoch_b"] = (
        p if rec is None else epoch_at(p, rec) for p, rec in zip(epochs[0], (rec_a, rec_b)))
    e0a, e0b = draws_a[0]["epoch"], draws_b[0]["epoch"]
    grid = fit_grid(e0a["fit"], e0b["fit"]) if grid is None else grid
    curve = np.array([[at_fit(a["epoch"]["fit"], a["epoch"]["auc_all"], f)[0]
                       - at_fit(b["epoch"]["fit"], b["epoch"]["auc_all"], f)[0] for f in grid]
                      for a, b in zip(draws_a, draws_b)])  # [B+1, G]
    band = [plan.ci(curve[0, g], curve[:, g], "auc_all") for g in range(grid.size)]
    out["curve"] = {"fit": grid.tolist(), "auc_all": curve[0].tolist(),
                    "lo": [b[0] for b in band], "hi": [b[1] for b in band]}
    return out


def arm_summary(draws: list[dict], plan: IntervalPlan | None = None) -> dict:
    """Every per-arm figure: point estimate with its interval over draws, the interval
    clipped to the figure's range (AUC, TPR and accuracies in [0, 1], FZ in [-1, 1])."""
    plan, out = plan or _legacy_plan(draws), {}
    for k in draws[0]:
        if k in ("epoch", "units", "endpoints"):
            continue
        row = _summary(np.array([d[k] for d in draws]), plan, k)
        low = -1.0 if k.startswith("fz_") else 0.0
        if row["lo"] is not None and k not in ("train_loss", "gen_gap"):
            row["lo"], row["hi"] = max(row["lo"], low), min(row["hi"], 1.0)
        out[k] = row
    if "epoch" in draws[0]:
        out["epoch"] = {k: v.tolist() for k, v in draws[0]["epoch"].items()}
    return out


def _legacy_plan(draws: list[dict]) -> IntervalPlan:
    """Every row after the point drawn with pairs and samples together."""
    return IntervalPlan("both", int(draws[0]["units"]), {"both": (1, len(draws))})


def _summary(vals: np.ndarray, plan: IntervalPlan, figure: str, arms=None) -> dict:
    return plan.summary(vals, figure, arms)
