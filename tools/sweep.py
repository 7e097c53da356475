"""Queue a DVC parameter sweep, run it, and tabulate the privacy/utility trade-off.

    python tools/sweep.py reg_strength 0 0.01 0.1 1 --out plots/sweep_reg
    python tools/sweep.py noise_rate 0 0.01 0.05 --out plots/sweep_noise

Runs `dvc exp run --queue -S <key>=<v>` per value, `dvc queue start`, waits, then reads
`dvc exp show --json` and writes <out>.md and <out>.png: per value and arm the headline
attack (metrics/attack.json) and fit (metrics/train.json), and per value the pipeline's
comparisons with their intervals (metrics/deltas.json: the primary one at matched held-out
accuracy, and equal epochs). Experiments run from HEAD, so commit first. A value whose
experiment left a metric out (noise_rate 0 has no flipped samples) reads "-".
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's bnmem, not another's editable install

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bnmem.report.plots import colour  # noqa: E402

COLUMNS = {  # column label -> (metrics file, key under the arm); the headline attack
    "auc_all": ("metrics/attack.json", "auc_all"),
    "auc_flipped": ("metrics/attack.json", "auc_flipped"),
    "auc_ood": ("metrics/attack.json", "auc_ood"),
    "tpr_at_fpr_1e-3_all": ("metrics/attack.json", "tpr_at_fpr_1e-3_all"),
    "flipped_mem_acc": ("metrics/train.json", "flipped_mem_acc"),
    "clean_train_acc": ("metrics/train.json", "clean_train_acc"),
    "test_acc": ("metrics/train.json", "test_acc"),
}
DELTAS = "metrics/deltas.json"  # pair -> figure -> {value, lo, hi}


def dvc(*args: str) -> str:
    res = subprocess.run(["dvc", *args], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"sweep: `dvc {' '.join(args)}` failed: {res.stderr.strip().splitlines()[-1:]}")
    return res.stdout


def wait_for_queue(poll: float = 5.0) -> None:
    while True:
        status = dvc("queue", "status")
        if not any(word in status for word in ("Queued", "Running")):
            return
        time.sleep(poll)


def experiments(shown: list) -> list[dict]:
    """Every row of `dvc exp show --json` (baselines and their experiments), each as
    {name, params, metrics: {file: data}}; rows that failed or have no metrics are left out."""
    rows = []
    for baseline in shown:
        for exp in [baseline] + [e for r in baseline.get("experiments") or [] for e in r.get("revs", [])]:
            data = exp.get("data") or {}
            metrics = {f: (m or {}).get("data") for f, m in (data.get("metrics") or {}).items()}
            if not any(metrics.values()):
                continue
            params = (((data.get("params") or {}).get("params.yaml") or {}).get("data")) or {}
            rows.append({"name": exp.get("name") or data.get("rev") or exp.get("rev"),
                         "params": params, "metrics": {f: m or {} for f, m in metrics.items()}})
    return rows


def baseline_params(shown: list) -> dict | None:
    """params.yaml of the commit the experiments ran from (the first baseline that is not
    the workspace), or None when `dvc exp show` lists none."""
    for baseline in shown:
        data = baseline.get("data") or {}
        if (data.get("rev") or baseline.get("rev")) != "workspace":
            return (((data.get("params") or {}).get("params.yaml") or {}).get("data")) or {}
    return None


def collect(rows: list[dict], key: str, values: list[float], reference: dict | None = None
            ) -> tuple[list[dict], list[dict]]:
    """(per value and arm, per value, pair and figure) from the experiments that set `key`
    to one of `values` and every other parameter as `reference` (the baseline commit's
    params: a grid unit or a hand-run experiment that also changed another knob is not
    this sweep's); the workspace is never one; the first experiment listed per value wins."""
    def same(params: dict) -> bool:
        return reference is None or ({k: v for k, v in params.items() if k != key}
                                     == {k: v for k, v in reference.items() if k != key})
    by_value = {}
    for row in rows:
        v = row["params"].get(key)
        if (row["name"] != "workspace" and isinstance(v, (int, float)) and float(v) in values
                and float(v) not in by_value and same(row["params"])):
            by_value[float(v)] = row
    arms, deltas = [], []
    for v in sorted(by_value):
        row = by_value[v]
        for arm in row["params"].get("arms", []):
            arms.append({key: v, "arm": arm, "exp": row["name"],
                         **{col: (row["metrics"].get(f, {}).get(arm) or {}).get(k)
                            for col, (f, k) in COLUMNS.items()}})
        for pair, figures in sorted((row["metrics"].get(DELTAS) or {}).items()):
            for figure, ci in sorted(figures.items()):
                deltas.append({key: v, "pair": pair, "figure": figure, **ci})
    return arms, deltas


def fmt(v) -> str:
    return "-" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)


