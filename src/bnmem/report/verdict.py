"""Claim verdicts from evidence: the one rule every verdict word in report.md comes from.

A claim says a difference d = arm - base lies beyond `threshold` in `direction` (+1:
above, -1: below). Evidence is a point estimate with an interval that either includes
training randomness (shadow models resampled, or seeds) or does not (samples only). The
matched point (matched fit / utility) is the primary criterion, stated in advance:
- reproduced: the matched interval lies beyond the threshold in the claimed direction;
- not reproduced: the matched interval lies entirely on the other side of the threshold,
  whatever equal epochs say ("not reproduced (reversed at matched fit)" when it also lies
  on the other side of no effect, 0 for a difference and 1 for a ratio: the opposite
  effect);
- at equal epochs only (not at matched utility): the equal-epoch interval lies beyond the threshold,
  the matched one covers the threshold and excludes half the equal-epoch effect (its
  claimed-side end is nearer the threshold than half-way to the equal-epoch estimate): at
  matched fit most of the effect is gone. A matched interval too wide to say so is
  inconclusive;
- at equal epochs (no matched-fit interval with training randomness): equal epochs
  beyond the threshold where nothing matched was measured;
- inconclusive: anything else, including evidence whose interval resamples samples only;
- not measured: no evidence.
`judge_criteria` adds the other matched criteria (bnmem.attack.frontier: the primary averaged
over the overlap, matched fit at its common point and over its overlap; train loss and
generalization gap are descriptive only, since both partly measure the memorization under
test): where one of them lies beyond
the threshold and another (or the primary) entirely on the other side, or the primary says
"at equal epochs only" while another says beyond, the criteria disagree and the verdict is
"inconclusive (matched criteria disagree)", never the most favourable one.
`holm` applies Holm-Bonferroni over a family of claims (one-sided p from each interval,
read as normal): a verdict that rested on an interval the family-wise rule does not
support becomes inconclusive.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from scipy.special import ndtr  # the normal cdf scipy.stats.norm computes, without its import

from bnmem.attack.intervals import (SQRT_PROCEDURES, T_PROCEDURES, in_low_region,
                                    interval_records, record_arms, variance_from_sd)
from bnmem.core.io import InputError

REPRODUCED = "reproduced"
EQUAL_ONLY = "at equal epochs only (not at matched utility)"
EQUAL_UNMATCHED = "at equal epochs (no matched-fit interval with training randomness)"
NOT_REPRODUCED = "not reproduced"
REVERSED = "not reproduced (reversed at matched fit)"
REVERSED_UTILITY = "not reproduced (reversed at matched utility)"
INCONCLUSIVE = "inconclusive"
DISAGREE = "inconclusive (matched criteria disagree)"
NOT_TESTABLE = "not testable at matched utility"
NOT_MEASURED = "not measured"


def _sqrt_reads(d: dict) -> list[tuple[float, float]]:
    """The (proportion, V_b) pairs a SQRT_PROCEDURES record's interval was read from: a
    difference's arms (record_arms), or a one-arm record's own value and `both` SD; none
    where they are not recorded."""
    if "arms" in d:
        return list(record_arms(d) or ())
    v = variance_from_sd((d.get("sd") or {}).get("both"))
    return [] if v is None or d.get("value") is None else [(float(d["value"]), v)]


@dataclass(frozen=True)
class Evidence:
    """A point estimate and its 95 % interval; `training`: the interval resamples
    training runs (shadow models or seeds), not samples alone."""
    value: float | None
    lo: float | None
    hi: float | None
    training: bool
    df: float | None = None  # the interval's t quantile's degrees of freedom; None: 1.96
    # an asymmetric interval (a SQRT_PROCEDURES rule: the square-root scale, or MOVER for a
    # difference): each side has its own sd, and a p-value reads the side toward the threshold
    sided: bool = False
    # ... read in sqrt_ci's low region (a one-arm record), or built from an arm there (a
    # difference): its ends are no 1.96 sd, so no p-value
    low_arm: bool = False

    @classmethod
    def of(cls, d: dict | None, training: bool) -> "Evidence | None":
        """From {"value", "lo", "hi", "df" (absent: normal)}; None when absent or without a
        value. A record whose `rule` reads Student's t but has no "df" (written before
        records carried it) is refused rather than read as normal, which would understate
        its p-values."""
        if not d or d.get("value") is None:
            return None
        if "df" not in d and d.get("rule") in T_PROCEDURES and d.get("lo") is not None:
            raise InputError(f"an interval under rule {d['rule']!r} has no 'df' (its t "
                             "quantile's degrees of freedom): the result predates it; re-run "
                             "the attack stage (dvc repro attack) to record it")
        sided = d.get("rule") in SQRT_PROCEDURES
        low = sided and any(in_low_region(p, v) for p, v in _sqrt_reads(d))
        return cls(d["value"], d.get("lo"), d.get("hi"), training, d.get("df"), sided, low)

    @property
    def usable(self) -> bool:
        return self.training and self.lo is not None and self.hi is not None


def require_df(membership: dict, name: str) -> None:
    """Every interval the attack stage writes says its quantile's degrees of freedom ("df";
    null for a normal one). A membership.json with an interval that carries none predates
    that (archived runs: results/fullscale, results/memreg, ...), and read by the report it
    would take every t interval as normal and understate its p: refused, with one line
    naming the file and the first such interval."""
    where = next((path or "/" for path, rec in interval_records(membership)
                  if rec["lo"] is not None and "df" not in rec), None)
    if where:
        raise InputError(f"{name}: the interval at {where} has no 'df' (its quantile's degrees "
                         "of freedom): the file predates it; re-run the attack stage (dvc "
                         "repro attack) to write one the report can read")


def _beyond(e: Evidence, direction: int, threshold: float) -> bool:
    """The whole interval lies beyond the threshold in the claimed direction."""
    return e.lo > threshold if direction > 0 else e.hi < threshold


def _short(e: Evidence, direction: int, threshold: float) -> bool:
    """The whole interval lies on the other side of the threshold."""
    return e.hi < threshold if direction > 0 else e.lo > threshold


def _half_gone(matched: Evidence, equal: Evidence, direction: int, threshold: float) -> bool:
    """The matched interval excludes half the equal-epoch effect beyond the threshold."""
    half = threshold + (equal.value - threshold) / 2
    return matched.hi < half if direction > 0 else matched.lo > half


def judge(equal: Evidence | None, matched: Evidence | None, direction: int = 1,
          threshold: float = 0.0, null: float = 0.0) -> str:
    """The verdict on one claim (see the module docstring); `null` is the no-effect
    value (0 for a difference, 1 for a ratio) that a reversal lies beyond."""
    if equal is None and matched is None:
        return NOT_MEASURED
    eq_beyond = equal is not None and equal.usable and _beyond(equal, direction, threshold)
    if matched is not None and matched.usable:
        if _beyond(matched, direction, threshold):
            return REPRODUCED
        if _short(matched, direction, threshold):
            return REVERSED if _short(matched, direction, null) else NOT_REPRODUCED
        if eq_beyond and _half_gone(matched, equal, direction, threshold):
            return EQUAL_ONLY
        return INCONCLUSIVE
    if eq_beyond:
        return EQUAL_UNMATCHED
    if matched is None and equal is not None and equal.usable and _short(equal, direction, threshold):
        return NOT_REPRODUCED
    return INCONCLUSIVE


def side(e: Evidence | None, direction: int, threshold: float) -> int:
    """+1: the interval (with training randomness) lies beyond the threshold; -1: entirely
    on the other side; 0: it covers the threshold, or there is no usable interval."""
    if e is None or not e.usable:
        return 0
    return 1 if _beyond(e, direction, threshold) else -1 if _short(e, direction, threshold) else 0


def judge_criteria(equal: Evidence | None, primary: Evidence | None,
                   others: dict[str, Evidence | None], direction: int = 1,
                   threshold: float = 0.0, null: float = 0.0) -> tuple[str, list[str]]:
    """(verdict, the criteria that disagree): `judge` at the primary matched criterion
    (matched held-out accuracy; a reversal reads "reversed at matched utility"), made
    "inconclusive (matched criteria disagree)" where the other matched criteria contradict
    it (module docstring). The list names every criterion on the side opposite to another."""
    v = judge(equal, primary, direction, threshold, null)
    v = REVERSED_UTILITY if v == REVERSED else v
    sides = {"primary": side(primary, direction, threshold),
             **{k: side(e, direction, threshold) for k, e in others.items()}}
    found = set(sides.values())
    if {1, -1} <= found:
        return DISAGREE, sorted(k for k, s in sides.items() if s != 0)
    if v == EQUAL_ONLY and 1 in found:
        return DISAGREE, sorted(["primary", *(k for k, s in sides.items() if s == 1)])
    return v, []


def judge_share(n_above: int, n_layers: int, n_models: int = 1) -> str:
    """"gamma/sigma > 1 in most BN layers": a count of layers in `n_models` trained
    models. One model is a description without training randomness, and half the layers
    is a tie: both inconclusive; with several models, reproduced when more than half the
    BN layers have a majority of channels above 1 (counts summed over models), not
    reproduced when fewer than half."""
    if n_layers == 0:
        return NOT_MEASURED
    if n_models < 2 or 2 * n_above == n_layers:
        return INCONCLUSIVE
    return REPRODUCED if n_above > n_layers / 2 else NOT_REPRODUCED


def p_values(e: Evidence | None, direction: int, threshold: float,
             log: bool = False, df: int | None = None) -> tuple[float, float]:
    """One-sided p of (not beyond, not short) of the threshold from a 95 % interval read
    as normal (half-width 1.96 sd), or as Student t with `df` degrees of freedom where the
    interval was built that way (half-width t_{0.975, df} sd: the grid's replicates,
    df = k - 1; by default the evidence's own `df`, which a t-based interval rule records,
    bnmem.attack.intervals.IntervalPlan.summary); an asymmetric interval (`sided`) reads
    the half on the threshold's side as that side's 1.96 sd, and none where that end sits at
    a proportion's bound (0, or -1 / 1 for a difference: a clip) or where the interval was
    read in sqrt_ci's low region (a one-arm record, or a difference's arm); with `log` (ratios, whose intervals are symmetric on the log scale)
    value, ends and threshold are read on the log scale. (1, 1) without a usable
    interval."""
    if e is None or not e.usable or e.hi <= e.lo:
        return 1.0, 1.0
    v, lo, hi, t = e.value, e.lo, e.hi, threshold
    if log:
        if min(v, lo, hi, t) <= 0:
            return 1.0, 1.0
        v, lo, hi, t = (math.log(a) for a in (v, lo, hi, t))
    df = e.df if df is None else df
    if e.sided and not log:  # the half toward the threshold, its own sd (lo or hi may sit at v)
        half = (v - lo) if t <= v else (hi - v)
        # an end at a proportion's bound (sqrt_ci's 0, mover_ci's -1 or 1) is a clip, not
        # 1.96 sd: no p-value is read from it
        if not half > 0 or e.low_arm or (lo if t <= v else hi) in (0.0, -1.0, 1.0):
            return 1.0, 1.0
        lo, hi = v - half, v + half
    if df is not None:
        from scipy.stats import t as student
        z = direction * (v - t) / ((hi - lo) / (2 * float(student.ppf(0.975, df))))
        return float(student.sf(z, df)), float(student.cdf(z, df))
    z = direction * (v - t) / ((hi - lo) / (2 * 1.959964))
    return float(ndtr(-z)), float(ndtr(z))  # norm.sf, norm.cdf, bit for bit


def holm_adjust(p: list[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (step-down, monotone)."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [1.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def holm(verdicts: list[str], beyond: list[float], short: list[float],
         alpha: float = 0.025) -> list[str]:
    """Family-wise verdicts: Holm over the family's one-sided p of the evidence each
    verdict rests on (beyond: reproduced / at equal epochs; short: not reproduced); a
    verdict whose adjusted p is >= alpha (one-sided, as a 95 % interval's side) becomes
    inconclusive. The family is every entry; pass p = 1 for claims without intervals."""
    adj_b, adj_s = holm_adjust(beyond), holm_adjust(short)
    out = []
    for v, pb, ps in zip(verdicts, adj_b, adj_s):
        if v in (REPRODUCED, EQUAL_ONLY, EQUAL_UNMATCHED) and pb >= alpha:
            v = INCONCLUSIVE
        elif v in (NOT_REPRODUCED, REVERSED, REVERSED_UTILITY) and ps >= alpha:
            v = INCONCLUSIVE
        out.append(v)
    return out
