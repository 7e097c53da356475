"""The report stage's figures: target-model differences (samples resampled), gradient
norms per kind at equal epochs and at matched fit, the gamma/sigma statistic, and the
claims table with the evidence behind every verdict (bnmem.report.verdict)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from bnmem.core.kinds import CLEAN, KINDS
from bnmem.attack.intervals import percentile_ci
from bnmem.attack.matched import at_fit, common_fit
from bnmem.attack.frontier import LABELS, PRIMARY
from bnmem.report.verdict import (
    EQUAL_ONLY, EQUAL_UNMATCHED, NOT_REPRODUCED, NOT_TESTABLE, REVERSED, Evidence, holm, judge,
    judge_criteria, judge_share, p_values,
)

GRAD_KINDS = {k: v for k, v in KINDS.items() if v != CLEAN}


def paired_acc_delta(correct_a: np.ndarray, correct_b: np.ndarray, mask: np.ndarray,
                     n_boot: int, rng: np.random.Generator) -> dict | None:
    """mean(a) - mean(b) over `mask` samples, paired bootstrap 95 % CI (samples only)."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return None
    diff = correct_a[idx].astype(float) - correct_b[idx].astype(float)
    lo, hi = percentile_ci(diff[rng.integers(0, idx.size, (n_boot, idx.size))].mean(1))
    return {"value": float(diff.mean()), "lo": lo, "hi": hi, "interval": "samples"}


def _ratio(norms: np.ndarray, sel_k: np.ndarray, sel_c: np.ndarray) -> np.ndarray:
    """median(norms | kind) / median(norms | clean) over the last axis of the selections."""
    return np.median(norms[..., sel_k], -1) / np.median(norms[..., sel_c], -1)


def grad_comparison(norms_a: np.ndarray, norms_b: np.ndarray, fit_a: np.ndarray,
                    fit_b: np.ndarray, epochs: np.ndarray, kind: np.ndarray, code: int,
                    n_boot: int, rng: np.random.Generator) -> dict | None:
    """[median(a|kind)/median(a|clean)] / [same for b], at the final checkpoint and at
    matched fit, each with a paired bootstrap 95 % CI over samples (within kinds).

    norms_* [checkpoints, N]; fit_* [checkpoints]: the target model's clean train accuracy
    at each checkpoint; epochs [checkpoints]: their epochs (both arms save the same ones). Matched fit: the ratio interpolated between checkpoints at the
    lower of the two final fits (nan when it lies below an arm's first checkpoint).
    """
    ik, ic = np.flatnonzero(kind == code), np.flatnonzero(kind == CLEAN)
    if ik.size == 0 or ic.size == 0:
        return None
    sk = np.vstack([ik, ik[rng.integers(0, ik.size, (n_boot, ik.size))]])  # row 0: no resampling
    sc = np.vstack([ic, ic[rng.integers(0, ic.size, (n_boot, ic.size))]])
    ra = np.stack([_ratio(norms_a[:, None, :], k, c) for k, c in zip(sk, sc)])  # [B+1, C]
    rb = np.stack([_ratio(norms_b[:, None, :], k, c) for k, c in zip(sk, sc)])
    ra, rb = ra.reshape(len(sk), -1), rb.reshape(len(sk), -1)
    equal = ra[:, -1] / rb[:, -1]
    target = common_fit(fit_a, fit_b)
    matched = np.array([at_fit(fit_a, x, target)[0] / at_fit(fit_b, y, target)[0]
                        for x, y in zip(ra, rb)])
    out = {"equal_epochs": _est(equal), "matched_fit": _est(matched)}
    out["matched_fit"].update(fit=target, epoch_a=at_fit(fit_a, epochs, target)[0],
                              epoch_b=at_fit(fit_b, epochs, target)[0])
    return out


def _est(vals: np.ndarray) -> dict:
    v = float(vals[0])
    lo, hi = percentile_ci(vals[1:], min_share=0.8)
    return {"value": v if np.isfinite(v) else None, "lo": lo, "hi": hi, "interval": "samples"}


def target_matched(curves: dict[str, pd.DataFrame], pairs: list[tuple[str, str]]) -> dict:
    """Target models: flipped / OOD memorization of each pair interpolated at their common
    clean train accuracy (one model per arm: a description, no interval)."""
    out = {}
    for a, b in pairs:
        fa, fb = curves[a]["clean_train_acc"].to_numpy(), curves[b]["clean_train_acc"].to_numpy()
        t = common_fit(fa, fb)
        row = {"fit": t, "epoch_a": at_fit(fa, curves[a]["epoch"], t)[0],
               "epoch_b": at_fit(fb, curves[b]["epoch"], t)[0]}
        for key in ("flipped_mem_acc", "ood_mem_acc"):
            va = at_fit(fa, curves[a][key].to_numpy(dtype=float), t)[0]
            vb = at_fit(fb, curves[b][key].to_numpy(dtype=float), t)[0]
            row[key] = float(va - vb) if np.isfinite(va - vb) else None
        out[f"{a}_minus_{b}"] = row
    return out


