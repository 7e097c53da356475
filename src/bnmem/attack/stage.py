"""The attack stage's library entry point: every arm's attacks, their null calibration,
and the intervals (models and samples resampled) that the report's verdicts use.

Two kinds of interval, named in every output:
- `samples`: a stratified bootstrap over pool samples with the shadow models fixed
  (every attack variant, `results/attack.json`); it ignores training randomness.
- `models+samples`: `bnmem.attack.resample`, shadow pairs and samples drawn together
  (the headline attack, memorization and matched fit, `results/membership.json`).
"""
from __future__ import annotations

import logging
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

from bnmem.attack.lira import PairSignals, loo_lira, run_attacks
from bnmem.attack.signals import Signals, load_shadow, memorization, signals
from bnmem.attack import frontier, intervals, mitigation
from bnmem.attack.epsilon import epsilon_lower_bound
from bnmem.attack import grad_claims
from bnmem.core.config import Config
from bnmem.core.recipes import budget_epochs, identity_index
from bnmem.core.io import InputError
from bnmem.attack.matched import load_epochs
from bnmem.attack.intervals import design_levels, real_shadow_recipe, rules_for
from bnmem.attack.resample import arm_draw, arm_summary, compare, draw_plan, epoch_pairs
from bnmem.attack.roc import (
    ROC_GRID, bootstrap_weights, evaluate, paired_deltas, roc_points, roc_summary,
)
from bnmem.core.kinds import RARE, SUBSETS
from bnmem.core.rng import SALT
from bnmem.core.keep import keep_matrix

log = logging.getLogger(__name__)
LIRA_FIXED_BELOW = 64  # shadows per side; the LiRA paper fixes the variance below this


def headline_variant(n_models: int) -> str:
    """The LiRA paper's rule (Carlini et al. 2022, Sec. VI): with fewer than 64 shadow
    models per side a per-example variance is too noisy, so one global variance is used.
    Balanced leave-one-out: each target model's samples have n_models / 2 - 1 shadows on
    either side (the target is left out of its own side, its complement out of the other)."""
    shadows_per_side = n_models // 2 - 1
    return "lira_online_fixed" if shadows_per_side < LIRA_FIXED_BELOW else "lira_online"


def comparison_pairs(arms: tuple[str, ...] | list[str]) -> list[tuple[str, str]]:
    """(arm, base): every arm against `none`, and the regularizer against plain BN."""
    pairs = [(a, "none") for a in arms if a != "none" and "none" in arms]
    if "batchnorm_reg" in arms and "batchnorm" in arms:
        pairs.append(("batchnorm_reg", "batchnorm"))
    return pairs


HEADLINE_DELTAS = {  # pair -> (figure, point) pairs that go to metrics/deltas.json
    "minus_none": (("auc_identity", "equal_epochs"), ("auc_identity", "matched_fit")),
    "batchnorm_reg_minus_batchnorm": (("fz_flipped", "matched_fit"),
                                      ("out_acc_clean", "equal_epochs")),
}


def headline_deltas(membership: dict) -> dict:
    """The differences a reviewer reads in `dvc metrics diff`: with shadow.budgets, the
    matched point is the primary criterion (all-queries AUC, or for the regularizer FZ
    flipped, at matched held-out accuracy between annealed endpoints, common point; the
    within-run matched fit stays in results/); every arm - none headline AUC on the identity
    query (the one recorded during training, so both points measure the same
    attack) at equal epochs and at matched fit (the regularized arm's against none stays in
    results/), and the regularizer's memorization and accuracy against plain BN; value
    and 95 % interval over shadow models and samples, with the df of the interval's t
    quantile where its rule reads Student's t (finite df only; absent: 1.96), so a reader of
    metrics/deltas.json (tools/grid.py) takes the p-value the interval was built with."""
    out = {}
    for pair, row in membership["compare"].items():
        if pair == "batchnorm_reg_minus_none":
            continue
        keys = HEADLINE_DELTAS.get(pair) or (HEADLINE_DELTAS["minus_none"] if pair.endswith("_minus_none") else ())
        fr = ((membership.get("frontier") or {}).get("compare") or {}).get(pair)
        out[pair] = {}
        for fig, point in keys:
            if fr and point == "matched_fit":  # the primary criterion replaces the within-run one
                f = fr["criteria"][frontier.PRIMARY]["figures"][
                    "auc_all" if fig == "auc_identity" else fig]["at_common"]
                out[pair][f"{'auc_all' if fig == 'auc_identity' else fig}_matched_heldout"] = _with_df(f)
                continue
            out[pair][f"{fig}_{point}"] = _with_df((row.get(point) or {}).get(fig, {}))
    return out


