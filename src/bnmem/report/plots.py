"""Figures for the report: one function per PNG, arms in consistent colours."""
from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from bnmem.core.kinds import HEADLINE, KINDS  # noqa: E402
from bnmem.attack.frontier import pareto_at  # noqa: E402

COLOURS = {"none": "#1f77b4", "batchnorm": "#d62728", "batchnorm_reg": "#2ca02c",
           "groupnorm": "#9467bd", "layernorm": "#ff7f0e"}
KIND_NAMES = {code: name for name, code in KINDS.items()}


DP_COLOURS = ("#8c564b", "#e377c2", "#bcbd22", "#17becf")  # the DP arms, by name


def colour(arm: str) -> str:
    if arm.startswith("groupnorm_dp"):  # eps1, eps2, eps4, eps8 (or dp.epsilon): four shades
        e = arm.rpartition("_eps")[2] if "_eps" in arm else "0"
        return DP_COLOURS[int(e).bit_length() % len(DP_COLOURS)]
    return COLOURS.get(arm, "#7f7f7f")


_JOBS: list = []  # draw()'s figures, read by its forked workers (nothing pickled but paths)


def _draw_one(i: int) -> Path:
    fn, args = _JOBS[i]
    return fn(*args)


def draw(jobs: dict[str, tuple[Callable[..., Path], tuple]], workers: int = 1) -> dict[str, Path]:
    """Every figure of `jobs` {key: (a plot function of this module, its arguments)}, on
    up to `workers` forked processes, in the order given (the longest first balances them).
    Each PNG is drawn whole by one process, so its bytes are those of a serial run."""
    global _JOBS
    keys = list(jobs)
    workers = min(workers, len(keys))
    if workers <= 1 or "fork" not in mp.get_all_start_methods():
        return {k: fn(*args) for k, (fn, args) in jobs.items()}
    _JOBS = [jobs[k] for k in keys]
    try:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            return dict(zip(keys, pool.map(_draw_one, range(len(keys)))))
    finally:
        _JOBS = []


def _save(fig: plt.Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110, metadata={"Software": None})  # no version stamp: stable bytes
    plt.close(fig)
    return path


def roc_curves(roc: pd.DataFrame, metrics: dict, path: Path, attack: str = "lira_online") -> Path:
    """Log-log ROC per subset (all, flipped, ood), one line per arm, chance line dashed."""
    subsets = [s for s in HEADLINE if s in set(roc["subset"])]
    fig, axes = plt.subplots(1, len(subsets), figsize=(4.6 * len(subsets), 4.2), squeeze=False)
    for ax, sub in zip(axes[0], subsets):
        grid = np.logspace(-4, 0, 50)
        ax.plot(grid, grid, "k--", lw=0.8, label="chance")
        for arm, df in roc[(roc["attack"] == attack) & (roc["subset"] == sub)].groupby("arm", sort=False):
            m = metrics.get(arm, {}).get(attack, {}).get(sub) or {}
            tpr = m.get("tpr_at_fpr_1e-3")
            label = (f"{arm} AUC {m.get('auc') or float('nan'):.3f}, TPR@1e-3 "
                     + ("n/a (too few negatives)" if tpr is None else f"{tpr:.4g}"))
            ax.plot(df["fpr"].clip(lower=1e-4), df["tpr"].clip(lower=1e-4), color=colour(arm), label=label)
        ax.set(xscale="log", yscale="log", xlim=(1e-4, 1), ylim=(1e-4, 1.05),
               xlabel="false positive rate", ylabel="true positive rate",
               title=f"{attack}: {sub} samples")
        ax.legend(fontsize=7, loc="lower right")
    return _save(fig, path)