def gamma_sigma_summary(layers: dict[str, dict]) -> dict | None:
    """The gamma/sigma statistic, defined once: per BN layer (with its type and channel
    count) the share of channels with |gamma|/sigma > 1 and the median ratio; the count of
    layers where most channels are above 1; and the share pooled over all channels (named
    as such: the dense layers hold most channels). None without BN layers."""
    if not layers:
        return None
    per = {name: {"type": v.get("type"), "channels": len(v["ratio"]),
                  "share_above_1": v["share_above_1"], "median_ratio": v["median_ratio"]}
           for name, v in layers.items()}
    ratios = np.concatenate([np.asarray(v["ratio"]) for v in layers.values()])
    return {"layers": per, "n_layers": len(per),
            "n_layers_majority_above_1": sum(v["share_above_1"] > 0.5 for v in per.values()),
            "pooled_share_above_1": float(np.mean(ratios > 1))}


# ---------------------------------------------------------------- claims

def _ev_dict(e: Evidence | None) -> dict | None:
    return None if e is None else {"value": e.value, "lo": e.lo, "hi": e.hi,
                                   "interval": "models+samples" if e.training else "samples",
                                   **({"df": e.df} if e.df is not None else {})}


def _claim(text: str, at: str, equal: Evidence | None, matched: Evidence | None,
           direction: int = 1, threshold: float = 0.0, scale: float = 100.0,
           unit: str = "points", arms: tuple[str, ...] = ("batchnorm", "none"),
           criteria: dict[str, Evidence | None] | None = None,
           floor: tuple[float, list | None, str] | None = None) -> dict:
    """One claims-table row: the evidence and the verdict (bnmem.report.verdict).

    With `criteria` (the annealed-endpoint frontier, bnmem.attack.frontier: {PRIMARY: matched
    held-out accuracy at the common point, "heldout_overlap", "fit", "loss", "gap"}), the
    verdict is judge_criteria at the primary criterion and `matched` (the within-run
    per-epoch matched fit) is a secondary view only; without them, the within-run matched
    fit is judged (`at` says which). at="equal epochs" judges a claim about the end of
    training (accuracy) there. `floor` (value, [arm's, base's value at the primary's common
    point], name): a memorization claim where both arms lie below the floor there cannot
    be tested at matched utility (neither memorizes) and says so."""
    null = 1.0 if unit == "ratio" else 0.0
    disagree: list[str] = []
    if at == "equal epochs":  # a claim about the end of training: no matched point
        verdict = judge(None, equal, direction, threshold, null)
        verdict = NOT_REPRODUCED if verdict == REVERSED else verdict
        decisive = equal
    elif criteria is not None and criteria.get(PRIMARY) is not None:
        primary = criteria[PRIMARY]
        others = {k: e for k, e in criteria.items() if k in DECISIVE_OTHERS}
        verdict, disagree = judge_criteria(equal, primary, others, direction, threshold, null)
        decisive = (equal if verdict in (EQUAL_ONLY, EQUAL_UNMATCHED) or not primary.usable
                    else primary)
        if floor is not None and floor[1] is not None and all(
                v is not None and v < floor[0] for v in floor[1]):
            verdict = (f"{NOT_TESTABLE} (both arms' {floor[2]} < {100 * floor[0]:.0f} points "
                       "there: " + ", ".join(f"{100 * v:.1f}" for v in floor[1]) + ")")
            decisive, disagree = None, []
    else:
        verdict = judge(equal, matched, direction, threshold, null)
        decisive = (equal if verdict in (EQUAL_ONLY, EQUAL_UNMATCHED)
                    or matched is None or not matched.usable else matched)
    ev = {"equal_epochs": _ev_dict(equal), "matched_fit": _ev_dict(matched)}
    if criteria is not None:
        ev["criteria"] = {k: _ev_dict(e) for k, e in criteria.items()}
    p_beyond, p_short = p_values(decisive, direction, threshold, log=unit == "ratio")
    return {"claim": text, "judged_at": at, "arms": list(arms), "direction": direction,
            "threshold": threshold, "scale": scale, "unit": unit, **ev, "verdict": verdict,
            "disagree": disagree, "p_beyond": p_beyond, "p_short": p_short}


