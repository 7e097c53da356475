"""Coverage of the intervals on real shadows: 8-pair runs drawn from a large pool of real
shadow pairs of the default recipe, with the pool as the truth (the study's plan, written
before any result: bench/results/real_shadows_plan.md).

The pool: every arm's shadow stage run with shadow.n_models = 256 (128 complementary pairs,
one keep matrix shared by the arms, as in the pipeline), on the default run's pool
(data/prepared/pool.npz); grad_models 0 and track_epochs false (neither changes an endpoint's
logits). Three kinds of unit, each one line of the resumable store (bnmem.attack.coverage.
simulate_all):

- a *coverage subset*: 8 pairs drawn without replacement (the same pairs in every arm), then
  exactly what the attack stage does with a run of 8 pairs: the point, the pairs'
  jackknife, and `draws` rows of each of the samples-only, pairs-only and joint designs
  (bnmem.attack.resample.draw_designs, arm_draw per endpoint at the production's levels,
  bnmem.attack.frontier.draw_compare per criterion); per read and comparison the store keeps
  the point and each design's variance (IntervalPlan.variances), bench/matched_rules.py's
  record layout;
- a *point subset* (truth rows): the point of another random 8-pair subset; the mean of the
  points over the point and coverage subsets is the conditional truth (these samples, this
  pool of pairs);
- a *partition block*: the 128 pairs split once into 16 disjoint 8-pair blocks; each block's
  point under `sample_draws` (200) stratified sample reweightings shared by all blocks. The
  variance over reweightings of the 16 blocks' mean is the samples' share of a fresh run's
  variance (T_s: the pairs' noise in it is a 16-block average).

    python bench/real_shadow_coverage.py --pool-dir /work/realpool --store results/real_shadows_seed0.jsonl

Analysis: bench/real_shadow_rules.py.
"""
import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
import bnmem  # noqa: E402,F401  (pins the CPU kernels before numpy loads)
import lscpu  # noqa: E402  (bench/lscpu.py: the machine line)
import numpy as np  # noqa: E402

from bnmem.attack import frontier  # noqa: E402
from bnmem.attack.coverage import simulate_all  # noqa: E402
from bnmem.attack.coverage_matched import COMPARED, FIGURES  # noqa: E402
from bnmem.attack.intervals import IntervalPlan, design_levels  # noqa: E402
from bnmem.attack.intervals import deleted_variance as intervals_deleted_variance  # noqa: E402
from bnmem.attack.lira import PairSignals  # noqa: E402
from bnmem.attack.resample import arm_draw, deleted_rows, draw_designs  # noqa: E402
from bnmem.attack.roc import bootstrap_weights  # noqa: E402
from bnmem.attack.signals import load_shadow  # noqa: E402
from bnmem.attack.stage import comparison_pairs, headline_variant  # noqa: E402
from bnmem.data.pool import load_pool  # noqa: E402

ARMS = ("none", "batchnorm", "batchnorm_reg")
BUDGETS = (1, 2, 4)
DESIGNS = ("pairs", "samples", "both", "jackknife")
EQUAL = ("auc_all", "fz_flipped", "fz_ood", "tpr_low_all")  # read at each equal budget
PAIRS = 8  # pairs of a run (the default shadow.n_models = 16)
BLOCKS = 16  # partition blocks (128 pool pairs / 8)
VARIANT = headline_variant(2 * PAIRS)
ONE_SIDED = True
_DATA: dict = {}  # set before the fork: {"arms": {arm: [endpoint data]}, "kind": [N]}