def memorization_curves(curves: dict[str, pd.DataFrame], path: Path) -> Path:
    """flipped/ood memorization vs epoch, and vs clean train accuracy (matched utility)."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for arm, df in curves.items():
        c = colour(arm)
        axes[0].plot(df["epoch"], df["flipped_mem_acc"], "-o", ms=3, color=c, label=f"{arm} flipped")
        if df["ood_mem_acc"].notna().any():
            axes[0].plot(df["epoch"], df["ood_mem_acc"], "--s", ms=3, color=c, label=f"{arm} ood")
        axes[1].plot(df["clean_train_acc"], df["flipped_mem_acc"], "-o", ms=3, color=c, label=arm)
        axes[2].plot(df["epoch"], df["test_acc"], "-o", ms=3, color=c, label=f"{arm} test")
        axes[2].plot(df["epoch"], df["clean_train_acc"], ":", color=c, label=f"{arm} clean train")
    axes[0].set(xlabel="epoch", ylabel="accuracy on the corrupted label",
                title="memorization vs epoch", ylim=(-0.02, 1.02))
    axes[1].set(xlabel="clean train accuracy", ylabel="flipped_mem_acc",
                title="memorization at matched fit", ylim=(-0.02, 1.02))
    axes[2].set(xlabel="epoch", ylabel="accuracy", title="utility", ylim=(0, 1.02))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


def grad_norms(norms: dict[str, np.ndarray], kind: np.ndarray, path: Path) -> Path:
    """Per-sample gradient norm distributions by kind, one panel per arm, log-x."""
    arms = list(norms)
    lo = max(min(float(np.min(v[v > 0])) for v in norms.values()), 1e-8)
    hi = max(float(np.max(v)) for v in norms.values())
    bins = np.logspace(np.log10(lo), np.log10(hi), 40)
    fig, axes = plt.subplots(1, len(arms), figsize=(4.4 * len(arms), 3.8), squeeze=False,
                             sharex=True)
    for ax, arm in zip(axes[0], arms):
        for k, name in KIND_NAMES.items():
            v = norms[arm][kind == k]
            if len(v):
                # share per log-spaced bin (density=True would divide by the linear bin width
                # and visually shrink the wide bins at large norms)
                ax.hist(v, bins=bins, weights=np.full(len(v), 1.0 / len(v)), histtype="step",
                        lw=1.5, label=f"{name} (median {np.median(v):.3g})")
        ax.set(xscale="log", xlabel="per-sample gradient norm (eval mode)",
               ylabel="share of the kind's samples", title=arm)
        ax.legend(fontsize=7)
    return _save(fig, path)


def gamma_sigma_layers(layers: dict[str, dict[str, list[float]]], path: Path) -> Path:
    """|gamma|/sigma per BN layer (box per layer, one panel per BN arm), line at 1."""
    arms = [a for a in layers if layers[a]]
    fig, axes = plt.subplots(1, max(len(arms), 1), figsize=(5 * max(len(arms), 1), 3.8),
                             squeeze=False, sharey=True)
    for ax, arm in zip(axes[0], arms):
        names = list(layers[arm])
        ax.boxplot([layers[arm][n] for n in names], showfliers=True)
        ax.set_xticks(range(1, len(names) + 1), names, rotation=30, fontsize=7)
        ax.axhline(1.0, color="k", ls="--", lw=0.8)
        ax.set(yscale="log", ylabel="|gamma| / sigma (running)", title=arm)
    if not arms:
        axes[0][0].text(0.5, 0.5, "no BN arm", ha="center")
    return _save(fig, path)


def mem_vs_lira(points: dict[str, tuple[np.ndarray, np.ndarray]], kind: np.ndarray,
                path: Path) -> Path:
    """Memorization score vs mean LiRA score per sample, coloured by kind, one panel per arm."""
    arms = list(points)
    fig, axes = plt.subplots(1, len(arms), figsize=(4.4 * len(arms), 3.8), squeeze=False,
                             sharey=True)
    for ax, arm in zip(axes[0], arms):
        mem, lira = points[arm]
        for k, name in KIND_NAMES.items():
            sel = kind == k
            if sel.any():
                ax.scatter(mem[sel], lira[sel], s=4 if k == 0 else 10, alpha=0.4 if k == 0 else 0.8,
                           label=name)
        ax.set(xlabel="memorization score (IN acc - OUT acc)",
               ylabel="mean LiRA online score when IN", title=arm)
        ax.legend(fontsize=7, markerscale=2)
    return _save(fig, path)


def _epochs(curve: dict) -> list[int]:
    """The epochs a within-run curve was recorded at (shadow.track_at; before it: each)."""
    return curve.get("epochs") or list(range(1, len(curve["fit"]) + 1))


def lira_vs_fit(membership: dict, path: Path) -> Path:
    """Shadow models per epoch: the headline attack's AUC (identity query) vs epoch and vs
    their clean fit, and each arm - none difference over the fits both pass through, with
    its 95 % band (shadow models and samples resampled)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for arm, a in membership["arms"].items():
        if "epoch" not in a:
            continue
        c, fit, auc = colour(arm), a["epoch"]["fit"], a["epoch"]["auc_all"]
        axes[0].plot(_epochs(a["epoch"]), auc, "-o", ms=3, color=c, label=arm)
        axes[1].plot(fit, auc, "-o", ms=3, color=c, label=arm)
    for pair, cmp in membership["compare"].items():
        cur = cmp.get("curve")
        if not cur or not pair.endswith("_minus_none"):
            continue
        c = colour(pair[: -len("_minus_none")])
        fit = np.asarray(cur["fit"])
        lo = np.array([np.nan if v is None else v for v in cur["lo"]], dtype=float)
        hi = np.array([np.nan if v is None else v for v in cur["hi"]], dtype=float)
        axes[2].plot(fit, cur["auc_all"], color=c, label=pair.replace("_minus_", " - "))
        axes[2].fill_between(fit, lo, hi, color=c, alpha=0.2)
        m = cmp["matched_fit"]
        axes[1].axvline(m["fit"], color=c, ls="--", lw=0.8)
    axes[0].set(xlabel="epoch", ylabel="AUC (all samples)", title="leakage vs epoch")
    axes[1].set(xlabel="shadow fit (accuracy on IN clean samples)", ylabel="AUC (all samples)",
                title="leakage vs fit (dashed: common fit)")
    axes[2].set(xlabel="shadow fit", ylabel="AUC difference",
                title="difference at equal fit (95 % band)")
    for ax in axes[:2]:
        ax.axhline(0.5, color="grey", lw=0.6)
    axes[2].axhline(0.0, color="grey", lw=0.6)
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, path)


