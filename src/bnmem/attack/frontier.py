"""Privacy-utility frontiers from annealed endpoints (shadow.budgets).

Every shadow model is trained as a complete run of each budget (its own schedule, annealed
at its own end) besides its train.epochs run, so each point of an arm's curve is a finished
training run, never a mid-schedule epoch of a longer one (the learning rate's phase moves
leakage by itself). Arms are compared where they are equally useful:

- **held-out accuracy** (primary, fixed in advance): the shadows' accuracy on the clean pool
  samples they did not train on;
- fit (accuracy on their IN clean samples) and train loss (mean cross-entropy on their
  training set, training labels): secondary;
- generalization gap (fit minus held-out accuracy): secondary.

For a utility (held-out accuracy, fit, minus the train loss) the comparison is between
**Pareto frontiers**: the least leakage an arm reaches at or above a utility level, along
the polyline through its endpoints in budget order (`pareto_at`), so a longer run that adds
leakage at flat utility (overtraining) cannot make an arm look worse than its best run.
The difference is taken at the common point (the highest utility both arms reach: the lower
of their best utilities) and averaged over the overlap of their utility ranges. The gap is
no utility: there the leakage is interpolated at the common gap along the budget order.

Everything is computed inside every models+samples draw (bnmem.attack.resample), so the intervals
include training randomness.
"""
from __future__ import annotations

import numpy as np

from bnmem.core.io import InputError, load_npz
from bnmem.attack.matched import at_fit
from bnmem.attack.intervals import DELETED_DESIGNS

# criterion -> (figure on the endpoints, sign that makes it a utility, or None: no utility)
CRITERIA = {"heldout": ("out_acc_clean", 1.0), "fit": ("in_acc_clean", 1.0),
            "loss": ("train_loss", -1.0), "gap": ("gen_gap", None)}
PRIMARY = "heldout"
LABELS = {"heldout": "matched held-out accuracy", "fit": "matched fit",
          "loss": "matched train loss", "gap": "matched generalization gap"}
FIGURES = ("auc_all", "auc_clean", "tpr_low_all", "fz_flipped", "fz_ood", "in_acc_flipped",
           "in_acc_ood")
ENDPOINT_FIGURES = ("out_acc_clean", "in_acc_clean", "train_loss", "gen_gap") + FIGURES
GRID = 21  # overlap points
# a budget step overtrains when its AUC gain is >= 1 point and its held-out accuracy gain is
# less than a quarter of it (both in points): a rate, so it does not depend on the grid
OVERTRAIN = (0.25, 0.01)


def train_loss(logits: np.ndarray, labels: np.ndarray, identity: int = 0) -> np.ndarray:
    """float64 [m, N]: cross-entropy of each model's identity query on the training labels."""
    z = logits[:, :, identity].astype(np.float64)
    top = z.max(-1, keepdims=True)
    lse = np.log(np.exp(z - top).sum(-1)) + top[..., 0]
    return lse - np.take_along_axis(z, labels[None, :, None], -1)[..., 0]


def load_budget_logits(paths: list, n_samples: int, budgets: tuple[int, ...]) -> np.ndarray | None:
    """budget_logits [m, B, N, Q, C] of an arm's shards, models in id order; None when
    the shards were trained without shadow.budgets. A shard whose budgets differ from the
    recipe's is a one-line InputError."""
    if not budgets:
        return None
    parts = [load_npz(p, ("keep", "model_ids")) for p in paths]
    for path, z in zip(paths, parts):
        if "budget_logits" not in z or "budgets" not in z:
            raise InputError(f"{path}: no budget_logits; shadow.budgets={list(budgets)} "
                             "wants them: re-run the shadow stage")
        if [int(b) for b in z["budgets"]] != list(budgets):
            raise InputError(f"{path}: budgets {z['budgets'].tolist()} differ from "
                             f"shadow.budgets={list(budgets)}; re-run the shadow stage")
        bl, m = z["budget_logits"], len(z["model_ids"])
        if bl.ndim != 5 or bl.shape[:3] != (m, len(budgets), n_samples):
            raise InputError(f"{path}: budget_logits {bl.shape} do not fit "
                             f"[m={m}, B={len(budgets)}, N={n_samples}, Q, C]")
        if not np.isfinite(bl).all():  # a diverged run: training is seeded, a rerun repeats it
            bad = ~np.isfinite(bl).reshape(m, len(budgets), -1).all(axis=2)
            which = [f"model {int(z['model_ids'][i])} at {int(budgets[j])} epochs"
                     for i, j in zip(*np.nonzero(bad))]
            raise InputError(f"{path}: non-finite budget_logits ({', '.join(which[:4])}"
                             f"{', …' if len(which) > 4 else ''}): those runs diverged, and "
                             "training is seeded, so a rerun diverges again; lower train.lr or "
                             "raise train.warmup_epochs (a budget run keeps it, at most half "
                             "its epochs)")
    order = np.argsort(np.concatenate([z["model_ids"] for z in parts]))
    return np.concatenate([z["budget_logits"] for z in parts])[order]