def frontier_criteria(membership: dict, pair: str, figure: str) -> dict[str, Evidence | None] | None:
    """The matched criteria of one figure from the annealed-endpoint frontier (None without
    shadow.budgets): the primary at its common point, the primary over the overlap, and fit,
    train loss and generalization gap at their common points."""
    c = ((membership.get("frontier") or {}).get("compare") or {}).get(pair)
    if not c:
        return None
    crit = c["criteria"]

    def ev(name: str, where: str = "at_common") -> Evidence | None:
        return Evidence.of(crit[name]["figures"][figure][where], training=True)
    return {PRIMARY: ev(PRIMARY), f"{PRIMARY}_overlap": ev(PRIMARY, "overlap"),
            "fit": ev("fit"), "fit_overlap": ev("fit", "overlap"), "loss": ev("loss"),
            "gap": ev("gap")}


AT_FRONTIER = f"{LABELS[PRIMARY]} (annealed endpoints)"
# the other criteria the disagreement rule reads (fixed in advance: the primary over its
# overlap, matched fit at its common point and over its overlap); train loss and the
# generalization gap are reported, not judged: both partly measure the memorization tested
DECISIVE_OTHERS = (f"{PRIMARY}_overlap", "fit", "fit_overlap")
MEM_FLOOR = 0.05  # memorization claims: both arms below 5 points at the common point -> not testable


def mem_floor(membership: dict, pair: str, figure: str, name: str) -> tuple | None:
    """(MEM_FLOOR, the two arms' values at the primary's common point, name) or None."""
    c = ((membership.get("frontier") or {}).get("compare") or {}).get(pair)
    if not c:
        return None
    return MEM_FLOOR, c["criteria"][PRIMARY]["figures"][figure].get("arms_at_common"), name
AT_WITHIN = "matched fit (within-run epochs)"


def unfit_arms(fit: dict[str, float | None], floor: float) -> dict[str, float]:
    """{arm: clean-train accuracy} of the arms below the fit rule (missing counts as 0)."""
    return {a: float(v or 0.0) for a, v in fit.items() if (v or 0.0) < floor}


def not_evidence(arms: tuple[str, ...], unfit: dict[str, float], floor: float) -> str | None:
    """The verdict of a comparison involving an arm that missed the fit rule, else None."""
    bad = [a for a in arms if a in unfit]
    if not bad:
        return None
    return "not evidence (" + "; ".join(f"arm {a} did not fit: clean-train accuracy "
                                        f"{unfit[a]:.3f} < {floor:.2f}" for a in bad) + ")"