FRONTIER_COLUMNS = ("out_acc_clean", "in_acc_clean", "train_loss", "auc_all", "tpr_low_all",
                    "fz_flipped")


def _err(d: dict, scale: float = 1.0) -> tuple[float, list[float]]:
    v = d["value"] * scale if d.get("value") is not None else np.nan
    lo = d["lo"] * scale if d.get("lo") is not None else v
    hi = d["hi"] * scale if d.get("hi") is not None else v
    return v, [v - lo, hi - v]


def frontier(membership: dict, path: Path) -> Path:
    """Privacy-utility frontiers from the annealed endpoints (bnmem.attack.frontier): per arm,
    LiRA AUC and TPR at FPR 1e-3 against held-out accuracy (primary) and against fit, one
    point per budget (epochs labelled) with models+samples error bars, the Pareto frontier
    dashed; and each arm - none AUC difference between the frontiers over the held-out
    accuracies both reach, with its 95 % band."""
    fr = membership["frontier"]
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    panels = [(axes[0, 0], "out_acc_clean", "auc_all"), (axes[0, 1], "in_acc_clean", "auc_all"),
              (axes[1, 0], "out_acc_clean", "tpr_low_all")]
    for arm, a in fr["arms"].items():
        c, ends = colour(arm), a["endpoints"]
        for ax, xk, yk in panels:
            pts = [(_err(e[xk]), _err(e[yk]), e["epochs"]) for e in ends
                   if e[xk].get("value") is not None and e[yk].get("value") is not None]
            if not pts:
                continue
            xs, ys = [p[0][0] for p in pts], [p[1][0] for p in pts]
            ax.errorbar(xs, ys, xerr=np.array([p[0][1] for p in pts]).T,
                        yerr=np.array([p[1][1] for p in pts]).T, fmt="-o", ms=4, color=c,
                        capsize=2, lw=1.2, label=arm)
            for x, y, (_, _, ep) in zip(xs, ys, pts):
                ax.annotate(f"{ep}", (x, y), textcoords="offset points", xytext=(4, 4),
                            fontsize=7, color=c)
            # Pareto frontier: least leakage at or above each utility (bnmem.attack.frontier)
            grid = np.linspace(min(xs), max(xs), 200)
            ax.plot(grid, [pareto_at(xs, ys, g) for g in grid], color=c, ls="--", lw=0.9,
                    alpha=0.8)
    for pair, cmp in fr["compare"].items():
        cur = cmp.get("curve")
        if not cur or not cur["heldout"] or not pair.endswith("_minus_none"):
            continue
        c = colour(pair[: -len("_minus_none")])
        x = np.asarray(cur["heldout"])
        lo = np.array([np.nan if v is None else v for v in cur["lo"]], dtype=float)
        hi = np.array([np.nan if v is None else v for v in cur["hi"]], dtype=float)
        axes[1, 1].plot(x, cur["auc_all"], color=c, label=pair.replace("_minus_", " - "))
        axes[1, 1].fill_between(x, lo, hi, color=c, alpha=0.2)
    axes[0, 0].set(xlabel="held-out accuracy (shadows' OUT clean samples)", ylabel="LiRA AUC (all samples)",
                   title="leakage vs held-out accuracy (primary; labels: epochs)")
    axes[0, 1].set(xlabel="fit (accuracy on IN clean samples)", ylabel="LiRA AUC (all samples)",
                   title="leakage vs fit")
    axes[1, 0].set(xlabel="held-out accuracy", ylabel="TPR at FPR 1e-3", yscale="log",
                   title="low-FPR leakage vs held-out accuracy")
    axes[1, 1].set(xlabel="held-out accuracy", ylabel="AUC difference (Pareto frontiers)",
                   title="arm - none at equal held-out accuracy (pointwise 95 % band)")
    axes[1, 1].axhline(0.0, color="grey", lw=0.6)
    for ax in axes.ravel():
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Annealed endpoints: each point a complete training run of that many epochs "
                 "(dashed: Pareto frontier)", fontsize=10)
    return _save(fig, path)