def load(pool_dir: Path) -> dict:
    """{arm: [endpoint data, budget order then the 12-epoch run]} and kind, read with the
    attack stage's loaders."""
    pool = load_pool(str(pool_dir / "pool.npz"))
    labels, kind = pool["y_train"], pool["kind"]
    arms = {}
    for arm in ARMS:
        paths = [pool_dir / arm / "shard_0.npz"]
        sig = load_shadow(paths, labels, 0)
        final = {"phi": sig.phi, "keep": sig.keep, "correct": sig.correct,
                 "model_ids": sig.model_ids, "loss": frontier.full_loss(paths, labels, 0),
                 "epoch_phi": None, "epoch_correct": None}
        arms[arm] = frontier.budget_data(paths, labels, 0, BUDGETS, sig.keep, sig.model_ids) + [final]
    keeps = [arms[a][-1]["keep"] for a in ARMS]
    assert all(np.array_equal(keeps[0], k) for k in keeps[1:]), "arms' keep masks differ"
    return {"arms": arms, "kind": np.asarray(kind)}


def fingerprint(pool_dir: Path) -> str:
    """The pool's identity (its files' bytes), part of every unit's arguments."""
    h = hashlib.sha256()
    for p in [pool_dir / "pool.npz"] + [pool_dir / a / "shard_0.npz" for a in ARMS]:
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def names(k_end: int) -> list[str]:
    """Every read: coverage_matched.FIGURES (matched utility and fit), then eq<k>_<figure>
    (a - b at equal budget k, 0-based; k_end - 1 is the 12-epoch run)."""
    return [f for f, _, _ in FIGURES] + [f"eq{k}_{f}" for k in range(k_end) for f in EQUAL]


def subset_pairs(seed: int, unit: int, n_pairs: int) -> np.ndarray:
    """PAIRS pool pairs drawn without replacement for one subset, ascending."""
    return np.sort(np.random.default_rng([seed, 0x5EAD, unit]).choice(n_pairs, PAIRS, replace=False))


def _select(d: dict, pairs: np.ndarray) -> dict:
    rows = np.sort(np.concatenate([2 * pairs, 2 * pairs + 1]))  # models (2p, 2p+1): pair p
    return {k: (v[rows] if isinstance(v, np.ndarray) else v) for k, v in d.items()}


def rows(pairs: np.ndarray, counts: np.ndarray, weights: np.ndarray,
         levels: list | None = None) -> dict[str, np.ndarray]:
    """{comparison: [draws, reads]} of one subset: every draw through arm_draw per endpoint
    (the production's level per design row, `levels`: [((start, stop), level)]) and
    draw_compare per criterion."""
    kind, ends = _DATA["kind"], {}
    for arm in ARMS:
        per_end = []
        for d in _DATA["arms"][arm]:
            sub = _select(d, pairs)
            ps, cache = PairSignals.build(sub["phi"], sub["keep"], sub["model_ids"]), {}
            per_end.append([arm_draw(sub, ps, [], c, w, kind, VARIANT, ONE_SIDED, cache,
                                     next((lv for (a, b), lv in (levels or []) if a <= r < b),
                                          "endpoints"))
                            for r, (c, w) in enumerate(zip(counts, weights))])
        ends[arm] = [[e[r] for e in per_end] for r in range(len(counts))]
    criteria = tuple(dict.fromkeys(c for _, c, _ in FIGURES))
    k_end = len(BUDGETS) + 1
    out = {}
    for a, b in comparison_pairs(ARMS):
        vals = []
        for ea, eb in zip(ends[a], ends[b]):
            r = {c: frontier.draw_compare(ea, eb, c, COMPARED) for c in criteria}
            vals.append([r[c][key] for _, c, key in FIGURES]
                        + [ea[k][f] - eb[k][f] for k in range(k_end) for f in EQUAL])
        out[f"{a}_minus_{b}"] = np.array(vals, dtype=np.float64)
    return out


def _point(args: tuple) -> np.ndarray:
    """A point subset: [comparisons x reads] flattened."""
    seed, unit, n_pairs, _ = args
    r = rows(subset_pairs(seed, unit, n_pairs), np.ones((1, PAIRS), np.int64),
             np.ones((1, _DATA["kind"].size)))
    return np.concatenate([v[0] for v in r.values()])