def table(cols: list[str], rows: list[dict]) -> list[str]:
    return (["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            + ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows])


def write(arms: list[dict], deltas: list[dict], key: str, out: Path) -> None:
    lines = [f"# Sweep over `{key}`", "",
             "Per arm: the headline attack (LiRA online, every sample) and the fit, at the end "
             "of each arm's recipe (metrics/attack.json, metrics/train.json).", ""]
    lines += table([key, "arm", *COLUMNS, "exp"], arms)
    lines += ["", "Comparisons (metrics/deltas.json): AUC difference with its 95 % interval; "
              "`matched_heldout` is the primary criterion (endpoints at matched held-out "
              "accuracy), `equal_epochs` the two recipes' last models.", ""]
    lines += table([key, "pair", "figure", "value", "lo", "hi"], deltas)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    fig, axes = plt.subplots(1, 4, figsize=(18, 4))
    for arm in sorted({r["arm"] for r in arms}):
        rs = [r for r in arms if r["arm"] == arm]
        for ax, col in zip(axes, ("auc_all", "flipped_mem_acc", "test_acc")):
            ax.plot([r[key] for r in rs], [float("nan") if r[col] is None else r[col] for r in rs],
                    "-o", color=colour(arm), label=arm)
            ax.set(xlabel=key, ylabel=col)
    for pair in sorted({d["pair"] for d in deltas}):
        for figure, style in (("matched_heldout", "-o"), ("equal_epochs", "--s")):
            ds = [d for d in deltas if d["pair"] == pair and d["figure"].endswith(figure)
                  and d.get("value") is not None]
            if ds:  # an interval the run could not give (too few models) is drawn as none
                xs, ys = [d[key] for d in ds], [d["value"] for d in ds]
                err = [[y - (y if d.get("lo") is None else d["lo"]) for y, d in zip(ys, ds)],
                       [(y if d.get("hi") is None else d["hi"]) - y for y, d in zip(ys, ds)]]
                axes[3].errorbar(xs, ys, yerr=err, fmt=style, capsize=3,
                                 label=f"{pair}: {ds[0]['figure']}")
    axes[3].axhline(0, color="grey", lw=0.8)
    axes[3].set(xlabel=key, ylabel="difference (95 % interval)")
    for ax in axes:
        if key == "reg_strength":  # 0 and log-spaced values on one axis
            ax.set_xscale("symlog", linthresh=0.01)
            ax.set_xlim(-0.001, 1.5 * max((r[key] for r in arms), default=1.0))
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    fig.suptitle(f"privacy / utility vs {key}")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("key", help="a top-level params.yaml key (reg_strength, noise_rate, ...)")
    p.add_argument("values", nargs="+", type=float)
    p.add_argument("--out", required=True, help="path without suffix: writes <out>.md and <out>.png")
    p.add_argument("--no-run", action="store_true", help="only tabulate existing experiments")
    args = p.parse_args()
    if not args.no_run:
        for v in args.values:
            dvc("exp", "run", "--queue", "-S", f"{args.key}={v!r}")
        dvc("queue", "start", "-j", "1")
        wait_for_queue()
    shown = json.loads(dvc("exp", "show", "--json"))
    arms, deltas = collect(experiments(shown), args.key, [float(v) for v in args.values],
                           baseline_params(shown))
    missing = sorted(set(map(float, args.values)) - {r[args.key] for r in arms})
    write(arms, deltas, args.key, Path(args.out))
    print(Path(args.out).with_suffix(".md").read_text())
    if missing:  # a failed experiment: `dvc queue logs` says why
        sys.exit(f"sweep: no finished experiment with {args.key} = {', '.join(map(str, missing))} "
                 "(see `dvc queue status` and `dvc queue logs NAME`)")


if __name__ == "__main__":
    main()
