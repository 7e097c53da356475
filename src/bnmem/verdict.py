"""Claim verdicts from evidence: the one rule every verdict word in report.md comes from.

A claim says a difference d = arm - base lies beyond `threshold` in `direction` (+1:
above, -1: below). Evidence is a point estimate with an interval that either includes
training randomness (shadow models resampled, or seeds) or does not (samples only).
- reproduced: at matched fit, an interval with training randomness lies beyond the
  threshold in the claimed direction;
- at equal epochs only (fit speed): that holds at equal epochs but not at matched fit,
  where an interval with training randomness was measured (else: "at equal epochs (no
  matched-fit interval with training randomness)");
- not reproduced: the interval with training randomness (at matched fit when measured,
  else at equal epochs) lies entirely on the other side of the threshold;
- inconclusive: anything else, including evidence whose interval resamples samples only;
- not measured: no evidence.
"""
from __future__ import annotations

from dataclasses import dataclass

REPRODUCED = "reproduced"
EQUAL_ONLY = "at equal epochs only (fit speed)"
EQUAL_UNMATCHED = "at equal epochs (no matched-fit interval with training randomness)"
NOT_REPRODUCED = "not reproduced"
INCONCLUSIVE = "inconclusive"
NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Evidence:
    """A point estimate and its 95 % interval; `training`: the interval resamples
    training runs (shadow models or seeds), not samples alone."""
    value: float | None
    lo: float | None
    hi: float | None
    training: bool

    @classmethod
    def of(cls, d: dict | None, training: bool) -> "Evidence | None":
        """From {"value", "lo", "hi"}; None when absent or without a value."""
        if not d or d.get("value") is None:
            return None
        return cls(d["value"], d.get("lo"), d.get("hi"), training)

    @property
    def usable(self) -> bool:
        return self.training and self.lo is not None and self.hi is not None


def _beyond(e: Evidence, direction: int, threshold: float) -> bool:
    """The whole interval lies beyond the threshold in the claimed direction."""
    return e.lo > threshold if direction > 0 else e.hi < threshold


def _short(e: Evidence, direction: int, threshold: float) -> bool:
    """The whole interval lies on the other side of the threshold."""
    return e.hi < threshold if direction > 0 else e.lo > threshold


def judge(equal: Evidence | None, matched: Evidence | None, direction: int = 1,
          threshold: float = 0.0) -> str:
    """The verdict on one claim (see the module docstring)."""
    if equal is None and matched is None:
        return NOT_MEASURED
    if matched is not None and matched.usable and _beyond(matched, direction, threshold):
        return REPRODUCED
    if equal is not None and equal.usable and _beyond(equal, direction, threshold):
        return EQUAL_ONLY if matched is not None and matched.usable else EQUAL_UNMATCHED
    decisive = matched if matched is not None else equal
    if decisive is not None and decisive.usable and _short(decisive, direction, threshold):
        return NOT_REPRODUCED
    return INCONCLUSIVE


def judge_share(n_above: int, n_layers: int) -> str:
    """"gamma/sigma > 1 in most BN layers": reproduced when more than half the BN layers
    have a majority of channels above 1 (a description of one model: no interval)."""
    if n_layers == 0:
        return NOT_MEASURED
    return REPRODUCED if n_above > n_layers / 2 else NOT_REPRODUCED