def _with_df(rec: dict) -> dict:
    """value, lo, hi of an interval record, and its df where it has one."""
    return {**{k: rec.get(k) for k in ("value", "lo", "hi")},
            **({"df": rec["df"]} if rec.get("df") is not None else {})}


def real_null(sig: Signals, cfg: Config, masks: int) -> dict[str, dict]:
    """Every attack re-run on the arm's real logits with `masks` fake balanced keep
    matrices (complementary pairs, fresh seeds; no model was trained on them), same
    balanced leave-one-pair-out protocol: membership then carries no signal, so every
    variant should score AUC 0.5 and TPR at FPR f about f. Unlike labels permuted after
    scoring (0.5 by construction), this can fail: a protocol bias or a tie-breaking rule
    that favours one side shows here.

    Returns {variant: {"auc": {mean, min, max}, "tpr_at_fpr_1e-3": {...}, "tpr_at_fpr_1e-4":
    {...}, "epsilon_lo": {...} (empirical ε, bnmem.attack.epsilon), "masks": k}}.
    """
    global _NULL  # read by forked workers: nothing is pickled but the results
    seeds = np.random.default_rng([cfg.seed, SALT["null"]]).integers(2 ** 32, size=masks)
    workers = max(1, min(cfg.shadow.workers, masks))
    _NULL = (sig, cfg)
    try:
        if workers > 1 and "fork" in mp.get_all_start_methods():
            import scipy.special  # noqa: F401  (epsilon_lower_bound's, once before the fork)
            with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
                per_mask = list(pool.map(_null_mask, [int(s) for s in seeds]))
        else:
            per_mask = [_null_mask(int(s)) for s in seeds]
    finally:
        _NULL = None
    rows: dict[str, dict[str, list]] = {}
    for figures in per_mask:  # in mask order, as one loop would
        for name, values in figures.items():
            r = rows.setdefault(name, {"auc": [], "tpr_at_fpr_1e-3": [], "tpr_at_fpr_1e-4": [],
                                       "epsilon_lo": []})
            for key, v in values.items():
                r[key].append(v)
    return {name: {**{k: {"mean": float(np.mean(v)), "min": float(np.min(v)),
                          "max": float(np.max(v))} for k, v in r.items()}, "masks": masks}
            for name, r in rows.items()}


_NULL: tuple | None = None  # real_null's (signals, config) for its workers


def _null_mask(seed: int) -> dict[str, dict[str, float]]:
    """One fake mask of real_null: {attack: {auc, tpr_at_fpr_1e-3, tpr_at_fpr_1e-4,
    epsilon_lo}}."""
    sig, cfg = _NULL
    a = cfg.attack
    m, n = sig.keep.shape
    fake = keep_matrix(m, n, seed)
    # pairs (2p, 2p + 1) of the fake mask sit on the models in id order
    null_sig = replace(sig, keep=fake, model_ids=np.arange(m, dtype=np.int64))
    scores = run_attacks(null_sig, a.offline_one_sided, a.rmia_gamma, a.rmia_a,
                         a.rmia_population, seed)
    out = {}
    for name, sc in scores.items():
        summ = roc_summary(*roc_points(sc, fake))
        out[name] = {"auc": float(summ["auc"]),
                     "tpr_at_fpr_1e-3": float(summ["tpr_at_fpr_1e-3"]),
                     "tpr_at_fpr_1e-4": float(summ["tpr_at_fpr_1e-4"]),
                     # no membership signal: the 95 % bound should prove nothing (0) in
                     # >= 95 % of masks
                     "epsilon_lo": epsilon_lower_bound(sc, fake, cfg.dp.delta)["epsilon_lo"]}
    return out


