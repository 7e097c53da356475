"""Queue a DVC parameter sweep, run it, and tabulate the privacy/utility trade-off.

    python tools/sweep.py reg_strength 0 0.01 0.1 1 --out plots/sweep_reg
    python tools/sweep.py noise_rate 0 0.01 0.05 --out plots/sweep_noise

Runs `dvc exp run --queue -S <key>=<v>` per value, `dvc queue start`, waits, then reads
`dvc exp show --json` and writes <out>.md (table) and <out>.png (trade-off plot).
Experiments run from HEAD, so commit first.
"""
import argparse
import json
import subprocess
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from bnmem.report.plots import colour  # noqa: E402

COLUMNS = {  # column label -> (metrics file, path inside it under the arm); the headline attack
    "auc_flipped": ("metrics/attack.json", ["auc_flipped"]),
    "auc_ood": ("metrics/attack.json", ["auc_ood"]),
    "auc_all": ("metrics/attack.json", ["auc_all"]),
    "flipped_mem_acc": ("metrics/train.json", ["flipped_mem_acc"]),
    "ood_mem_acc": ("metrics/train.json", ["ood_mem_acc"]),
    "test_acc": ("metrics/train.json", ["test_acc"]),
}


def dvc(*args: str) -> str:
    return subprocess.run(["dvc", *args], check=True, capture_output=True, text=True).stdout


def wait_for_queue(poll: float = 5.0) -> None:
    while True:
        status = dvc("queue", "status")
        if not any(word in status for word in ("Queued", "Running")):
            return
        time.sleep(poll)


def dig(d: dict, path: list[str]):
    for p in path:
        if not isinstance(d, dict) or p not in d:
            return None
        d = d[p]
    return d


def collect(key: str, values: list[float]) -> list[dict]:
    """One row per (value, arm) from the experiments of HEAD that set `key`."""
    rows = []
    for baseline in json.loads(dvc("exp", "show", "--json")):
        for exp in [baseline] + [e for r in baseline.get("experiments") or [] for e in r.get("revs", [])]:
            data = (exp.get("data") or {})
            params = dig(data, ["params", "params.yaml", "data"]) or {}
            if params.get(key) not in values or not data.get("metrics"):
                continue
            metrics = {f: (m or {}).get("data", {}) for f, m in data["metrics"].items()}
            for arm in params.get("arms", []):
                row = {key: params[key], "arm": arm, "exp": exp.get("name") or exp.get("rev")}
                for col, (f, path) in COLUMNS.items():
                    row[col] = dig(metrics.get(f, {}), [arm] + path)
                rows.append(row)
    seen, out = set(), []
    for r in sorted(rows, key=lambda r: (r[key], r["arm"])):
        if (r[key], r["arm"]) not in seen:
            seen.add((r[key], r["arm"]))
            out.append(r)
    return out


def write(rows: list[dict], key: str, out: Path) -> None:
    cols = [key, "arm"] + list(COLUMNS)
    fmt = lambda v: f"{v:.4f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows]
    out.with_suffix(".md").write_text(f"# Sweep over `{key}`\n\n" + "\n".join(lines) + "\n")
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for arm in sorted({r["arm"] for r in rows}):
        rs = [r for r in rows if r["arm"] == arm]
        xs = [r[key] for r in rs]
        for ax, col in zip(axes, ("auc_flipped", "flipped_mem_acc", "test_acc")):
            ax.plot(xs, [r[col] if r[col] is not None else float("nan") for r in rs], "-o",
                    color=colour(arm), label=arm)
            ax.set(xlabel=key, ylabel=col)
            if key == "reg_strength":  # 0 and log-spaced values on one axis
                ax.set_xscale("symlog", linthresh=0.01)
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle(f"privacy / utility vs {key}")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("key")
    p.add_argument("values", nargs="+", type=float)
    p.add_argument("--out", required=True)
    p.add_argument("--no-run", action="store_true", help="only tabulate existing experiments")
    args = p.parse_args()
    if not args.no_run:
        for v in args.values:
            dvc("exp", "run", "--queue", "-S", f"{args.key}={v:g}")
        dvc("queue", "start", "-j", "1")
        wait_for_queue()
    rows = collect(args.key, args.values)
    write(rows, args.key, Path(args.out))
    print(Path(args.out).with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