def budget_data(paths: list, labels: np.ndarray, identity: int, budgets: tuple[int, ...],
                keep: np.ndarray, model_ids: np.ndarray) -> list[dict]:
    """The attack inputs (bnmem.attack.resample.arm_draw's `data`) of every extra budget's
    endpoint, budget order: phi, correct and loss from budget_logits; [] without budgets."""
    from bnmem.attack.signals import signals  # numpy only; imported here to keep this module light
    bl = load_budget_logits(paths, labels.size, budgets)
    if bl is None:
        return []
    ids = np.sort(model_ids)
    out = []
    for i in range(len(budgets)):
        lg = np.ascontiguousarray(bl[:, i])
        phi, _, correct = signals(lg, labels, identity)
        out.append({"phi": phi, "keep": keep, "correct": correct, "model_ids": ids,
                    "loss": train_loss(lg, labels, identity), "epoch_phi": None,
                    "epoch_correct": None})
    return out


def full_loss(paths: list, labels: np.ndarray, identity: int) -> np.ndarray:
    """train_loss of the train.epochs models (shards' logits), models in id order."""
    parts = [load_npz(p, ("logits", "model_ids")) for p in paths]
    order = np.argsort(np.concatenate([z["model_ids"] for z in parts]))
    return np.concatenate([train_loss(z["logits"], labels, identity) for z in parts])[order]


def _pareto_candidates(u: np.ndarray, y: np.ndarray, level: float) -> list[tuple[float, float]]:
    """(y, source) of every point of the polyline through (u, y) (endpoints in budget
    order) at utility >= `level`: endpoint i (source i) and each segment's crossing of the
    level (source i + 0.5); [] when none reaches it or an input is not finite."""
    u, y = np.asarray(u, float), np.asarray(y, float)
    if not (np.isfinite(u).all() and np.isfinite(y).all()) or not np.isfinite(level):
        return []
    cands = [(float(y[i]), float(i)) for i in range(u.size) if u[i] >= level - 1e-12]
    for i in range(u.size - 1):  # segments crossing the level add their crossing point
        u0, u1 = u[i], u[i + 1]
        if (u0 - level) * (u1 - level) < 0:
            cands.append((float(y[i] + (level - u0) / (u1 - u0) * (y[i + 1] - y[i])), i + 0.5))
    return cands


def pareto_at(u: np.ndarray, y: np.ndarray, level: float) -> float:
    """The least `y` on the polyline through (u, y) at utility >= `level`: the Pareto
    frontier. nan when no point reaches `level` (no extrapolation)."""
    cands = _pareto_candidates(u, y, level)
    return min(cands)[0] if cands else np.nan


def pareto_source(u: np.ndarray, y: np.ndarray, level: float) -> float:
    """Where pareto_at's minimum comes from: endpoint i (i), or the crossing of segment
    (i, i + 1) (i + 0.5); nan when no point reaches `level`. Draws whose source differs
    from the point estimate's switch endpoints: a non-smooth statistic there."""
    cands = _pareto_candidates(u, y, level)
    return min(cands)[1] if cands else np.nan


