"""Per-sample exposure of a trained model, and the attack on your own trained model.

Exposure of training sample i in model f: how unusual f's logit margin on i is for models
that never saw i. With the arm's OUT shadow models as that reference (a Gaussian per
sample, as offline LiRA fits it), exposure_i = -log10 P(phi' >= phi_i | OUT), averaged
over the query views: exposure 3 means a model trained without the sample reaches this
margin with probability 1e-3. It needs no retraining of f, so it applies to the arm's
target model (trained on the whole pool) and to your own trained model alike; with known
members (`--members`), the same score and offline RMIA are membership attacks with an AUC.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bnmem.attack.lira import (
    LIRA_VARIANTS, complement_partner, fit_gaussians, loo_lira, score_lira,
)
from bnmem.attack.signals import Signals, load_shadow, memorization, signals
from bnmem.core.config import Config
from bnmem.core.recipes import identity_index
from bnmem.core.records import ModelSpec
from bnmem.core.kinds import KINDS, YOURS
from bnmem.core.io import InputError
from bnmem.attack.stage import headline_variant
from bnmem.attack.rmia import rmia_scores
from bnmem.core.rng import SALT
from bnmem.attack.roc import FPR_LEVELS, operating_support, roc_points, roc_summary

if TYPE_CHECKING:  # torch only where a model runs (your own model: target_signals)
    import torch
    from torch import nn

LN10 = float(np.log(10.0))
CAL_LEVELS = (2, 3, 4)  # exposure levels of the calibration table (nominal share 10^-k)
KIND_NAMES = {code: name for name, code in KINDS.items()}


@dataclass(frozen=True)
class TargetSignals:
    phi: np.ndarray      # [N, Q] float64 logit margin of the target model
    logp: np.ndarray     # [N] float64 log Pr(y | x), averaged over queries
    correct: np.ndarray  # [N] bool, identity-query prediction == training label


def target_signals(model: nn.Module, x: torch.Tensor, labels: np.ndarray,
                   queries: tuple[str, ...], spec: ModelSpec | None = None) -> TargetSignals:
    """The target's signals on the pool, with the shadow stage's query views (eval mode).

    With the model's `spec` a LeNet is queried as the shadows are, through the C
    eval forward (bnmem.train.stacked.eval_logits: the same logits on every CPU vendor); other
    models through PyTorch's forward."""
    from bnmem.train.stacked import query_logits
    return logits_signals(query_logits(model, x, queries, spec), labels, queries)


def logits_signals(logits: np.ndarray, labels: np.ndarray, queries: tuple[str, ...]
                   ) -> TargetSignals:
    """TargetSignals from a model's query logits [N, Q, C] (query_logits)."""
    phi, logp, correct = signals(np.asarray(logits)[None], labels, identity_index(queries))
    return TargetSignals(phi[0], logp[0], correct[0])


def headline_variance(cfg: Config) -> str:
    """The headline rule: one global variance below 64 shadows per side."""
    return LIRA_VARIANTS[headline_variant(cfg.shadow.n_models)][1]


def exposure(target: TargetSignals, shadows: Signals, cfg: Config) -> np.ndarray:
    """[N] exposure = -log10 P(phi' >= phi | OUT) (one-sided offline LiRA, in decades)."""
    g = fit_gaussians(shadows.phi, shadows.keep)
    lira = score_lira(target.phi, g, online=False, variance=headline_variance(cfg),
                      one_sided=True)
    return lira / LN10