def attack_arms(cfg: Config, labels: np.ndarray, kind: np.ndarray,
                shards: dict[str, list[Path]]) -> dict:
    """Attack every arm. Returns {"scores": {arm: {...arrays}}, "attack": results/attack.json,
    "membership": results/membership.json, "roc": tidy ROC frame, "headline": metrics,
    "attack_deltas": every variant's arm - none difference (samples-only intervals)}."""
    a, queries = cfg.attack, cfg.shadow.queries
    identity = identity_index(queries)
    boot = bootstrap_weights(kind, a.bootstrap, np.random.default_rng([cfg.seed, SALT["bootstrap"]]))
    variant = headline_variant(cfg.shadow.n_models)
    scores, attack, resamples, data, nulls = {}, {}, {}, {}, {}
    roc: dict[str, list] = {"arm": [], "attack": [], "subset": [], "fpr": [], "tpr": []}
    epsilons, accountants, supports = {}, {}, {}
    for arm, paths in shards.items():
        sig = load_shadow(paths, labels, identity)
        if sig.phi.shape[0] != cfg.shadow.n_models or sig.phi.shape[2] != len(queries):
            raise InputError(f"{paths[0].parent}: {sig.phi.shape[0]} models x {sig.phi.shape[2]} "
                             f"queries, params want shadow.n_models={cfg.shadow.n_models} x "
                             f"{len(queries)} queries; re-run the shadow stage")
        s = run_attacks(sig, a.offline_one_sided, a.rmia_gamma, a.rmia_a, a.rmia_population,
                        cfg.seed)
        mem, n_in, n_out = memorization(sig.correct, sig.keep)
        scores[arm] = {**s, "keep": sig.keep, "model_ids": sig.model_ids, "mem_score": mem,
                       "n_in": n_in, "n_out": n_out}
        attack[arm], resamples[arm] = {}, {}
        for name, sc in s.items():
            attack[arm][name], resamples[arm][name], curves = evaluate(sc, sig.keep, kind, boot)
            for sub, tpr in curves.items():
                for col, v in (("arm", arm), ("attack", name), ("subset", sub)):
                    roc[col] += [v] * len(ROC_GRID)
                roc["fpr"] += list(ROC_GRID)
                roc["tpr"] += list(tpr)
        data[arm] = _arm_data(sig, load_epochs(paths, kind.size))
        data[arm]["loss"] = frontier.full_loss(paths, labels, identity)
        data[arm]["budgets"] = frontier.budget_data(paths, labels, identity,
                                                    budget_epochs(cfg), sig.keep, sig.model_ids)
        nulls[arm] = real_null(sig, cfg, a.null_masks)
        ends = mitigation.endpoint_scores(data[arm], s[variant], variant, a.offline_one_sided)
        epsilons[arm] = mitigation.endpoint_epsilons(data[arm], ends, kind, cfg.dp.delta)
        supports[arm] = frontier.endpoint_support(ends, sig.keep)
        accountants[arm] = mitigation.accountant_summary(paths)
    deltas = paired_deltas(attack, resamples, base="none")
    for arm, null in nulls.items():
        for name, row in null.items():
            attack[arm][name]["null"] = row
    membership = _resampled(cfg, data, kind, variant, supports)
    membership["grads"] = _shadow_grads(data, shards, kind)
    fr = membership["frontier"]
    for arm in shards:
        membership["arms"][arm]["empirical_epsilon"] = epsilons[arm][-1]
        fr["arms"][arm]["empirical_epsilon"] = epsilons[arm]
        if accountants[arm] is not None:
            membership["arms"][arm]["dp_accountant"] = accountants[arm]
    membership["mitigations"] = mitigation.table(
        fr.get("mitigations", {}), {arm: fr["arms"][arm]["endpoints"] for arm in shards},
        epsilons, accountants)
    for arm in shards:
        membership["arms"][arm]["null"] = nulls[arm][variant]
        # the headline TPR only where its false positives come from >= 10 distinct samples
        for fig, level in (("tpr_low", "1e-3"), ("tpr_vlow", "1e-4")):
            if f"{fig}_all" not in membership["arms"][arm]:
                continue  # TPR at 1e-4: only from 100 000 negatives on
            support = attack[arm][variant]["all"][f"support_{level}"]
            membership["arms"][arm][f"{fig}_support"] = support
            frontier.require_support(membership["arms"][arm], f"{fig}_all", [support])
    equal_epoch_support(membership)
    headline = {arm: {**{f"auc_{sub}": attack[arm][variant][sub]["auc"]
                         for sub in SUBSETS},
                      "tpr_at_fpr_1e-3_all": attack[arm][variant]["all"]["tpr_at_fpr_1e-3"],
                      # only where supported (>= 10 false positives: the full-scale protocol)
                      **({"tpr_at_fpr_1e-4_all": t} if (t := attack[arm][variant]["all"]
                                                        ["tpr_at_fpr_1e-4"]) is not None else {}),
                      "null_auc": nulls[arm][variant]["auc"]["mean"],
                      # the 95 % lower bound on ε that the attack proves (bnmem.attack.epsilon)
                      "epsilon_lo_all": epsilons[arm][-1]["all"]["epsilon_lo"]}
                for arm in shards}
    return {"scores": scores, "attack": attack, "membership": membership,
            "roc": {k: np.asarray(v) for k, v in roc.items()}, "headline": headline, "attack_deltas": deltas}