def claims(membership: dict, grads: dict, gamma: dict | None, seeds: dict | None,
           noise_rate: float, ood_rate: float, fit: dict[str, float | None] | None = None,
           floor: float = 0.0) -> list[dict]:
    """The paper's claims against this run. Memorization and leakage come from the shadow
    models (16 training runs per arm: intervals over models and samples); gradient norms
    from the one target model per arm (samples only, unless seeds add runs). `fit`
    {arm: target clean-train accuracy} and `floor` (the fit rule): a claim comparing an
    arm below it is "not evidence", in both verdict columns."""
    cmp = membership.get("compare", {})
    bn, reg = cmp.get("batchnorm_minus_none", {}), cmp.get("batchnorm_reg_minus_batchnorm", {})

    def ev(c: dict, point: str, key: str) -> Evidence | None:
        return Evidence.of((c.get(point) or {}).get(key), training=True)

    rate = noise_rate + ood_rate
    need = 0.04 if rate >= 0.05 else 0.03
    def crit(pair: str, figure: str):
        return frontier_criteria(membership, pair, figure)

    bn_pair, reg_pair = "batchnorm_minus_none", "batchnorm_reg_minus_batchnorm"
    at = AT_FRONTIER if crit(bn_pair, "auc_all") else AT_WITHIN
    auc_eq, auc_key = (("auc_all", "all queries") if crit(bn_pair, "auc_all")
                       else ("auc_identity", "identity query, the one recorded during training"))
    rows = [
        _claim("BN memorizes flipped labels more (Feldman-Zhang: shadow models' accuracy on "
               "flipped samples with the flipped label when IN minus when OUT, BN - none)",
               at, ev(bn, "equal_epochs", "fz_flipped"), ev(bn, "matched_fit", "fz_flipped"),
               criteria=crit(bn_pair, "fz_flipped"),
               floor=mem_floor(membership, bn_pair, "fz_flipped", "Feldman-Zhang on flipped samples")),
        _claim("BN memorizes OOD images more (Feldman-Zhang IN - OUT on OOD samples, BN - none)",
               at, ev(bn, "equal_epochs", "fz_ood"), ev(bn, "matched_fit", "fz_ood"),
               criteria=crit(bn_pair, "fz_ood"),
               floor=mem_floor(membership, bn_pair, "fz_ood", "Feldman-Zhang on OOD samples")),
        _claim(f"BN raises LiRA AUC by >= {100 * need:.0f} points at {rate:.0%} outliers "
               f"({membership.get('variant')}, all samples; {auc_key})", at,
               ev(bn, "equal_epochs", auc_eq), ev(bn, "matched_fit", "auc_identity"),
               threshold=need, criteria=crit(bn_pair, "auc_all")),
        _claim("BN raises LiRA AUC on clean samples", at, ev(bn, "equal_epochs", "auc_clean"),
               None, criteria=crit(bn_pair, "auc_clean")),
    ]
    across = ((seeds or {}).get("delta_batchnorm_minus_none") or {}) if (seeds or {}).get("n", 1) > 1 else {}
    shadow_grads = (membership.get("grads") or {}).get("compare") or {}
    for name in GRAD_KINDS:
        g = grads.get(f"batchnorm_minus_none_{name}") or {}
        eq = Evidence.of(g.get("equal_epochs"), training=False)
        if name == "flipped" and (across.get("grad_ratio_flipped_clean_ratio") or {}).get("lo") is not None:
            s = across["grad_ratio_flipped_clean_ratio"]  # t-interval over seeds: training runs
            eq = Evidence(s["mean"], s["lo"], s["hi"], True, s["n"] - 1)  # a t(n - 1) interval over the seeds (replicates)
        label = (f"{'Flipped' if name == 'flipped' else 'OOD'} samples have larger gradient "
                 f"norms under BN ({name}/clean median norm ratio, BN / none")
        sg = shadow_grads.get(f"batchnorm_minus_none_{name}")
        if sg:  # shadow models: several training runs, paired by model id
            n = sg["equal_epochs"]["models"]
            rows.append(_claim(f"{label}; {n} shadow models per arm, their IN samples)", AT_FRONTIER,
                               Evidence.of(sg["equal_epochs"], training=True),
                               Evidence.of(g.get("matched_fit"), training=False), threshold=1.0,
                               scale=1.0, unit="ratio",
                               criteria={PRIMARY: Evidence.of(sg["matched_heldout"], training=True)}))
            for d in (rows[-1]["equal_epochs"], rows[-1]["criteria"][PRIMARY]):
                if d:
                    d["interval"] = f"{n} models"
            if rows[-1]["matched_fit"]:
                rows[-1]["matched_fit"]["interval"] = "target model, samples"
            continue
        rows.append(_claim(f"{label})", "matched fit", eq,
                           Evidence.of(g.get("matched_fit"), training=False), threshold=1.0,
                           scale=1.0, unit="ratio"))
    if gamma:
        rows.append({"claim": "gamma/sigma > 1 in most BN layers (layers whose channels are "
                              "mostly above 1, arm batchnorm)", "judged_at": "final model",
                     "arms": ["batchnorm"],
                     "count": [gamma["n_layers_majority_above_1"], gamma["n_layers"]],
                     "verdict": judge_share(gamma["n_layers_majority_above_1"], gamma["n_layers"]),
                     "p_beyond": 1.0, "p_short": 1.0})
    rows += [
        _claim("The gamma/sigma regularizer cuts memorization (Feldman-Zhang on flipped "
               "samples, reg - BN)", AT_FRONTIER if crit(reg_pair, "fz_flipped") else AT_WITHIN,
               ev(reg, "equal_epochs", "fz_flipped"), ev(reg, "matched_fit", "fz_flipped"),
               direction=-1, arms=("batchnorm_reg", "batchnorm"),
               criteria=crit(reg_pair, "fz_flipped"),
               floor=mem_floor(membership, reg_pair, "fz_flipped", "Feldman-Zhang on flipped samples")),
        _claim("... while keeping accuracy within 1 point (shadows' accuracy on clean samples "
               "they did not train on, reg - BN, final epoch)", "equal epochs",
               ev(reg, "equal_epochs", "out_acc_clean"), None, threshold=-0.01,
               arms=("batchnorm_reg", "batchnorm")),
    ]
    unfit = unfit_arms(fit or {}, floor)
    for r in rows:
        if (word := not_evidence(tuple(r["arms"]), unfit, floor)) is not None:
            r["verdict"], r["p_beyond"], r["p_short"] = word, 1.0, 1.0
    adjusted = holm([r["verdict"] for r in rows], [r["p_beyond"] for r in rows],
                    [r["p_short"] for r in rows])
    for r, v in zip(rows, adjusted):
        r["verdict_holm"] = v
    return rows
