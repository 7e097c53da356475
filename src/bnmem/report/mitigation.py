"""report.md's answer to "what should I use instead of BN?": every arm against plain BN
at matched held-out accuracy (AUC, TPR at FPR 1e-3, empirical ε), and the DP arms'
accountant ε against the empirical lower bound (bnmem.attack.mitigation, bnmem.attack.epsilon)."""
from __future__ import annotations

import math

from bnmem.core.kinds import HEADLINE
from bnmem.report.cells import _tp_at_common



def _pts(s: dict | None) -> str:
    """An arm - BN difference in points with its interval."""
    if not s or s.get("value") is None:
        return "n/a"
    v = f"{100 * s['value']:+.2f}"
    if s.get("lo") is None or s.get("hi") is None:
        return v
    return f"{v} [{100 * s['lo']:+.2f}, {100 * s['hi']:+.2f}]"


def _eps(d: dict | None) -> str:
    if not d:
        return "n/a"
    return " / ".join("n/a" if d.get(k) is None else f"{d[k]:.2f}" for k in HEADLINE)


def _level(v) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.3f}"


def mitigation_section(membership: dict, delta: float, unfit: dict | None = None,
                       inplace: dict[str, list[str]] | None = None) -> list[str]:
    """The mitigations table and the DP accounting table. `unfit`: arms that missed the
    fit rule (their rows read "not evidence"); `inplace`: per DP arm, the in-place
    activations switched off for Opacus (ModelSpec.inplace_off), named in the report."""
    rows = membership.get("mitigations") or []
    arms = membership["arms"]
    unfit = unfit or {}
    L = []
    if rows:
        L += ["", "## What to use instead of BN (matched held-out accuracy)", "",
              "Every arm against plain `batchnorm` at the highest held-out accuracy both "
              "reach, between Pareto frontiers of annealed endpoints (the primary criterion; "
              "differences in points, models+samples intervals); *no overlap*: the arms' "
              "held-out accuracy ranges do not meet, so BN's side is its least leaky endpoint "
              "above the other arm's best, not a matched point. *Empirical ε*: the 95 % lower "
              f"bound on ε at δ = {delta:g} that the headline attack's scores give "
              "(Clopper–Pearson on TPR and FPR, simultaneous over a label-free grid of "
              "thresholds and the four DP inequalities: `bnmem.attack.epsilon`), on all / "
              "flipped / OOD samples, for each arm the least over its endpoints at or above "
              "that accuracy. It treats the model-sample trials as independent, which they "
              "are not (one sample recurs in every model): an audit figure, not a proof. "
              "The attack's in/out datasets differ by one *substituted* sample, so the ε it "
              "bounds is the replace-one ε (for a DP arm: *replace-one ε*, below).", "",
              "| arm | held-out acc | AUC all − BN | TPR at 1e-3 − BN | empirical ε, arm "
              "(all / flipped / OOD) | empirical ε, BN there | accountant ε (add/remove; "
              "replace-one) |",
              "|---|---|---|---|---|---|---|"]
        for r in rows:
            acc = _level(r["heldout"]) + (" (no overlap)" if r.get("overlap") is False else "")
            spent = r.get("accountant")
            budget = ("—" if not spent else f"{spent['epsilon_max'][-1]:.2f}; "
                      f"{spent['epsilon_substitution_max'][-1]:.2f}")
            name = r["arm"] + (" (did not fit: not evidence)" if r["arm"] in unfit else "")
            L.append(f"| {name} | {acc} | {_pts(r['auc_all'])} | {_pts(r['tpr_low_all'])}"
                     f"{_tp_at_common(r['tpr_low_all'].get('support_at_common'))} | "
                     f"{_eps(r['epsilon_lo'])} | {_eps(r['epsilon_lo_base'])} | {budget} |")
    elif len(arms) > 3 or any(m.get("dp_accountant") for m in arms.values()):
        L += ["", "*What to use instead of BN*: no table; it needs the `batchnorm` arm and "
              "`shadow.budgets` (annealed endpoints).", ""]
    dp = {a: m["dp_accountant"] for a, m in arms.items() if m.get("dp_accountant")}
    if dp:
        budgets = (membership.get("frontier") or {}).get("budgets") or []
        L += ["", "## DP-SGD arms: accountant ε against empirical ε", "",
              "Per DP arm and annealed endpoint (every shadow model trained with DP-SGD "
              "through Opacus, its own noise multiplier for the arm's ε at δ over its own "
              "steps): the noise multiplier (range over shadow models), the accountant's "
              "add/remove ε (what the noise is set for), the replace-one ε of the same run "
              "(dp_accounting's PLD accountant: what the attack's substitution in/out "
              "hypotheses can be held to), the empirical lower bound (all / flipped / OOD) and "
              "its ceiling (the most a perfect attack could show with these trial counts). "
              "An endpoint whose ceiling lies below the replace-one ε cannot fail the audit.", "",
              "| arm | epochs | noise multiplier | accountant ε | replace-one ε | "
              "empirical ε (all / flipped / OOD) | ceiling (all / flipped / OOD) |",
              "|---|---|---|---|---|---|---|"]
        for arm, acc in dp.items():
            ends = _ends(membership, arm)
            for i, e in enumerate(ends):
                epochs = budgets[i] if i < len(budgets) else "final"
                L.append(f"| {arm} | {epochs} | {acc['noise_multiplier_min'][i]:.3f}–"
                         f"{acc['noise_multiplier_max'][i]:.3f} | {acc['epsilon_max'][i]:.2f} | "
                         f"{acc['epsilon_substitution_max'][i]:.2f} | "
                         f"{_eps({k: v['epsilon_lo'] for k, v in e.items()})} | "
                         f"{_eps({k: v.get('ceiling') for k, v in e.items()})} |")
        off = {a: names for a, names in (inplace or {}).items() if names}
        if off:
            L += ["", "In-place activations switched off for DP-SGD (Opacus' hooks cannot see "
                  "through them; the same modules compute out of place): " + "; ".join(
                      f"`{a}`: {', '.join(f'`{n}`' for n in names)}" for a, names in off.items())
                  + "."]
        L += ["", "**DP audit** (the empirical lower bound against the replace-one ε, by "
              "endpoint and subset): " + "; ".join(
                  f"`{arm}` " + {"fails": f"**fails** at {detail} (a wrong accountant or "
                                          "DP-SGD, or trials too dependent for "
                                          "Clopper–Pearson)",
                                 "passes": f"passes ({detail})",
                                 "uninformative": "uninformative (every ceiling lies below "
                                                  "its replace-one ε: these trial counts "
                                                  "could not show a violation; more models "
                                                  "or samples, or crafted canaries, would)"}[word]
                  for arm, (word, detail) in dp_audit(membership).items()) + "."]
    return L + ([""] if L else [])