def attack_one_arm(cfg: Config, shadow: dict[str, np.ndarray], labels: np.ndarray,
                   kind: np.ndarray) -> tuple[dict, dict | None]:
    """The headline attack on one arm's shadow models (all of them in `shadow`, one shard's
    arrays): its metrics per subset and, with shadow.track_epochs, the per-epoch fit / AUC
    curve (the attack stage's draw 0). Used by `replicate` for each extra seed."""
    s = cfg.shadow
    identity = identity_index(s.queries)
    phi, _, correct = signals(shadow["logits"], labels, identity)
    keep, ids = shadow["keep"], shadow["model_ids"]
    variant = headline_variant(s.n_models)
    scores = loo_lira(phi, keep, ids, cfg.attack.offline_one_sided, (variant,))
    lira, _, _ = evaluate(scores[variant], keep, kind)
    if "epoch_phi" not in shadow:
        return lira, None
    data = {"phi": phi, "keep": keep, "correct": correct, "model_ids": ids,
            "epoch_phi": shadow["epoch_phi"], "epoch_correct": shadow["epoch_correct"]}
    ps = PairSignals.build(phi, keep, ids)
    d0 = arm_draw(data, ps, epoch_pairs(data), np.ones(ps.first.size, np.int64),
                  np.ones(kind.size), kind, variant, cfg.attack.offline_one_sided)
    epochs = shadow.get("tracked_epochs", np.arange(1, shadow["epoch_phi"].shape[1] + 1))
    return lira, {**{k: v.tolist() for k, v in d0["epoch"].items()},
                  "epochs": np.asarray(epochs).tolist()}


def _shadow_grads(data: dict, shards: dict[str, list[Path]], kind: np.ndarray) -> dict | None:
    """The gradient claims' evidence over shadow models (bnmem.attack.grad_claims): per arm and
    corrupted kind the per-model ratios, per pair the ratio of ratios; None without
    shadow.grad_models."""
    from bnmem.core.kinds import FLIPPED, OOD
    per: dict = {}
    for arm, paths in shards.items():
        got = grad_claims.load_norms(paths)
        if got is None:
            return None
        norms, ids = got
        rows = np.searchsorted(data[arm]["model_ids"], ids)
        keep = data[arm]["keep"][rows]
        correct = [b["correct"][rows] for b in data[arm]["budgets"]] + [data[arm]["correct"][rows]]
        if norms.shape[1] != len(correct):
            raise InputError(f"{paths[0]}: grad_norms for {norms.shape[1]} endpoints, "
                             f"{len(correct)} expected; re-run the shadow stage")
        per[arm] = {"ids": ids, "heldout": grad_claims.heldout(correct, keep, kind),
                    **{name: grad_claims.ratios(norms, keep, kind, code)
                       for name, code in (("flipped", FLIPPED), ("ood", OOD))}}
    out: dict = {"models": {a: v["ids"].tolist() for a, v in per.items()}, "arms": {}, "compare": {}}
    for arm, v in per.items():
        out["arms"][arm] = {"heldout": v["heldout"].tolist(), "flipped": v["flipped"].tolist(),
                            "ood": v["ood"].tolist()}
    for a, b in comparison_pairs(list(shards)):
        if not np.array_equal(per[a]["ids"], per[b]["ids"]):
            continue
        for name in RARE:
            out["compare"][f"{a}_minus_{b}_{name}"] = grad_claims.compare(
                per[a][name], per[a]["heldout"], per[b][name], per[b]["heldout"])
    return out


