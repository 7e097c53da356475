"""metrics/summary.json and report.md: BN - none deltas with 95 % CIs, matched utility,
and the paper's claims against what this run measured."""
from __future__ import annotations

import numpy as np
import pandas as pd

from bnmem.corrupt import CLEAN


def paired_acc_delta(correct_a: np.ndarray, correct_b: np.ndarray, mask: np.ndarray,
                     n_boot: int, rng: np.random.Generator) -> dict | None:
    """mean(a) - mean(b) over `mask` samples with a paired bootstrap 95 % CI."""
    idx = np.flatnonzero(mask)
    if idx.size == 0:
        return None
    diff = correct_a[idx].astype(float) - correct_b[idx].astype(float)
    boots = diff[rng.integers(0, idx.size, (n_boot, idx.size))].mean(1)
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"value": float(diff.mean()), "lo": float(lo), "hi": float(hi)}


def ratio_of_ratios_ci(norms_a: np.ndarray, norms_b: np.ndarray, kind: np.ndarray, num: int,
                       n_boot: int, rng: np.random.Generator) -> dict | None:
    """[median(a|num)/median(a|clean)] / [same for b] with a paired bootstrap 95 % CI.

    Both arms are resampled with the same indices (same pool samples), within each kind.
    """
    ia, ic = np.flatnonzero(kind == num), np.flatnonzero(kind == CLEAN)
    if ia.size == 0 or ic.size == 0:
        return None

    def stat(sel_a: np.ndarray, sel_c: np.ndarray) -> np.ndarray:
        ra = np.median(norms_a[sel_a], -1) / np.median(norms_a[sel_c], -1)
        rb = np.median(norms_b[sel_a], -1) / np.median(norms_b[sel_c], -1)
        return ra / rb

    boots = stat(ia[rng.integers(0, ia.size, (n_boot, ia.size))],
                 ic[rng.integers(0, ic.size, (n_boot, ic.size))])
    lo, hi = np.percentile(boots, [2.5, 97.5])
    return {"value": float(stat(ia, ic)), "lo": float(lo), "hi": float(hi)}


def matched_utility(curves: dict[str, pd.DataFrame]) -> dict:
    """Each arm at the first epoch its clean_train_acc reaches the lower of the arms' finals."""
    from bnmem.matched import matched_epochs

    target, at = matched_epochs({a: df.to_dict("records") for a, df in curves.items()},
                                "clean_train_acc")
    out: dict = {"target_clean_train_acc": float(target)}
    for arm, df in curves.items():
        row = df.iloc[at[arm] - 1]
        out[arm] = {"epoch": int(row["epoch"]), "clean_train_acc": float(row["clean_train_acc"]),
                    "flipped_mem_acc": _num(row.get("flipped_mem_acc")),
                    "ood_mem_acc": _num(row.get("ood_mem_acc")),
                    "test_acc": float(row["test_acc"])}
    return out


def _num(v) -> float | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else float(v)


def _fmt(d: dict | None, key: str = "value", pct: bool = False, signed: bool = True) -> str:
    if not d or d.get(key) is None:
        return "n/a"
    s, f = (100.0 if pct else 1.0), ("+.2f" if signed else ".2f")
    lo, hi = d.get(key + "_lo", d.get("lo")), d.get(key + "_hi", d.get("hi"))
    ci = f" [{lo * s:{f}}, {hi * s:{f}}]" if lo is not None and hi is not None else ""
    return f"{d[key] * s:{f}}{ci}"


def _matched_delta(mu: dict, a: str = "batchnorm", b: str = "none") -> float | None:
    ra, rb = mu.get(a, {}), mu.get(b, {})
    if ra.get("flipped_mem_acc") is None or rb.get("flipped_mem_acc") is None:
        return None
    return ra["flipped_mem_acc"] - rb["flipped_mem_acc"]


def _matched(mu: dict, a: str = "batchnorm", b: str = "none") -> str:
    d = _matched_delta(mu, a, b)
    return "n/a" if d is None else (f"{100 * d:+.2f} (epoch {mu[a]['epoch']} vs "
                                    f"{mu[b]['epoch']})")


def _matched_verdict(mu: dict, a: str = "batchnorm", b: str = "none", sign: int = 1) -> str:
    """reproduced when sign * (a - b) >= 5 points (no CI: a point estimate)."""
    d = _matched_delta(mu, a, b)
    return "not measured" if d is None else ("reproduced" if sign * d >= 0.05 else "not reproduced")


def _test_delta(summary: dict) -> str:
    eq = summary.get("equal_epoch", {})
    a, b = eq.get("batchnorm_reg", {}).get("test_acc"), eq.get("batchnorm", {}).get("test_acc")
    return "n/a" if a is None or b is None else f"{100 * (a - b):+.2f}"


def _reg_verdict(reg: dict, summary: dict) -> str:
    eq = summary.get("equal_epoch", {})
    a, b = eq.get("batchnorm_reg", {}).get("test_acc"), eq.get("batchnorm", {}).get("test_acc")
    if not reg.get("flipped_mem_acc") or a is None or b is None:
        return "not measured"
    return ("reproduced" if reg["flipped_mem_acc"]["hi"] < 0 and a - b >= -0.01
            else "not reproduced")


def verdict(ci: dict | None, key: str = "value", threshold: float = 0.0) -> str:
    """reproduced when the CI lies above `threshold`, not reproduced when it lies below the
    threshold or straddles it, not measured when absent."""
    if not ci or ci.get(key) is None:
        return "not measured"
    lo = ci.get(key + "_lo", ci.get("lo"))
    if lo is not None and lo > threshold:
        return "reproduced"
    return "not reproduced"