def dvc_tables(out: Path, roc: pd.DataFrame, membership: dict,
               hists: dict[str, pd.DataFrame]) -> None:
    """Long-format CSVs (one `arm` column) for the interactive plots declared in dvc.yaml:
    roc.csv (headline attack, all samples; TPR floored at 1e-4 for the log axis),
    lira_vs_fit.csv (shadows per epoch: fit, AUC, memorization), frontier.csv (annealed
    endpoints per arm and budget: held-out accuracy, fit, AUC, TPR at 1e-3) and grad_hist.csv
    (gradient-norm density per arm and kind, at each bin's geometric centre)."""
    out.mkdir(parents=True, exist_ok=True)
    head = roc[(roc["attack"] == membership["variant"]) & (roc["subset"] == "all")]
    head = head.assign(tpr=head["tpr"].clip(lower=1e-4))[["arm", "fpr", "tpr"]]
    head.to_csv(out / "roc.csv", index=False, float_format="%.6g")
    rows = [{"arm": arm, "epoch": e, "fit": f, "auc_all": a, "in_acc_flipped": m}
            for arm, d in membership["arms"].items() if "epoch" in d
            for e, f, a, m in zip(_epochs(d["epoch"]), d["epoch"]["fit"], d["epoch"]["auc_all"],
                                  d["epoch"]["in_acc_flipped"])]
    pd.DataFrame(rows, columns=["arm", "epoch", "fit", "auc_all", "in_acc_flipped"]).to_csv(
        out / "lira_vs_fit.csv", index=False, float_format="%.6g")
    rows = [{"arm": arm, "epochs": e["epochs"], **{k: e[k]["value"] for k in FRONTIER_COLUMNS}}
            for arm, a in (membership.get("frontier") or {}).get("arms", {}).items()
            for e in a["endpoints"]]
    pd.DataFrame(rows, columns=["arm", "epochs", *FRONTIER_COLUMNS]).to_csv(
        out / "frontier.csv", index=False, float_format="%.6g")
    hist = pd.concat([h.assign(arm=arm, norm=np.sqrt(h["bin_left"] * h["bin_right"]))
                      for arm, h in hists.items()])
    hist[["arm", "kind", "norm", "density"]].to_csv(out / "grad_hist.csv", index=False,
                                                    float_format="%.6g")


def exposure_grid(images: np.ndarray, rows: dict[str, list[dict]], path: Path) -> Path:
    """The most exposed training samples: one row per model (arm or your model), its top-k
    pool images most exposed first, each titled with source row, label, kind, exposure."""
    k = max(len(r) for r in rows.values())
    fig, axes = plt.subplots(len(rows), k, figsize=(1.35 * k + 0.9, 1.75 * len(rows)),
                             squeeze=False)
    for r, (name, top) in enumerate(rows.items()):
        for c in range(k):
            ax = axes[r][c]
            ax.set_xticks([]), ax.set_yticks([])
            if c >= len(top):
                ax.axis("off")
                continue
            row = top[c]
            img = images[row["pool_index"]]
            ax.imshow(img[0] if img.shape[0] == 1 else img.transpose(1, 2, 0),
                      cmap="gray" if img.shape[0] == 1 else None, vmin=0, vmax=255)
            ax.set_title(f"#{row['source_index']} y={row['label']}\n{row['kind']} "
                         f"{row['exposure'][name]:.1f}", fontsize=7,
                         color="black" if row["kind"] == "clean" else "#d62728")
            for side in ax.spines.values():
                side.set_color(colour(name))
                side.set_linewidth(2)
        axes[r][0].set_ylabel(name, fontsize=8, color=colour(name))
    fig.suptitle("Most exposed training samples (exposure = -log10 P(margin | not trained on it))",
                 fontsize=9)
    return _save(fig, path)