def _records(seed: int, unit: int, n_pairs: int, draws: int, stream: int, designs: tuple,
             fields: tuple, levels: dict) -> dict:
    """One subset's records: its pairs (subset_pairs), the rows of `designs` (own seed stream
    `stream`) at `levels` ({design: level}; others "endpoints"), and per comparison/read
    [point, *(each of `fields`' design variances)]."""
    kind = _DATA["kind"]
    pairs = subset_pairs(seed, unit, n_pairs)
    counts, weights, seg = draw_designs(kind, PAIRS, draws, np.random.default_rng([seed, stream, unit]),
                                        designs)
    vals = rows(pairs, counts, weights, [(tuple(seg[d]), lv) for d, lv in levels.items() if d in seg])
    plan = IntervalPlan("both", PAIRS, seg)
    out = {"pairs": pairs.tolist()}
    for cmp, v in vals.items():
        for j, name in enumerate(names(len(BUDGETS) + 1)):
            var = plan.variances(v[:, j])
            out[f"{cmp}/{name}"] = [float(v[0, j]), *(np.nan if var[d] is None else var[d]
                                                       for d in fields)]
    return out


def _coverage(args: tuple) -> dict:
    """A coverage subset: {comparison/read: [point, V_pairs, V_samples, V_both, V_jackknife]}."""
    seed, unit, n_pairs, draws, _ = args
    return _records(seed, unit, n_pairs, draws, 0xC0F, DESIGNS, DESIGNS, design_levels())


def _halves(args: tuple) -> dict:
    """A coverage subset's "halves" rows only (bench/results/real_shadows_halves_plan.md):
    the same pairs as the main store's subset `unit`, `draws` // 2 shared sample reweightings
    of its own, each with the two halves of the pairs (bnmem.attack.resample.halves_rows);
    and the pairs' jackknife (P rows, at the production's level); {comparison/read: [point,
    the halves' covariance, V_jackknife]} (point and V_jackknife equal the main store's
    record's where it has one: a check that the pairs are the same)."""
    seed, unit, n_pairs, draws, _ = args
    return _records(seed, unit, n_pairs, draws, 0x4A1F, ("jackknife", "halves"),
                    ("halves", "jackknife"), {"jackknife": design_levels()["jackknife"]})


DELETED = (2, 3, 4)  # the delete-d jackknives' d (bench/results/real_shadows_deleted_plan.md)
DELETED_ROWS = 28  # rows per d: all C(8, 2) = 28; 28 of C(8, 3) = 56; 14 complementary splits for d = 4