def claims_table(summary: dict, noise_rate: float, ood_rate: float) -> list[tuple[str, str, str]]:
    """(claim, measured, verdict) rows for report.md."""
    d = summary.get("delta_batchnorm_minus_none", {})
    reg = summary.get("delta_batchnorm_reg_minus_batchnorm", {})
    rate = noise_rate + ood_rate
    need = 4.0 if rate >= 0.05 else 3.0
    auc = d.get("auc_lira_online_all")
    rows = [
        ("BN memorizes flipped labels more (flipped_mem_acc, BN - none, points)",
         _fmt(d.get("flipped_mem_acc"), pct=True), verdict(d.get("flipped_mem_acc"))),
        ("... and at matched clean fit (flipped_mem_acc at the first epoch each arm reaches the "
         "lowest final clean train acc; point estimate, no CI; 'reproduced' needs >= 5 points)",
         _matched(summary.get("matched_utility", {})),
         _matched_verdict(summary.get("matched_utility", {}))),
        ("... and BN's LiRA AUC is higher at matched shadow fit (online LiRA, identity query, "
         "each arm's shadows at the first epoch they reach the lowest final clean fit; points)",
         _matched_lira(summary.get("matched_utility", {}).get("lira", {})),
         verdict(_lira_delta(summary.get("matched_utility", {}).get("lira", {})), "auc")),
        ("BN memorizes OOD images more (ood_mem_acc, BN - none, points)",
         _fmt(d.get("ood_mem_acc"), pct=True), verdict(d.get("ood_mem_acc"))),
        ("Corrupted samples have larger gradient norms under BN (flipped/clean median ratio, BN / none)",
         _fmt(d.get("grad_ratio_flipped_clean_bn_over_none"), signed=False),
         verdict(d.get("grad_ratio_flipped_clean_bn_over_none"), threshold=1.0)),
        (f"BN raises LiRA AUC by >= {need:.0f} points at {rate:.0%} outliers (all samples)",
         _fmt(auc, "auc", pct=True), verdict(auc, "auc", threshold=need / 100)),
        ("BN raises LiRA AUC on clean samples",
         _fmt(d.get("auc_lira_online_clean"), "auc", pct=True),
         verdict(d.get("auc_lira_online_clean"), "auc")),
        ("gamma/sigma > 1 in most BN channels (share, BN arm)",
         f"{summary['gamma_sigma_share_above_1']:.2f}" if summary.get("gamma_sigma_share_above_1") is not None else "n/a",
         "not measured" if summary.get("gamma_sigma_share_above_1") is None else
         ("reproduced" if summary["gamma_sigma_share_above_1"] > 0.5 else "not reproduced")),
        ("The gamma/sigma regularizer cuts memorization (flipped_mem_acc, reg - BN, points) "
         "while keeping test accuracy (reg - BN test acc within 1 point)",
         _fmt(reg.get("flipped_mem_acc"), pct=True) + f"; test acc {_test_delta(summary)}",
         _reg_verdict(reg, summary)),
        ("... and at matched clean fit (flipped_mem_acc, reg vs BN at the first epoch each "
         "reaches the lowest final clean train acc; point estimate; the regularized arm also "
         "fits the clean data more slowly)",
         _matched(summary.get("matched_utility", {}), "batchnorm_reg", "batchnorm"),
         _matched_verdict(summary.get("matched_utility", {}), "batchnorm_reg", "batchnorm",
                          sign=-1)),
    ]
    seeds = summary.get("seeds", {})
    across = seeds.get("delta_batchnorm_minus_none", {})
    if seeds.get("n", 1) > 1 and across:
        for key, label, thr in (("flipped_mem_acc", "flipped_mem_acc", 0.0),
                                ("auc_lira_online_all", "LiRA AUC all samples", need / 100),
                                ("matched_auc_lira_online_identity_all",
                                 "LiRA AUC at matched shadow fit", 0.0)):
            row = across.get(key) or {}
            rows.append((f"Across {seeds['n']} seeds: BN - none {label} (mean, t-interval, points)",
                         _fmt({"value": row.get("mean"), "lo": row.get("lo"), "hi": row.get("hi")},
                              pct=True) if row.get("mean") is not None else "n/a",
                         verdict({"value": row.get("mean"), "lo": row.get("lo")}, threshold=thr)))
    return rows


def _lira_delta(lira: dict) -> dict | None:
    return ((lira.get("delta_batchnorm_minus_none") or {}).get("matched") or {}).get("all")


def _matched_lira(lira: dict) -> str:
    d = _lira_delta(lira)
    if not d or d.get("auc") is None:
        return "n/a"
    return (f"{_fmt(d, 'auc', pct=True)} (epoch {lira['batchnorm']['epoch']} vs "
            f"{lira['none']['epoch']}; at the final epoch "
            f"{_fmt(lira['delta_batchnorm_minus_none']['final']['all'], 'auc', pct=True)})")


def gamma_push(model, x, y, masks: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Per BN layer and sample group: -mean_i dl_i/dgamma (mean over channels), eval mode.

    Positive means an SGD step on those samples pushes the layer's gamma *up* (the paper's
    self-reinforcing loop); the value is per sample, so groups of different size compare.
    """
    import torch
    import torch.nn.functional as F

    from bnmem.models import bn_layers

    out: dict[str, dict[str, float]] = {}
    model.eval()
    for group, mask in masks.items():
        idx = np.flatnonzero(mask)
        if idx.size == 0:
            continue
        model.zero_grad()
        F.cross_entropy(model(x[idx]), torch.as_tensor(y[idx]), reduction="mean").backward()
        for name, m in bn_layers(model):
            out.setdefault(name.replace(".", "_"), {})[group] = float(-m.weight.grad.mean())
    return out