@dataclass(frozen=True)
class ExposureNull:
    """An arm's empirical null of raw exposure: every shadow model in turn as the target,
    scored against the other pairs (balanced leave-one-pair-out), on its own non-members."""
    values: np.ndarray  # [K] raw exposures of (shadow, non-member) pairs
    pair: np.ndarray    # [K] the shadow pair each value comes from (for held-out checks)
    sample: np.ndarray | None = None  # [K] the pool sample of each value (tables by kind)

    @classmethod
    def build(cls, shadows: Signals, cfg: Config) -> "ExposureNull":
        variance = headline_variance(cfg)
        name = next(n for n, (online, v) in LIRA_VARIANTS.items() if not online and v == variance)
        raw = loo_lira(shadows.phi, shadows.keep, shadows.model_ids, one_sided=True,
                       variants=(name,))[name] / LN10
        partner = complement_partner(shadows.keep, shadows.model_ids)
        pair = np.minimum(np.arange(partner.size), partner)[:, None]
        out = ~shadows.keep
        sample = np.broadcast_to(np.arange(out.shape[1])[None], out.shape)[out]
        return cls(raw[out], np.broadcast_to(pair, out.shape)[out], sample)

    def calibrate(self, raw: np.ndarray, exclude_pair: int | None = None) -> np.ndarray:
        """Calibrated exposure -log10 p, p = (1 + #null >= raw) / (1 + #null): a non-member
        reaches >= k with probability <= 10^-k whatever the Gaussian's fit; at most
        log10(1 + #null) (beyond every null value)."""
        ref = self.values if exclude_pair is None else self.values[self.pair != exclude_pair]
        ref = np.sort(ref)
        above = ref.size - np.searchsorted(ref, raw, side="left")  # null values >= raw
        return -np.log10((1.0 + above) / (1.0 + ref.size))

    def table(self, kind: np.ndarray | None = None) -> dict:
        """Share of held-out non-members at or above each level: raw (the Gaussian tail)
        and calibrated, each pair's values calibrated against the other pairs' null; with
        `kind` [N], also per sample kind. The guarantee is marginal over the pool's mix of
        samples: the per-kind shares show how far a kind departs from it (flipped and OOD
        non-members are few, so their shares are coarse)."""
        cal = np.empty_like(self.values)
        for p in np.unique(self.pair):
            sel = self.pair == p
            cal[sel] = self.calibrate(self.values[sel], exclude_pair=int(p))

        def shares(sel: np.ndarray) -> dict:
            return {str(k): {"nominal": 10.0 ** -k, "raw": float((self.values[sel] >= k).mean()),
                             "calibrated": float((cal[sel] >= k - 1e-12).mean())}
                    for k in CAL_LEVELS}
        out = {"n": int(self.values.size), "cap": float(np.log10(1.0 + self.values.size)),
               "levels": shares(np.ones(self.values.size, bool))}
        if kind is not None and self.sample is not None:
            k_of = np.asarray(kind)[self.sample]
            out["by_kind"] = {name: {"n": int((k_of == code).sum()), "levels": shares(k_of == code)}
                              for name, code in KINDS.items() if (k_of == code).any()}
        return out


