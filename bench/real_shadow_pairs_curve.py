"""Exploratory (not a pre-registered study): how a figure's pairs' variance falls with the
number of pairs in a run, on a real-shadow pool (bench/real_shadow_coverage.py's pools).

For n in --sizes, --subsets random n-pair subsets of the pool (without replacement, the same
pairs in every arm) give each read's point (every comparison and read of the coverage
study); T_p(n) is their variance x P_pool / (P_pool - n). A figure that is a mean of
per-pair terms has T_p(n) = T_p(8) x 8 / n (slope -1 on log-log); an attack whose figures
sharpen with more shadows falls faster. Asked because the pairs' jackknife overstates the
attack's figures' T_p(8) about twofold (bench/results/real_shadows_halves_plan.md's
outcome): the delete-one replicates are (n - 1)-pair runs.

    python bench/real_shadow_pairs_curve.py --pool-dir /work/realpool --store results/real_shadows_curve_seed0.jsonl
"""
import argparse
import json
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import real_shadow_coverage as C  # noqa: E402  (loads bnmem first)
import numpy as np  # noqa: E402

from bnmem.attack.coverage import simulate_all  # noqa: E402


def _point(args: tuple) -> np.ndarray:
    seed, n, unit, n_pool, _ = args
    pairs = np.sort(np.random.default_rng([seed, 0xC0E, n, unit]).choice(n_pool, n, replace=False))
    r = C.rows(pairs, np.ones((1, n), np.int64), np.ones((1, C._DATA["kind"].size)))
    return np.concatenate([v[0] for v in r.values()])


def curve(store: Path) -> dict:
    """{class: {n: n T_p(n) / (8 T_p(8))}} (ratios of sums over the class's keys): 1 at every
    n for a mean of per-pair terms, falling with n where the figure sharpens with more pairs."""
    import real_shadow_rules as R
    meta = json.loads(store.with_suffix(".meta.json").read_text())
    rows = {i: np.array(v, float) for (_, i), v in R.store_units(store).items()}
    sizes, m, keys, pool = meta["sizes"], meta["subsets"], meta["keys"], meta["n_pairs"]
    with warnings.catch_warnings():  # TPR at 4 pairs: never supported, nan
        warnings.simplefilter("ignore", RuntimeWarning)
        tp = {n: np.nanvar(np.array([rows[j * m + u] for u in range(m)]), axis=0, ddof=1) * pool / (pool - n)
              for j, n in enumerate(sizes)}
    out = {}
    for cls, (reads, _) in R.CLASSES.items():
        idx = [keys.index(f"{c}/{r}") for c in R.COMPARISONS for r in reads]
        base = 8 * sum(tp[8][i] for i in idx)
        out[cls] = {n: n * sum(tp[n][i] for i in idx) / base for n in sizes}
    return out


def markdown(store: Path) -> str:
    import real_shadow_rules as R
    c = curve(store)
    sizes = list(next(iter(c.values())))
    return "\n".join(["| class | " + " | ".join(f"n = {n}" for n in sizes) + " |",
                      "|---|" + "---|" * len(sizes)]
                     + [f"| {cls}: {R.LABEL[cls]} | " + " | ".join(f"{v[n]:.2f}" for n in sizes) + " |"
                        for cls, v in c.items()])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool-dir", type=Path, required=True)
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 6, 7, 8, 12, 16])
    ap.add_argument("--subsets", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--store", type=Path, required=True)
    a = ap.parse_args()
    t0 = time.time()
    C._DATA.update(C.load(a.pool_dir))
    n_pool = C._DATA["arms"]["none"][-1]["keep"].shape[0] // 2
    fp = C.fingerprint(a.pool_dir)
    args = [(a.seed, n, u, n_pool, fp) for n in a.sizes for u in range(a.subsets)]
    simulate_all(_point, args, lambda x: None, [], a.workers, a.store)
    keys = [f"{cmp}/{name}" for cmp in ("batchnorm_minus_none", "batchnorm_reg_minus_none",
                                         "batchnorm_reg_minus_batchnorm")
            for name in C.names(len(C.BUDGETS) + 1)]
    meta = {"pool": fp, "n_pairs": n_pool, "sizes": a.sizes, "subsets": a.subsets, "keys": keys,
            "seconds": round(time.time() - t0, 1), "command": "python " + " ".join(sys.argv)}
    a.store.with_suffix(".meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps({k: v for k, v in meta.items() if k != "keys"}))
    print(markdown(a.store))


if __name__ == "__main__":
    main()