def _ends(membership: dict, arm: str) -> list[dict]:
    fr = (membership.get("frontier") or {}).get("arms", {})
    return (fr.get(arm) or {}).get("empirical_epsilon") or [membership["arms"][arm]["empirical_epsilon"]]


def dp_audit(membership: dict) -> dict[str, tuple[str, str]]:
    """Each DP arm's audit, by a rule fixed in advance: "fails" where an empirical ε (95 %
    lower bound, any subset and endpoint) exceeds the arm's replace-one ε there (the
    largest over its shadow models); else "passes" if at least one (endpoint, subset) had
    a ceiling above it (a violation was possible), "uninformative" if none had.
    Returns {arm: (word, detail)}."""
    budgets = (membership.get("frontier") or {}).get("budgets") or []
    out = {}
    for arm, m in membership["arms"].items():
        acc = m.get("dp_accountant")
        if not acc:
            continue
        broken, testable = [], 0
        for i, e in enumerate(_ends(membership, arm)):
            limit = acc["epsilon_substitution_max"][i]
            for sub, b in e.items():
                if b["epsilon_lo"] is not None and b["epsilon_lo"] > limit:
                    epochs = budgets[i] if i < len(budgets) else "final"
                    broken.append(f"{epochs} epochs {sub} ({b['epsilon_lo']:.2f} > {limit:.2f})")
                testable += (b.get("ceiling") or 0) > limit
        out[arm] = (("fails", "; ".join(broken)) if broken else
                    ("passes", f"{testable} endpoint-subsets could have failed") if testable else
                    ("uninformative", ""))
    return out