def deleted_counts(n_pairs: int, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """(pair counts [rows, P], {d: (start, stop)}) of the delete-d jackknives for d in DELETED
    (bnmem.attack.resample.deleted_rows, DELETED_ROWS each, in that order from `rng`): for
    d = 2 every pair of pairs, for d = 3 a random 28 of the 56 triples, for d = 4 a random 14
    of the 35 complementary splits, both halves of each."""
    rows, seg = [], {}
    for d in DELETED:
        c = deleted_rows(n_pairs, d, rng, DELETED_ROWS)
        start = sum(len(x) for x in rows)
        seg[d] = (start, start + len(c))
        rows.append(c)
    return np.vstack(rows), seg


def deleted_variance(vals: np.ndarray, n_pairs: int, d: int) -> float:
    """bnmem.attack.intervals.deleted_variance, nan where it is undefined (a row not finite)."""
    v = intervals_deleted_variance(vals, n_pairs, d)
    return np.nan if v is None else v


def _deleted(args: tuple) -> dict:
    """A coverage subset's delete-d jackknife rows (own seed stream): the point, the rows of
    deleted_counts at the jackknife's production level, and the pairs' jackknife (P rows, a
    check: point and V_j equal the halves store's); {comparison/read: [point, V_d for each d
    of DELETED, V_jackknife]}."""
    seed, unit, n_pairs, _, _ = args
    kind = _DATA["kind"]
    pairs = subset_pairs(seed, unit, n_pairs)
    c_del, seg = deleted_counts(PAIRS, np.random.default_rng([seed, 0xDE1D, unit]))
    c_jack = np.ones((PAIRS, PAIRS), np.int64) - np.eye(PAIRS, dtype=np.int64)
    counts = np.vstack([np.ones((1, PAIRS), np.int64), c_del, c_jack])
    weights = np.ones((len(counts), kind.size))
    vals = rows(pairs, counts, weights, [((0, len(counts)), design_levels()["jackknife"])])
    j0 = 1 + len(c_del)
    plan = IntervalPlan("both", PAIRS, {"jackknife": (j0, j0 + PAIRS)})  # V_j as the pipeline's
    out = {"pairs": pairs.tolist()}
    for cmp, v in vals.items():
        for j, name in enumerate(names(len(BUDGETS) + 1)):
            x = v[:, j]
            v_j = plan.variances(x)["jackknife"]
            v_j = np.nan if v_j is None else v_j
            out[f"{cmp}/{name}"] = [float(x[0]), *(deleted_variance(x[1 + a:1 + b], PAIRS, d)
                                                   for d, (a, b) in seg.items()), v_j]
    return out


def _jackknife(args: tuple) -> dict:
    """A coverage subset's pairs' jackknife only (bench/results/real_shadows_anova_plan.md's
    fresh pool): the point and the P delete-one rows at the production's level;
    {comparison/read: [point, V_jackknife]} (both equal the halves store's where it has the
    subset)."""
    seed, unit, n_pairs, _, _ = args
    kind = _DATA["kind"]
    pairs = subset_pairs(seed, unit, n_pairs)
    c_jack = np.ones((PAIRS, PAIRS), np.int64) - np.eye(PAIRS, dtype=np.int64)
    counts = np.vstack([np.ones((1, PAIRS), np.int64), c_jack])
    vals = rows(pairs, counts, np.ones((len(counts), kind.size)),
                [((0, len(counts)), design_levels()["jackknife"])])
    plan = IntervalPlan("both", PAIRS, {"jackknife": (1, 1 + PAIRS)})
    out = {"pairs": pairs.tolist()}
    for cmp, v in vals.items():
        for j, name in enumerate(names(len(BUDGETS) + 1)):
            v_j = plan.variances(v[:, j])["jackknife"]
            out[f"{cmp}/{name}"] = [float(v[0, j]), np.nan if v_j is None else v_j]
    return out


def _block(args: tuple) -> dict:
    """A partition block: {comparison/read: [point, then one value per shared reweighting]}."""
    seed, block, n_pairs, sample_draws, _ = args
    kind = _DATA["kind"]
    order = np.random.default_rng([seed, 0xB10C]).permutation(n_pairs)
    pairs = np.sort(order[block * PAIRS:(block + 1) * PAIRS])
    w = np.vstack([np.ones((1, kind.size)),
                   bootstrap_weights(kind, sample_draws, np.random.default_rng([seed, 0x5A3]))])
    vals = rows(pairs, np.ones((len(w), PAIRS), np.int64), w)
    return {"pairs": pairs.tolist(),
            **{f"{cmp}/{name}": v[:, j].tolist() for cmp, v in vals.items()
               for j, name in enumerate(names(len(BUDGETS) + 1))}}


def _unit(args: tuple):
    return {"block": _block, "subset": _coverage, "halves": _halves, "deleted": _deleted,
            "jackknife": _jackknife}[args[0]](args[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool-dir", type=Path, required=True)
    ap.add_argument("--subsets", type=int, default=200, help="coverage subsets")
    ap.add_argument("--points", type=int, default=600, help="point-only subsets (truth rows)")
    ap.add_argument("--draws", type=int, default=100, help="rows per design (attack.model_bootstrap)")
    ap.add_argument("--sample-draws", type=int, default=200, help="shared reweightings of the blocks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--time-one", action="store_true", help="time one coverage subset and stop")
    ap.add_argument("--halves", action="store_true",
                    help="only the halves rows of the first --subsets coverage subsets (a store "
                         "of its own beside the main one: real_shadows_halves_plan.md)")
    ap.add_argument("--deleted", action="store_true",
                    help="only the delete-d jackknives' rows of the first --subsets coverage "
                         "subsets (a store of its own: real_shadows_deleted_plan.md)")
    ap.add_argument("--jackknife", action="store_true",
                    help="only the point and the pairs' jackknife of the first --subsets coverage "
                         "subsets (a store of its own: real_shadows_anova_plan.md)")
    a = ap.parse_args()
    t0 = time.time()
    _DATA.update(load(a.pool_dir))
    n_pairs = _DATA["arms"]["none"][-1]["keep"].shape[0] // 2
    if a.time_one:
        t1 = time.time()
        (_halves if a.halves else _deleted if a.deleted else _jackknife if a.jackknife
         else _coverage)((a.seed, 0, n_pairs, a.draws, ""))
        print(f"one coverage subset: {time.time() - t1:.1f} s (load {t1 - t0:.1f} s)")
        t1 = time.time()
        _point((a.seed, 0, n_pairs, ""))
        print(f"one point subset: {time.time() - t1:.1f} s")
        return
    fp = fingerprint(a.pool_dir)
    if a.halves or a.deleted or a.jackknife:  # rows of the coverage subsets, by unit number
        kind = "halves" if a.halves else "deleted" if a.deleted else "jackknife"
        if a.deleted:  # V_4's form, marked from the start: a store never mixes two forms
            meta_path = a.store.with_suffix(".meta.json")
            old_meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
            if a.store.is_file() and a.store.stat().st_size and "v4" not in old_meta:
                raise SystemExit(f"{a.store}: its V_4 was written in the form before 15f931e "
                                 f"({meta_path.name} has no \"v4\"); resuming would mix forms: "
                                 "finish it at 631a7ee or start a new store")
            meta_path.write_text(json.dumps({**old_meta, "v4": "split-mean"}, indent=2) + "\n")
        run_args = [(kind, a.seed, u, n_pairs, a.draws, fp) for u in range(a.subsets)]
        _, done = simulate_all(_point, [], _unit, run_args, a.workers, a.store)
        meta = {"pool": fp, "n_pairs": n_pairs, "seconds": round(time.time() - t0, 1),
                "cpu": lscpu.model_name(), "command": "python " + " ".join(sys.argv),
                "units": len(done), "variant": VARIANT, kind: True}
        if a.deleted:  # V_4's form (intervals.deleted_variance): split-mean from 631a7ee on
            meta["v4"] = "split-mean"
        a.store.with_suffix(".meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(json.dumps(meta, indent=2))
        return
    truth_args = [(a.seed, 10_000 + u, n_pairs, fp) for u in range(a.points)]
    # the partition blocks first: T_s is needed whatever number of subsets finishes
    run_args = ([("block", a.seed, b, n_pairs, a.sample_draws, fp) for b in range(n_pairs // PAIRS)]
                + [("subset", a.seed, u, n_pairs, a.draws, fp) for u in range(a.subsets)])
    _, done = simulate_all(_point, truth_args, _unit, run_args, a.workers, a.store)
    meta = {"pool": fp, "n_pairs": n_pairs, "seconds": round(time.time() - t0, 1),
            "cpu": lscpu.model_name(), "command": "python " + " ".join(sys.argv),
            "units": len(done), "variant": VARIANT}
    a.store.with_suffix(".meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    print(json.dumps(meta, indent=2))


if __name__ == "__main__":
    main()