def pareto_grid(u: np.ndarray, y: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """pareto_at at every level at once (vectorized; tests check it against pareto_at)."""
    u, y, lv = np.asarray(u, float), np.asarray(y, float), np.asarray(levels, float)[:, None]
    if not (np.isfinite(u).all() and np.isfinite(y).all()):
        return np.full(lv.shape[0], np.nan)
    pts = np.where(u[None] >= lv - 1e-12, y[None], np.inf)
    u0, u1, y0, y1 = u[:-1], u[1:], y[:-1], y[1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = np.where((u0 - lv) * (u1 - lv) < 0, y0 + (lv - u0) / (u1 - u0) * (y1 - y0), np.inf)
    best = np.minimum(pts.min(1), cross.min(1) if cross.size else np.inf)
    best[~np.isfinite(lv[:, 0])] = np.inf
    return np.where(np.isfinite(best), best, np.nan)


def _series(ends: list[dict], key: str, sign: float | None) -> np.ndarray:
    v = np.array([e[key] for e in ends], float)
    return v * sign if sign is not None else v


def common_point(ua: np.ndarray, ub: np.ndarray) -> tuple[float, np.ndarray]:
    """(the highest utility both arms reach, the overlap grid of their utility ranges
    (empty when they do not overlap))."""
    top = float(min(np.nanmax(ua), np.nanmax(ub)))
    low = float(max(np.nanmin(ua), np.nanmin(ub)))
    return top, (np.linspace(low, top, GRID) if top > low else np.empty(0))


def draw_compare(ends_a: list[dict], ends_b: list[dict], criterion: str,
                 figures: tuple[str, ...] = FIGURES) -> dict[str, float]:
    """One draw's a - b per figure under one criterion: at the common point ("<fig>") and
    averaged over the overlap ("<fig>_overlap"); plus the common point itself ("level")."""
    key, sign = CRITERIA[criterion]
    ua, ub = _series(ends_a, key, sign), _series(ends_b, key, sign)
    if not (np.isfinite(ua).all() and np.isfinite(ub).all()):
        return {"level": np.nan, **{f: np.nan for f in figures},
                **{f"{f}_overlap": np.nan for f in figures},
                **{f"{f}_arms": (np.nan, np.nan) for f in figures},
                **{f"{f}_overlap_arms": (np.nan, np.nan) for f in figures}}
    out: dict[str, float] = {}
    if sign is None:  # generalization gap: interpolate at the common gap, budget order
        level = float(min(ua.max(), ub.max()))
        out["level"] = level
        for f in figures:
            ya, yb = _series(ends_a, f, None), _series(ends_b, f, None)
            (va, sa), (vb, sb) = at_fit(ua, ya, level), at_fit(ub, yb, level)
            out[f], out[f"{f}_arms"], out[f"{f}_overlap"] = va - vb, (va, vb), np.nan
            out[f"{f}_overlap_arms"] = (np.nan, np.nan)
            # where the value is read (0-based, budget order): not a Pareto choice, so no
            # "_source" (whose draw-to-draw changes `_flips` counts)
            out[f"{f}_position"] = (sa - 1.0, sb - 1.0)
        return out
    level, grid = common_point(ua, ub)
    out["level"] = level * sign
    levels = np.concatenate([[level], grid])
    for f in figures:
        ya, yb = _series(ends_a, f, None), _series(ends_b, f, None)
        pa, pb = pareto_grid(ua, ya, levels), pareto_grid(ub, yb, levels)
        d = pa - pb
        out[f] = float(d[0])
        out[f"{f}_arms"] = (float(pa[0]), float(pb[0]))
        out[f"{f}_source"] = (pareto_source(ua, ya, level), pareto_source(ub, yb, level))
        out[f"{f}_overlap"] = float(np.mean(d[1:])) if grid.size else np.nan
        # each arm's own average over the overlap (what a rule building the difference from
        # its arms reads: intervals.mover_ci)
        out[f"{f}_overlap_arms"] = ((float(np.mean(pa[1:])), float(np.mean(pb[1:])))
                                    if grid.size else (np.nan, np.nan))
    return out


def overtraining(ends: list[dict], budgets: list[int]) -> list[dict]:
    """Budget steps where the AUC rises by at least 1 point while held-out accuracy gains
    less than a quarter of that (point estimates): leakage grows at nearly flat utility,
    the arm overtrains there."""
    out = []
    for i in range(len(ends) - 1):
        du = ends[i + 1]["out_acc_clean"] - ends[i]["out_acc_clean"]
        dy = ends[i + 1]["auc_all"] - ends[i]["auc_all"]
        if dy >= OVERTRAIN[1] and du < OVERTRAIN[0] * dy:
            out.append({"from": budgets[i], "to": budgets[i + 1], "heldout_gain": float(du),
                        "auc_gain": float(dy)})
    return out


def compare(draws_a: list[list[dict]], draws_b: list[list[dict]], plan) -> dict:
    """a - b under every criterion (point = draw 0, interval from the draws via `plan`,
    bnmem.attack.intervals.IntervalPlan, each figure tagged with its read: "@common",
    "@overlap", "@equal", as `mixed` picks its rule per read), plus a - b at every equal
    budget."""
    out: dict = {"criteria": {}, "equal_budget": []}
    # the Pareto flips are counted over the designs they always were: not the halves' and
    # delete-d rows (figures of 3-6 of the pairs, drawn for one rule alone)
    part = {i for d in ("halves", *DELETED_DESIGNS) for i in range(*plan.segments.get(d, (0, 0)))}
    for crit in CRITERIA:
        rows = [draw_compare(a, b, crit) for a, b in zip(draws_a, draws_b)]
        whole = [r for i, r in enumerate(rows) if i not in part]
        c: dict = {"level": rows[0]["level"], "figures": {}}
        for f in FIGURES:
            # tagged "<figure>/<criterion>@<read>": a rule studied under some criteria only
            # (intervals.DELETED_STUDIED) falls back under the others
            c["figures"][f] = {"at_common": _summary([r[f] for r in rows], plan,
                                                     f"{f}/{crit}@common", _arms(rows, f"{f}_arms")),
                               "overlap": _summary([r[f"{f}_overlap"] for r in rows], plan,
                                                   f"{f}/{crit}@overlap",
                                                   _arms(rows, f"{f}_overlap_arms")),
                               # each arm's own value there (point estimates): the floor rule
                               "arms_at_common": [None if not np.isfinite(v) else float(v)
                                                  for v in rows[0][f"{f}_arms"]],
                               # share of draws whose Pareto minimum comes from another
                               # endpoint or segment than the point's, per arm
                               "pareto_flips": _flips(whole, f),
                               # where draw 0's value at the common point comes from, per
                               # arm: endpoint i (i) or between i and i + 1 (fractional)
                               "source_at_common": [None if not np.isfinite(v) else float(v)
                                                    for v in rows[0].get(
                                                        f"{f}_source", rows[0].get(
                                                            f"{f}_position", (np.nan, np.nan)))]}
        out["criteria"][crit] = c
    for i in range(len(draws_a[0])):
        out["equal_budget"].append({f: _summary([a[i][f] - b[i][f] for a, b in
                                                 zip(draws_a, draws_b)], plan, f"{f}@equal",
                                                ([a[i][f] for a in draws_a],
                                                 [b[i][f] for b in draws_b]))
                                    for f in FIGURES})
    # the primary criterion's AUC difference over draw 0's overlap, with its band
    key, sign = CRITERIA[PRIMARY]
    ua0, ub0 = _series(draws_a[0], key, sign), _series(draws_b[0], key, sign)
    _, grid = common_point(ua0, ub0)
    curve = np.array([pareto_grid(_series(a, key, sign), _series(a, "auc_all", None), grid)
                      - pareto_grid(_series(b, key, sign), _series(b, "auc_all", None), grid)
                      for a, b in zip(draws_a, draws_b)]).reshape(len(draws_a), -1)
    # each grid point reads the common point's rule for a figure not studied there
    # (`auc_all@common` is not in intervals.DELETED_STUDIED: jacksum under `mixed`; the
    # real-shadow rule was calibrated at the common point of each criterion alone)
    band = [plan.ci(curve[0, g], curve[:, g], "auc_all@common") for g in range(grid.size)]
    out["curve"] = {"heldout": grid.tolist(), "auc_all": curve[0].tolist(),
                    "lo": [b[0] for b in band], "hi": [b[1] for b in band]}
    return out


SUPPORT_KEYS = ("supported", "fp_pairs", "fp_samples", "fp_models", "tp_pairs", "tp_samples")


def endpoint_support(scores: list[np.ndarray], keep: np.ndarray) -> list[dict]:
    """Per endpoint (its headline-attack scores [m, N], `mitigation.endpoint_scores`' order):
    who supports its TPR at FPR 1e-3 (bnmem.attack.roc.operating_support: distinct samples
    and models behind its false and true positives)."""
    from bnmem.attack.roc import operating_support
    return [{k: operating_support(s, keep, {"1e-3": 1e-3})["1e-3"][k] for k in SUPPORT_KEYS}
            for s in scores]


def unsupported(rec: dict) -> dict:
    """An interval record whose TPR has too little support to be read: no value, interval
    or rule, and no arms (a difference's, `IntervalPlan.summary`) that could be read back;
    its design SDs stay."""
    return {**{k: v for k, v in rec.items() if k != "arms"},
            "value": None, "lo": None, "hi": None, "rule": None}


def require_support(holder: dict, key: str, supports) -> None:
    """holder[key], a TPR's interval record (a KeyError where there is none), becomes
    `unsupported` unless every one of `supports` (the support records of the TPRs it rests
    on: operating_support's) says supported; a None among them, a TPR with no support
    record, has no value there either. The one gate of every TPR read: the headline's per
    arm and those at equal epochs (bnmem.attack.stage), each endpoint's (apply_support) and
    the frontier's comparisons (compare_support)."""
    if holder[key] is not None and not all(s is not None and s["supported"] for s in supports):
        holder[key] = unsupported(holder[key])


def apply_support(endpoints: list[dict], support: list[dict]) -> None:
    """Each endpoint row (`arm_endpoints`) gets its TPR's support; an unsupported TPR (its
    false positives from < 10 distinct samples) has no value, as the headline's."""
    for row, sup in zip(endpoints, support):
        row["tpr_low_support"] = sup
        require_support(row, "tpr_low_all", [sup])


def compare_support(cmp: dict, support_a: list[dict], support_b: list[dict]) -> None:
    """A frontier comparison (`compare`) gets, for TPR at 1e-3 at each criterion's common
    point, the support of the endpoints its value rests on per arm (draw 0's Pareto source
    or, for the gap, its interpolation position: one endpoint, or the two it lies
    between); the difference has no value where one of them is unsupported. The overlap
    average has none where any endpoint of either arm is unsupported (conservative: which
    endpoints the Pareto frontier reads varies along the overlap and between draws), an
    equal-budget difference none where either of its two endpoints is. Only draw 0's
    sources are checked: a draw whose minimum moves to an unsupported endpoint still
    counts in the interval (`pareto_flips` says how often minima move)."""
    for c in cmp["criteria"].values():
        f = c["figures"]["tpr_low_all"]
        rows = []
        for src, sup in zip(f.get("source_at_common") or (None, None), (support_a, support_b)):
            idx = [] if src is None else sorted({int(np.floor(src)), int(np.ceil(src))})
            rows.append([{"endpoint": i, **sup[i]} for i in idx if 0 <= i < len(sup)] or None)
        f["support_at_common"] = rows
        # an arm with no source there (None) rests on no supported endpoint
        require_support(f, "at_common", [x for r in rows for x in (r or [None])])
        require_support(f, "overlap", support_a + support_b)
    for i, row in enumerate(cmp["equal_budget"]):
        require_support(row, "tpr_low_all", [support_a[i], support_b[i]])


def _flips(rows: list[dict], f: str) -> list[float | None]:
    """Per arm, the share of draws (after draw 0) whose Pareto source at the common point
    differs from draw 0's; None where draw 0 has none (no utility criterion)."""
    key = f"{f}_source"
    if key not in rows[0] or len(rows) < 2:
        return [None, None]
    out = []
    for j in range(2):
        s0 = rows[0][key][j]
        if not np.isfinite(s0):
            out.append(None)
            continue
        src = np.array([r[key][j] if key in r else np.nan for r in rows[1:]], float)
        ok = np.isfinite(src)
        out.append(float((src[ok] != s0).mean()) if ok.any() else None)
    return out


def arm_endpoints(draws: list[list[dict]], budgets: list[int], plan) -> list[dict]:
    """Per endpoint (budget order): its epochs and every endpoint figure with its interval."""
    out = []
    for i, b in enumerate(budgets):
        row: dict = {"epochs": int(b)}
        for f in ENDPOINT_FIGURES:
            s = _summary([d[i][f] for d in draws], plan, f)
            if f not in ("train_loss", "gen_gap") and s["lo"] is not None:
                low = -1.0 if f.startswith("fz_") else 0.0
                s["lo"], s["hi"] = max(s["lo"], low), min(s["hi"], 1.0)
            row[f] = s
        out.append(row)
    return out


def _arms(rows: list[dict], key: str) -> tuple[list, list]:
    """Each arm's draws of a figure (draw_compare's "<figure>_arms" pairs), in draw order."""
    return [r[key][0] for r in rows], [r[key][1] for r in rows]


def _summary(vals, plan, figure: str, arms=None) -> dict:
    return plan.summary(vals, figure, arms)
