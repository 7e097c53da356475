"""One simulated run's draws (bnmem.attack.coverage.draw_figures) with the attack stage's fast
paths against the reference path (arm_draw from scratch at level full, as draw_figures did
before): the unresampled pairs' scores and rankings kept across the point and every
samples-only draw, and the per-subset AUCs left out unless a figure asks for one. The two
must agree to the bit (checked here and in tests/test_resample.py); the gain is what every
coverage study and the synthetic coverage test run faster by.

    python bench/bench_draw_figures.py [--n-models 16 --n 1250 --draws 40 --repeats 5]

Both paths run on the same simulated run, alternating, in one process; the median of
`--repeats` is reported.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
import bnmem  # noqa: E402,F401  (pins the CPU kernels before numpy loads)
import lscpu  # noqa: E402
import numpy as np  # noqa: E402

from bnmem.attack.coverage import FIGURES, VARIANT, draw_figures, sample_kinds, simulate_run  # noqa: E402
from bnmem.attack.lira import PairSignals  # noqa: E402
from bnmem.attack.resample import arm_draw, draw_designs  # noqa: E402


def reference(phi, keep, kind, counts, weights, figures):
    ids = np.arange(keep.shape[0])
    out = []
    for p in phi:
        data = {"phi": p, "keep": keep, "correct": p[..., 0] > 0, "model_ids": ids}
        ps = PairSignals.build(p, keep, ids)
        rows = [arm_draw(data, ps, [], c, w, kind, VARIANT, True) for c, w in zip(counts, weights)]
        out.append([[r.get(f, np.nan) for f in figures] for r in rows])
    return np.array(out, dtype=np.float64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-models", type=int, default=16)
    ap.add_argument("--n", type=int, default=1250)
    ap.add_argument("--draws", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    kind = sample_kinds(a.n, 0.1, 0.0)
    phi, keep = simulate_run(a.n_models, a.n, (0.6, 0.3), kind, 5, 0.3)
    counts, weights, _ = draw_designs(kind, a.n_models // 2, a.draws, np.random.default_rng(1),
                                      ("pairs", "samples", "both", "jackknife"))
    times = {"reference": [], "fast": []}
    for _ in range(a.repeats):
        t = time.perf_counter()
        ref = reference(phi, keep, kind, counts, weights, FIGURES)
        times["reference"].append(time.perf_counter() - t)
        t = time.perf_counter()
        fast = draw_figures(phi, keep, kind, counts, weights, FIGURES)
        times["fast"].append(time.perf_counter() - t)
        np.testing.assert_array_equal(fast, ref)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{lscpu.describe()}; {a.n_models} models x {a.n} samples, {counts.shape[0]} draws "
          f"per arm (4 designs, {a.draws} each + jackknife), figures {', '.join(FIGURES)}; "
          f"median of {a.repeats}")
    print(f"reference (arm_draw, full, no cache): {med['reference']:.2f} s")
    print(f"draw_figures (cache, lean):           {med['fast']:.2f} s  "
          f"({med['reference'] / med['fast']:.2f}x; equal to the bit)")


if __name__ == "__main__":
    main()
