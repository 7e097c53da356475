"""The sample-only bootstrap of every attack variant's ROC (bnmem.attack.roc._bootstrap): the C
pass (roc_boot.c) against the numpy reference in the same run, same inputs.

    python bench/bench_roc_boot.py --models 64 --samples 8000 --resamples 200
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import bnmem  # noqa: F401  (pins the CPU kernels first)
import numpy as np

from bnmem.attack.roc import _bootstrap, _bootstrap_numpy, _kernel, bootstrap_weights


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", type=int, default=64)
    p.add_argument("--samples", type=int, default=8000)
    p.add_argument("--resamples", type=int, default=200)
    p.add_argument("--out", default="bench/results/roc_boot.md")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    keep = rng.random((args.models, args.samples)) < 0.5
    scores = rng.normal(size=keep.shape) + 0.3 * keep
    w = bootstrap_weights(rng.integers(0, 3, args.samples), args.resamples, rng)
    assert _kernel() is not None, "no C compiler: nothing to compare"
    rows = []
    for name, fn in (("numpy reference", _bootstrap_numpy), ("C pass (roc_boot.c)", _bootstrap)):
        t0 = time.perf_counter()
        out = fn(scores, keep, w)
        rows.append((name, time.perf_counter() - t0, out))
    diff = np.abs(rows[0][2]["auc"] - rows[1][2]["auc"]).max()
    pairs = keep.size * args.resamples
    lines = [f"# ROC bootstrap, C pass vs numpy (bench/bench_roc_boot.py): {args.models} "
             f"models x {args.samples} samples, {args.resamples} resamples "
             f"({pairs / 1e6:.0f} M pair-visits)", "",
             "| path | seconds | ns per pair and resample | speed-up |", "|---|---:|---:|---:|"]
    lines += [f"| {name} | {t:.2f} | {t / pairs * 1e9:.1f} | {rows[0][1] / t:.1f}x |"
              for name, t, _ in rows]
    lines += ["", f"max |AUC difference| {diff:.1e}; TPR at 1e-3 identical: "
              f"{np.array_equal(rows[0][2]['tpr_at_fpr_1e-3'], rows[1][2]['tpr_at_fpr_1e-3'])}"]
    print("\n".join(lines))
    Path(args.out).write_text("\n".join(lines) + "\n")

if __name__ == "__main__":
    main()