def _arm_data(sig: Signals, epochs: dict | None) -> dict:
    d = {"phi": sig.phi, "keep": sig.keep, "correct": sig.correct, "model_ids": sig.model_ids,
         "epoch_phi": None, "epoch_correct": None}
    if epochs is not None:
        d["epoch_phi"], d["epoch_correct"] = epochs["epoch_phi"], epochs["epoch_correct"]
        d["epochs"] = epochs["epochs"]
    return d


_JOB: tuple | None = None


def _draws(task: tuple[str, np.ndarray]) -> list[dict]:
    """Draws `rows` of one arm (numpy-bound: they run in forked processes, not threads)."""
    (arm, rows), (data, ps, eps, counts, weights, kind, variant, one_sided, levels) = task, _JOB
    out, caches = [], [{} for _ in range(len(data[arm]["budgets"]) + 1)]
    for r in rows:
        level = next((lv for (a, b), lv in levels if a <= r < b), "full")
        d = arm_draw(data[arm], ps[arm], eps[arm], counts[r], weights[r], kind, variant,
                     one_sided, caches[-1], level)
        # the annealed endpoints (shadow.budgets), then this run's: the frontier's points
        d["endpoints"] = [arm_draw(b, bps, [], counts[r], weights[r], kind, variant, one_sided,
                                   cache, level)
                          for b, bps, cache in zip(data[arm]["budgets"], ps[f"{arm}/budgets"],
                                                   caches)]
        d["endpoints"].append({k: v for k, v in d.items() if k not in ("epoch", "endpoints")})
        out.append(d)
    return out


def equal_epoch_support(membership: dict) -> None:
    """A TPR difference at equal epochs (membership's compare/<a>_minus_<b>/equal_epochs) only
    where both arms' TPR at its FPR is supported (arms/<arm>/tpr_*_support), as the
    frontier's differences (frontier.compare_support): else no value, interval or arms."""
    arms = membership["arms"]
    for key, cmp in membership.get("compare", {}).items():
        ab = [(a, b) for a in arms for b in arms if f"{a}_minus_{b}" == key]
        if len(ab) != 1:
            raise RuntimeError(f"compare/{key}: names no two arms of {sorted(arms)}")
        equal = cmp.get("equal_epochs", {})
        for fig in ("tpr_low", "tpr_vlow"):
            if f"{fig}_all" in equal:  # TPR at 1e-4: only from 100 000 negatives on
                # an arm without a support record has no TPR at that FPR: nor has the difference
                frontier.require_support(equal, f"{fig}_all",
                                         [arms[x].get(f"{fig}_support") for x in ab[0]])