def offline_rmia(target: TargetSignals, shadows: Signals, cfg: Config) -> np.ndarray:
    """[N] offline RMIA score of the target against the arm's shadows as reference models."""
    a = cfg.attack
    n = target.logp.size
    rng = np.random.default_rng([cfg.seed, SALT["audit_population"]])
    population = rng.choice(n, size=min(a.rmia_population, n // 2), replace=False)
    return rmia_scores(target.logp, shadows.logp, shadows.keep, population, a.rmia_gamma,
                       online=False, a=a.rmia_a)


def top_exposed(scores: dict[str, np.ndarray], k: int) -> dict[str, list[int]]:
    """{arm: pool indices of its k most exposed samples, most exposed first} (ties by index).
    Pass raw exposures: calibration is monotone in them, and they still order the samples
    that calibrated exposure ties at the null's cap."""
    return {arm: np.lexsort((np.arange(s.size), -s))[:k].tolist() for arm, s in scores.items()}


def exposure_rows(top: list[int], scores: dict[str, np.ndarray], labels: np.ndarray,
                  kind: np.ndarray, mem: dict[str, np.ndarray], index: np.ndarray,
                  ref: str, rank_by: dict[str, np.ndarray]) -> list[dict]:
    """One row per sample of `top`: identity, label, kind, memorization score in `ref`,
    and its exposure and rank (1 = most exposed, ranked by `rank_by`: the raw exposures,
    whose order calibration keeps; see `top_exposed`) in every arm."""
    ranks = {a: np.empty(s.size, np.int64) for a, s in rank_by.items()}
    for a, s in rank_by.items():
        ranks[a][np.lexsort((np.arange(s.size), -s))] = np.arange(1, s.size + 1)
    rows = []
    for i in top:
        m = mem.get(ref)
        rows.append({"pool_index": int(i), "source_index": int(index[i]),
                     "label": int(labels[i]), "kind": KIND_NAMES[int(kind[i])],
                     "mem_score": None if m is None or np.isnan(m[i]) else float(m[i]),
                     "exposure": {a: float(s[i]) for a, s in scores.items()},
                     "rank": {a: int(r[i]) for a, r in ranks.items()}})
    return rows


def distribution(scores: np.ndarray) -> dict[str, float]:
    """Quantiles of a score over the pool (what an audit without members can report)."""
    q = np.quantile(scores, [0.0, 0.1, 0.5, 0.9, 0.99, 1.0])
    return dict(zip(("min", "p10", "median", "p90", "p99", "max"), map(float, q)))


def membership_metrics(scores: np.ndarray, member: np.ndarray) -> dict:
    """AUC and TPR at low FPR of one target's scores against known membership (where the
    non-members support them). Calibration of the reference: `calibration`."""
    fpr, tpr = roc_points(scores[None], member[None])
    out = {k: float(v) for k, v in roc_summary(fpr, tpr).items()}
    scored = ~np.isnan(scores)  # RMIA's population is reference only
    n_neg = int((~member & scored).sum())
    support = operating_support(scores[None], member[None])
    for key in FPR_LEVELS:  # only where >= 10 distinct non-members are false positives
        out[f"support_{key}"] = support[key]
        if not support[key]["supported"]:
            out[f"tpr_at_fpr_{key}"] = None
    out.update(n_members=int((member & scored).sum()), n_nonmembers=n_neg)
    return out


def calibration(nonmember_exposure: np.ndarray) -> dict[str, float]:
    """How well the shadows' OUT distribution describes your model's non-members: their
    exposure is -log10 of a uniform p-value when it does (median log10 2 = 0.30, 1 % at
    or above 2); a larger median means the reference under-states your model's margins
    (its exposures read high), a smaller one that it over-states them."""
    return {"nonmember_median": float(np.median(nonmember_exposure)),
            "nonmember_share_at_least_2": float((nonmember_exposure >= 2).mean()),
            "expected_median": float(np.log10(2.0)), "expected_share_at_least_2": 0.01}


def read_members(path: Path, index: np.ndarray) -> tuple[np.ndarray, int]:
    """(bool [N] membership of the pool's samples, how many indices the file lists) from a
    file of source-row indices (.npy integer array, or text: one index per line)."""
    try:
        idx = (np.load(path, allow_pickle=False) if path.suffix == ".npy"
               else np.loadtxt(path, dtype=np.int64, ndmin=1))
    except (OSError, ValueError) as exc:
        raise InputError(f"audit members: {path}: not readable as integer indices "
                         f"({type(exc).__name__}); give a .npy int array or one index per line") from None
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise InputError(f"audit members: {path}: expected a 1-d integer array of row indices, "
                         f"got {idx.dtype} {list(idx.shape)}")
    if idx.size and idx.min() < 0:
        raise InputError(f"audit members: {path}: negative index {int(idx.min())}; indices are "
                         "rows of your dataset's training images (x), from 0")
    if np.unique(idx).size != idx.size:
        raise InputError(f"audit members: {path}: repeated indices")
    member = np.isin(index, idx)
    if not member.any():
        raise InputError(f"audit members: {path}: none of its {idx.size} indices is a row of "
                         "the pool (rows of your dataset's x, from 0)")
    return member, int(idx.size)


def load_target(model: nn.Module, state: dict, path: Path, arch: str) -> nn.Module:
    """Your trained weights into the arm's model; a mismatch is one InputError line."""
    if not isinstance(state, dict):
        raise InputError(f"audit target weights: {path} holds a {type(state).__name__}, not a "
                         "state dict; save model.state_dict() of the model the factory builds")
    try:
        model.load_state_dict(state, strict=True)
    except (RuntimeError, TypeError, ValueError, AttributeError) as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        detail = "; ".join(lines[1:3]) if len(lines) > 1 else lines[0]
        raise InputError(f"audit target weights: {path} does not fit arch {arch} "
                         f"({detail[:300]}); save model.state_dict() of the model the "
                         "factory builds") from None
    return model



def reference_arm(arms: list[str] | tuple[str, ...]) -> str:
    """The arm whose most exposed samples the report follows across arms: BN if present."""
    return "batchnorm" if "batchnorm" in arms else arms[0]


def exposure_arms(cfg: Config, pool: dict[str, np.ndarray], targets: dict[str, TargetSignals],
                  shards: dict[str, list[Path]],
                  own: tuple[TargetSignals, np.ndarray | None, dict] | None = None
                  ) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    """The exposure stage: every arm's target model (its signals, `targets`: from the query
    logits the train stage saved) and `own` = (your model's signals, membership [N] or
    None, provenance), scored against the shadows of audit.target_arm, against its arm's
    shadows. Runs no model. Returns (results/exposure.json, {name: arrays for
    data/exposure/})."""
    labels, kind = pool["y_train"], pool["kind"]
    index = pool.get("index", np.arange(labels.size))
    queries, k = cfg.shadow.queries, cfg.audit.top_k
    identity = identity_index(queries)
    scores, raws, mem, arrays, sigs, nulls = {}, {}, {}, {}, {}, {}
    for arm, target in targets.items():
        sigs[arm] = load_shadow(shards[arm], labels, identity)
        nulls[arm] = ExposureNull.build(sigs[arm], cfg)
        raws[arm] = exposure(target, sigs[arm], cfg)
        scores[arm] = nulls[arm].calibrate(raws[arm])
        mem[arm] = memorization(sigs[arm].correct, sigs[arm].keep)[0]
        arrays[arm] = {"exposure": scores[arm], "exposure_raw": raws[arm], "mem_score": mem[arm]}
    ref = reference_arm(list(targets))
    tops = top_exposed(raws, k)
    out: dict = {"definition": "-log10 of the share of the arm's empirical null (its shadows' "
                               "non-members, leave-one-pair-out) at or above the raw exposure "
                               "-log10 P(phi' >= phi | OUT shadows), mean over queries",
                 "reference_arm": ref, "top_k": k, YOURS: None,
                 "arms": {a: {"distribution": distribution(s),
                              "distribution_raw": distribution(raws[a]),
                              "calibration": nulls[a].table(kind),
                              "top": exposure_rows(tops[a], scores, labels, kind, mem, index, a, raws)}
                          for a, s in scores.items()}}
    if own is not None:
        t, member, info = own
        arm = cfg.audit.target_arm
        mine_raw = exposure(t, sigs[arm], cfg)
        mine = nulls[arm].calibrate(mine_raw)
        rmia = offline_rmia(t, sigs[arm], cfg)
        both = {YOURS: mine, **scores}
        top = top_exposed({YOURS: mine_raw}, k)[YOURS]
        out[YOURS] = {**info, "arm": arm, "distribution": distribution(mine),
                      "top": exposure_rows(top, both, labels, kind, mem, index, arm,
                                           {YOURS: mine_raw, **raws}),
                      "train_acc": float(t.correct.mean()),
                      "lira_offline": None, "rmia_offline": None}
        arrays[YOURS] = {"exposure": mine, "exposure_raw": mine_raw, "rmia_offline": rmia}
        if member is not None:
            arrays[YOURS]["member"] = member
            if member.all() or not member.any():
                raise InputError(f"audit members: all {member.size} pool samples are "
                                 f"{'members' if member.all() else 'non-members'}; an AUC needs both")
            out[YOURS]["lira_offline"] = membership_metrics(mine, member)
            out[YOURS]["rmia_offline"] = membership_metrics(rmia, member)
            out[YOURS]["calibration"] = calibration(mine[~member])
    return out, arrays
