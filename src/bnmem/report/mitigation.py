"""report.md's answer to "what should I use instead of BN?": every arm against plain BN
at matched held-out accuracy (AUC, TPR at FPR 1e-3, empirical ε), and the DP arms'
accountant ε against the empirical lower bound (bnmem.attack.mitigation, bnmem.attack.epsilon)."""
from __future__ import annotations


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
    return " / ".join("n/a" if d.get(k) is None else f"{d[k]:.2f}" for k in ("all", "flipped", "ood"))


def mitigation_section(membership: dict, delta: float) -> list[str]:
    """The mitigations table and the DP accounting table; [] without BN and another arm."""
    rows = membership.get("mitigations") or []
    arms = membership["arms"]
    L = []
    if rows:
        L += ["", "## What to use instead of BN (matched held-out accuracy)", "",
              "Every arm against plain `batchnorm` at the highest held-out accuracy both "
              "reach, between Pareto frontiers of annealed endpoints (the primary criterion; "
              "differences in points, models+samples intervals). *Empirical ε*: the "
              f"95 % lower bound on ε at δ = {delta:g} that the headline attack's scores "
              "prove (Clopper–Pearson on TPR and FPR, simultaneous over a fixed grid of "
              "thresholds and the four DP inequalities: `bnmem.attack.epsilon`), on all / "
              "flipped / OOD samples, each arm on its own frontier at that accuracy "
              "(interpolated between endpoints). A DP arm's empirical ε must stay below its "
              "accountant's ε; a non-DP arm's is the least ε any DP guarantee for it could "
              "claim. The trials (model, sample pairs) are not independent, so the bound is "
              "an audit figure, not a proof.", "",
              "| arm | held-out acc | AUC all − BN | TPR at 1e-3 − BN | empirical ε, arm "
              "(all / flipped / OOD) | empirical ε, BN there | accountant ε |",
              "|---|---|---|---|---|---|---|"]
        for r in rows:
            acc = "n/a" if r["heldout"] is None else f"{r['heldout']:.3f}"
            spent = r.get("accountant")
            budget = "—" if not spent else f"≤ {spent['epsilon_max'][-1]:.2f}"
            L.append(f"| {r['arm']} | {acc} | {_pts(r['auc_all'])} | {_pts(r['tpr_low_all'])} | "
                     f"{_eps(r['epsilon_lo'])} | {_eps(r['epsilon_lo_base'])} | {budget} |")
    dp = {a: m["dp_accountant"] for a, m in arms.items() if m.get("dp_accountant")}
    if dp:
        fr = (membership.get("frontier") or {}).get("arms", {})
        budgets = (membership.get("frontier") or {}).get("budgets") or []
        L += ["", "## DP-SGD arms: accountant ε against empirical ε", "",
              "Per DP arm and annealed endpoint (every shadow model trained with DP-SGD "
              "through Opacus, its own noise multiplier for the arm's ε over its own steps): "
              "the accountant's ε (the largest over shadow models) and noise multiplier "
              "(range), and the empirical lower bound (all / flipped / OOD). The bound "
              "sitting below the accountant's ε is the audit passing; far below is the "
              "usual gap between a worst-case guarantee and one attack.", "",
              "| arm | epochs | noise multiplier | accountant ε | empirical ε (all / flipped / OOD) |",
              "|---|---|---|---|---|"]
        for arm, acc in dp.items():
            ends = fr.get(arm, {}).get("empirical_epsilon") or [arms[arm]["empirical_epsilon"]]
            for i, e in enumerate(ends):
                epochs = budgets[i] if i < len(budgets) else "final"
                L.append(f"| {arm} | {epochs} | {acc['noise_multiplier_min'][i]:.3f}–"
                         f"{acc['noise_multiplier_max'][i]:.3f} | {acc['epsilon_max'][i]:.2f} | "
                         f"{_eps({k: v['epsilon_lo'] for k, v in e.items()})} |")
        broken = dp_audit(membership)
        L += ["", ("**DP audit passes**: at every endpoint and subset the empirical lower bound "
                   "stays at or below the accountant's ε." if not broken else
                   "**DP audit fails**: the empirical lower bound exceeds the accountant's ε at "
                   + "; ".join(broken) + " (a wrong accountant or DP-SGD implementation, or "
                   "trials too dependent for Clopper–Pearson).")]
    return L + ([""] if L else [])


def dp_audit(membership: dict) -> list[str]:
    """Where a DP arm's empirical ε (95 % lower bound, any subset) exceeds its
    accountant's ε (the largest over its shadow models) at the same endpoint: each as
    "<arm> <epochs> epochs <subset> (bound > accountant)"; [] when the audit passes."""
    fr = membership.get("frontier") or {}
    budgets = fr.get("budgets") or []
    out = []
    for arm, m in membership["arms"].items():
        acc = m.get("dp_accountant")
        if not acc:
            continue
        ends = (fr.get("arms", {}).get(arm) or {}).get("empirical_epsilon") or [m["empirical_epsilon"]]
        for i, e in enumerate(ends):
            for sub, b in e.items():
                if b["epsilon_lo"] is not None and b["epsilon_lo"] > acc["epsilon_max"][i]:
                    epochs = budgets[i] if i < len(budgets) else "final"
                    out.append(f"`{arm}` {epochs} epochs {sub} ({b['epsilon_lo']:.2f} > "
                               f"{acc['epsilon_max'][i]:.2f})")
    return out