def _resampled(cfg: Config, data: dict[str, dict], kind: np.ndarray, variant: str,
               supports: dict[str, list[dict]] | None = None) -> dict:
    """The models+samples bootstrap of every arm and every comparison (bnmem.attack.resample).
    supports: per arm, its endpoints' TPR support (frontier.endpoint_support), which every
    frontier TPR carries (and lacks a value without)."""
    arms = list(data)
    keeps = [data[arm]["keep"] for arm in arms]
    if any(not np.array_equal(keeps[0], k) for k in keeps[1:]):
        raise InputError("arms' shadow models have different keep masks; re-run the shadow "
                         "stages with one seed and shadow.n_models")
    ps = {arm: PairSignals.build(d["phi"], d["keep"], d["model_ids"]) for arm, d in data.items()}
    ps.update({f"{arm}/budgets": [PairSignals.build(b["phi"], b["keep"], b["model_ids"])
                                  for b in d["budgets"]] for arm, d in data.items()})
    n_pairs = ps[arms[0]].first.size
    rng = np.random.default_rng([cfg.seed, SALT["model_bootstrap"]])
    recipe = real_shadow_recipe(cfg.dataset, cfg.arch)  # the real-shadow rules' recipe
    counts, weights, plan = draw_plan(kind, n_pairs, cfg.attack.model_bootstrap, rng,
                                      cfg.attack.interval, recipe)
    one_sided = cfg.attack.offline_one_sided

    eps = {arm: epoch_pairs(d) for arm, d in data.items()}  # sorted once, before the fork
    # procedure mixed reads some designs' rows only for the endpoints' figures, or only for
    # those a lean draw computes (bnmem.attack.intervals.design_levels, arm_draw's level)
    levels = ([(tuple(plan.segments[d]), lv) for d, lv in design_levels().items()
               if d in plan.segments] if plan.procedure == "mixed" else [])
    workers = max(1, min(cfg.shadow.workers, len(arms)))
    tasks = [(arm, part) for arm in arms for part in np.array_split(np.arange(len(counts)), 4)]
    # forked workers read the inputs as _JOB: nothing is pickled but the results
    done = _forked(_draws, tasks, (data, ps, eps, counts, weights, kind, variant, one_sided,
                                   levels), workers)
    draws = {arm: [d for (a, _), part in zip(tasks, done) if a == arm for d in part]
             for arm in arms}
    out: dict = {"variant": variant, "interval": "models+samples",
                 "procedure": plan.procedure, "segments": {k: list(v) for k, v in plan.segments.items()},
                 # mixed's rule per figure family and read at this pair count
                 # (bnmem.attack.intervals.rules_for)
                 "rules": ({f"{fam}@{read}": proc
                            for (fam, read), proc in rules_for(
                                int(n_pairs), int(cfg.attack.model_bootstrap), recipe).items()}
                           if plan.procedure == "mixed" else {}),
                 "draws": int(cfg.attack.model_bootstrap), "pairs": int(n_pairs),
                 "shadows_per_side": int(n_pairs - 1), "arms": {}, "compare": {}}
    for arm in arms:
        out["arms"][arm] = arm_summary(draws[arm], plan)
        if "epoch" in out["arms"][arm]:  # the epochs the within-run curve was recorded at
            out["arms"][arm]["epoch"]["epochs"] = data[arm]["epochs"].tolist()
    for a, b in comparison_pairs(arms):
        # an arm outside the real shadows' (GroupNorm, LayerNorm, DP) reads the fallbacks
        out["compare"][f"{a}_minus_{b}"] = compare(
            draws[a], draws[b], plan=intervals.for_arms(plan, a, b),
            epochs_at=(data[a].get("epochs"), data[b].get("epochs")))
    budgets = [*budget_epochs(cfg), cfg.train.epochs]
    ends = {arm: [d["endpoints"] for d in draws[arm]] for arm in arms}
    # every frontier comparison (the arm pairs, then each arm against BN for the
    # mitigations table) on the forked workers too: each is ~1 s of numpy-bound loops
    pairs = comparison_pairs(arms) if len(budgets) > 1 else []
    pairs += [p for p in mitigation.mitigation_pairs(arms) if len(budgets) > 1 and p not in pairs]
    compared = dict(zip(pairs, _forked(_frontier_compare, pairs, (ends, plan), workers)))
    if supports:
        for (a, b), cmp in compared.items():
            frontier.compare_support(cmp, supports[a], supports[b])
    out["frontier"] = {
        "budgets": budgets, "primary": frontier.PRIMARY,
        "arms": {arm: {"endpoints": frontier.arm_endpoints(ends[arm], budgets, plan),
                       "overtraining": frontier.overtraining(ends[arm][0], budgets)}
                 for arm in arms},
        "compare": {f"{a}_minus_{b}": compared[a, b] for a, b in comparison_pairs(arms)
                    if (a, b) in compared}}
    if supports:
        for arm in arms:
            frontier.apply_support(out["frontier"]["arms"][arm]["endpoints"], supports[arm])
    if len(budgets) > 1:  # every arm against BN (the mitigations table)
        out["frontier"]["mitigations"] = mitigation.compare_pairs(
            ends, plan, arms, {f"{a}_minus_{b}": c for (a, b), c in compared.items()})
    return out


def _frontier_compare(pair: tuple[str, str]) -> dict:
    (a, b), (ends, plan) = pair, _JOB
    return frontier.compare(ends[a], ends[b], intervals.for_arms(plan, a, b))


def _forked(fn, items: list, job: tuple, workers: int) -> list:
    """[fn(item) for item in items], on `workers` forked processes where there are more
    than one and fork exists; `job` is the module's _JOB while they run (read, not pickled)."""
    global _JOB
    _JOB = job
    try:
        if workers > 1 and len(items) > 1 and "fork" in mp.get_all_start_methods():
            with ProcessPoolExecutor(min(workers, len(items)),
                                     mp_context=mp.get_context("fork")) as pool:
                return list(pool.map(fn, items))
        return [fn(item) for item in items]
    finally:
        _JOB = None
