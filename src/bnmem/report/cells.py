"""report.md's table cells: numbers with intervals, claim and criterion cells, TPR support
(shared by bnmem.report.markdown and bnmem.report.sections)."""
from __future__ import annotations

from bnmem.attack.intervals import twoway_floored
from bnmem.core.kinds import HEADLINE

FLOORED_MARK = "‡"  # a twoway interval at its floor (bnmem.attack.intervals.twoway_floored)


def _f(v, digits: int = 3) -> str:
    return "n/a" if v is None else f"{v:.{digits}f}"


def _g(v) -> str:
    """Four significant digits: small TPRs stay readable (0.0004, not 0.000)."""
    return "n/a" if v is None else f"{v:.4g}"


def _ci(m: dict, key: str) -> str:
    if not m or m.get(key) is None:
        return "n/a"
    lo, hi = m.get(f"{key}_lo"), m.get(f"{key}_hi")
    return f"{m[key]:.3f}" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None and hi is not None else "")


def _eps_cell(e: dict | None) -> str:
    if not e:
        return "n/a"
    return " / ".join("n/a" if e[k]["epsilon_lo"] is None else f"{e[k]['epsilon_lo']:.2f}"
                      for k in HEADLINE if k in e)


def _est(d: dict | None, scale: float = 1.0, signed: bool = False, digits: int = 3) -> str:
    """value [lo, hi] of a {"value", "lo", "hi"} dict, marked FLOORED_MARK where the interval
    is twoway's floor."""
    if not d or d.get("value") is None:
        return "n/a"
    f = f"{'+' if signed else ''}.{digits}f"
    out = f"{d['value'] * scale:{f}}"
    if d.get("lo") is not None and d.get("hi") is not None:
        out += f" [{d['lo'] * scale:{f}}, {d['hi'] * scale:{f}}]"
    return out + (FLOORED_MARK if twoway_floored(d) else "")


def _claim_cell(row: dict, point: str) -> str:
    d = row.get(point)
    if not d:
        return "—"
    pts = row.get("unit") == "points"
    txt = _est(d, 100.0 if pts else 1.0, signed=pts, digits=2)
    return f"{txt} ({d['interval']})"


OTHER_CRITERIA = (("heldout_overlap", "overlap"), ("fit", "fit"), ("fit_overlap", "fit overlap"))
DESCRIPTIVE = (("loss", "loss"), ("gap", "gap"))


def _crit_cell(row: dict, name: str) -> str:
    d = (row.get("criteria") or {}).get(name)
    if not d:
        return "n/a"
    pts = row.get("unit") == "points"
    return _est(d, 100.0 if pts else 1.0, signed=pts, digits=2)


def _sign(row: dict, name: str) -> str:
    d = (row.get("criteria") or {}).get(name)
    if not d or d.get("lo") is None or d.get("hi") is None:
        return "n/a"
    t, up = row["threshold"], row["direction"] > 0
    lo, hi = d["lo"], d["hi"]
    if (lo > t) if up else (hi < t):
        return "+"
    if (hi < t) if up else (lo > t):
        return "−"
    return "·"


def _others_cell(row: dict) -> str:
    if not any(k in (row.get("criteria") or {}) for k, _ in OTHER_CRITERIA):
        return "—"
    judged = "; ".join(f"{label} {_crit_cell(row, k)} {_sign(row, k)}" for k, label in OTHER_CRITERIA)
    return judged + " (descriptive: " + "; ".join(
        f"{label} {_crit_cell(row, k)}" for k, label in DESCRIPTIVE) + ")"


def _disagree(row: dict) -> str:
    names = row.get("disagree") or []
    return f" ({', '.join(names)})" if names else ""


def _vlow_cell(m: dict, point: float | None) -> str:
    """TPR at 1e-4: with its interval and support where the draws carry it (>= 100 000
    negatives), else the stage's point estimate (n/a where unsupported)."""
    if "tpr_vlow_all" not in m:
        return _g(point)
    return f"{_est(m['tpr_vlow_all'], digits=5)}{_support(m.get('tpr_vlow_support'))}"


def _support(sup: dict | None) -> str:
    """' (TP from k samples; FP from j samples in i models)' for a TPR's support."""
    if not sup:
        return ""
    return (f" (TP: {sup['tp_pairs']} from {sup['tp_samples']} samples; FP: {sup['fp_pairs']} "
            f"from {sup['fp_samples']} samples in {sup['fp_models']} models)")


def _tp_samples(sup: dict | None) -> str:
    """' (TP: k samples)' for an endpoint TPR's support; ' (unsupported: FP from j samples)'
    where its false positives come from too few distinct samples."""
    if not sup:
        return ""
    if not sup["supported"]:
        return f" (unsupported: FP from {sup['fp_samples']} samples)"
    return f" (TP: {sup['tp_samples']} samples)"


def _tp_at_common(rows: list | None) -> str:
    """' (TP: a / b samples)' for a frontier TPR difference at the common point: per arm the
    fewest distinct true-positive samples among the endpoints its value rests on; where one
    of them is unsupported (the difference has no value), ' (unsupported: FP from j
    samples)'."""
    if not rows or any(r is None for r in rows):
        return ""
    bad = [x for r in rows for x in r if not x["supported"]]
    if bad:
        return f" (unsupported: FP from {min(x['fp_samples'] for x in bad)} samples)"
    return " (TP: " + " / ".join(str(min(x["tp_samples"] for x in r)) for r in rows) + " samples)"


def _tup(v) -> str:
    return "n/a" if v is None else "(" + ", ".join(f"{x:.4f}" for x in v) + ")"
