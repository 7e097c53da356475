"""Where the pairs' jackknife's excess comes from (plan: bench/results/real_shadow_excess_plan.md,
written before any of these figures): the delete-one and delete-4 jackknives of an arm's
all-sample AUC, and of variants of it that each remove one suspected cause, against the
variance over fresh subsets of a real-shadow pool.

    python bench/real_shadow_excess.py --pool-dir /work/realpool3 --subsets 200 --out bench/results/real_shadow_excess.md

Pool pairs 0..112 are drawn from; 113..120 are the fixed targets of `refs_only`, 121..127
the fixed references of `targets_only` (pair p: models 2p and 2p + 1, complementary).
Variants of one 8-pair subset T (a row: a subset of T):

- base: the pipeline's figure: every model of T the target, scored by LiRA (the headline
  `lira_online_fixed`) against T's other pairs; the pooled ROC's AUC. Checked equal to
  `bnmem.attack.resample.arm_draw`'s auc_all on the first subset.
- per_model: the same scores, the mean of the 16 models' own AUCs (no pooling of scores
  across targets).
- mean_loc: as base with each sample's IN / OUT location the mean, not the median.
- refs_only: fixed targets (8 pairs outside every subset) scored against all of T: the
  figure varies with the references alone.
- targets_only: T's models scored against fixed references (7 pairs outside every
  subset): the figure varies with the targets alone.

Per variant: T_p, the variance of the 8-pair figure over the subsets (x (N - 1) / (N - 8),
the plan's factor for drawing without replacement from N = 113 pairs; the table also says
which readings N / (N - 8), exact for a mean, would change); V_1, the delete-one jackknife
((P - 1) / P sum of squared deviations over 8 rows); V_4, the delete-4 jackknife over all 35
complementary splits (70 rows; mean squared deviation, the split-mean form); their means
over the subsets, over T_p, and (V_1 - V_4) / T_p, with 95 % intervals from resampling the
subsets (T_p and the means together); the size law n Var(S_n) / 8 T_p at n = 7 and 4 from
one row per subset chosen at random.

`--split-roles` (exploratory, run after the plan's outcome was read): unit u = (target
pair, reference pair), 16 pairs per subset; each unit's target scored against the other
units' reference pairs; its own store and table.
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
import bnmem  # noqa: E402,F401  (pins the CPU kernels before numpy loads)
import lscpu  # noqa: E402
import numpy as np  # noqa: E402

from bnmem.attack.lira import Gaussians, PairSignals, fit_gaussians, score_lira  # noqa: E402
from bnmem.attack.resample import arm_draw  # noqa: E402
from bnmem.attack.roc import roc_points, roc_summary  # noqa: E402
from bnmem.attack.signals import load_shadow  # noqa: E402
from bnmem.attack.stage import headline_variant  # noqa: E402
from bnmem.data.pool import load_pool  # noqa: E402

PAIRS = 8
DRAW_FROM = 113          # subsets from pairs 0..112
FIXED_TARGETS = np.arange(113, 121)
FIXED_REFS = np.arange(121, 128)
VARIANTS = ("base", "per_model", "mean_loc", "refs_only", "targets_only")
ARMS = ("none", "batchnorm")
PLAN_FPC = (DRAW_FROM - 1) / (DRAW_FROM - PAIRS)  # the plan's factor, 112 / 105
EXACT_FPC = DRAW_FROM / (DRAW_FROM - PAIRS)  # exact for a mean: Var = (1 - n / N) S^2 / n
SPLITS = [np.array(c) for c in itertools.combinations(range(PAIRS), PAIRS // 2) if 0 in c]  # 35


def load_arm(pool_dir: Path, arm: str, labels: np.ndarray) -> dict:
    sig = load_shadow([pool_dir / arm / "shard_0.npz"], labels, 0)
    phi, keep, ids = sig.phi, sig.keep, sig.model_ids
    assert np.array_equal(ids, np.arange(ids.size)), "model ids 0..m-1 expected"
    assert not (keep[0::2] & keep[1::2]).any() and (keep[0::2] | keep[1::2]).all(), "pairs (2p, 2p+1)"
    a, b = np.swapaxes(phi[0::2], 1, 2), np.swapaxes(phi[1::2], 1, 2)  # [P, Q, N]
    k = keep[0::2][:, None, :]
    return {"phi": phi, "keep": keep,
            "inside": np.where(k, a, b), "outside": np.where(k, b, a)}


def gaussians(d: dict, refs: np.ndarray, location: str) -> Gaussians:
    """The LiRA Gaussians of the reference pairs `refs` (bnmem.attack.lira.fit_gaussians over
    their models); location "mean": each sample's IN / OUT location the references' mean."""
    models = np.concatenate([2 * refs, 2 * refs + 1])
    g = fit_gaussians(d["phi"][models], d["keep"][models])
    if location == "mean":
        g = replace(g, mu_in=d["inside"][refs].mean(0), mu_out=d["outside"][refs].mean(0))
    return g


def score(d: dict, model: int, g: Gaussians) -> np.ndarray:
    """The headline variant's score (online, pooled sd) of one model's samples."""
    return score_lira(d["phi"][model], g, online=True, variance="pooled")


def auc(s: np.ndarray, lab: np.ndarray) -> float:
    """The trapezoid AUC of bnmem.attack.roc (ties count half)."""
    return float(roc_summary(*roc_points(s, lab))["auc"])


def figure(d: dict, pairs: np.ndarray, variant: str) -> float:
    """The variant's figure on the pairs `pairs` (a subset or a row of one)."""
    if variant == "refs_only":
        g = gaussians(d, pairs, "median")
        targets = {p: g for p in FIXED_TARGETS}
    elif variant == "targets_only":
        g = gaussians(d, FIXED_REFS, "median")
        targets = {p: g for p in pairs}
    else:
        loc = "mean" if variant == "mean_loc" else "median"
        targets = {p: gaussians(d, pairs[pairs != p], loc) for p in pairs}
    scores, labels = [], []
    for p, g in targets.items():
        for m in (2 * p, 2 * p + 1):
            scores.append(score(d, m, g))
            labels.append(d["keep"][m])
    if variant == "per_model":
        return float(np.mean([auc(s, l) for s, l in zip(scores, labels)]))
    return auc(np.concatenate(scores), np.concatenate(labels))


def split_roles(d: dict, units: np.ndarray) -> float:
    """Exploratory (after the outcome, not in the plan): unit u = (target pair units[u, 0],
    reference pair units[u, 1]), two different pairs; each unit's target scored against the
    other units' reference pairs (the base's leave-one-out with the two roles played by
    different pairs); the pooled ROC's AUC."""
    scores, labels = [], []
    for u in range(len(units)):
        g = gaussians(d, np.delete(units[:, 1], u), "median")
        for m in (2 * units[u, 0], 2 * units[u, 0] + 1):
            scores.append(score(d, m, g))
            labels.append(d["keep"][m])
    return auc(np.concatenate(scores), np.concatenate(labels))


def split_rows(d: dict, units: np.ndarray) -> dict:
    """subset_rows' rows for split_roles: rows delete units (both their pairs)."""
    j = [split_roles(d, np.delete(units, i, 0)) for i in range(PAIRS)]
    h = []
    for sp in SPLITS:
        h += [split_roles(d, units[sp]), split_roles(d, units[np.setdiff1d(np.arange(PAIRS), sp)])]
    return {"full": split_roles(d, units), "j": j, "h": h}


def subset_rows(d: dict, pairs: np.ndarray, variant: str) -> dict:
    """The figure on the subset, its 8 delete-one rows and its 70 delete-4 rows (both halves of
    all 35 complementary splits)."""
    j = [figure(d, np.delete(pairs, i), variant) for i in range(PAIRS)]
    h = []
    for sp in SPLITS:
        h += [figure(d, pairs[sp], variant),
              figure(d, pairs[np.setdiff1d(np.arange(PAIRS), sp)], variant)]
    return {"full": figure(d, pairs, variant), "j": j, "h": h}


def summary(rows: dict, pick: tuple[int, int]) -> dict:
    """V_1, V_4 (split-mean form over all 35 splits) and the 7- and 4-pair rows `pick` (one
    of each, chosen at random per subset: the size law)."""
    j, h = np.asarray(rows["j"]), np.asarray(rows["h"])
    return {"full": rows["full"], "v1": float((PAIRS - 1) / PAIRS * ((j - j.mean()) ** 2).sum()),
            "v4": float(((h - h.mean()) ** 2).mean()), "row7": float(j[pick[0]]),
            "row4": float(h[pick[1]])}


def picks(seed: int, n: int) -> list[tuple[int, int]]:
    """Per subset, which delete-one row and which delete-4 row the size law reads."""
    return [tuple(int(x) for x in np.random.default_rng([seed, 0x512E, u]).integers([PAIRS, 70]))
            for u in range(n)]


def difference(a: dict, b: dict) -> dict:
    return {"full": a["full"] - b["full"], "j": list(np.subtract(a["j"], b["j"])),
            "h": list(np.subtract(a["h"], b["h"]))}


def check_base(d: dict, pairs: np.ndarray, variant_name: str) -> None:
    """The base figure equals the pipeline's auc_all (arm_draw) on these pairs."""
    rows = np.sort(np.concatenate([2 * pairs, 2 * pairs + 1]))
    ps = PairSignals.build(d["phi"][rows], d["keep"][rows], rows)
    sub = {"phi": d["phi"][rows], "keep": d["keep"][rows], "correct": np.zeros_like(d["keep"][rows]),
           "epoch_phi": None, "epoch_correct": None}
    kind = np.zeros(d["keep"].shape[1], np.int64)
    ref = arm_draw(sub, ps, [], np.ones(PAIRS, np.int64), np.ones(kind.size), kind,
                   variant_name, True, None, "lean")["auc_all"]
    mine = figure(d, pairs, "base")
    if not abs(ref - mine) < 1e-9:
        raise SystemExit(f"base figure {mine!r} differs from arm_draw's auc_all {ref!r}")


def ratios(recs: list[dict], fpc: float, n_pool: int, rng: np.random.Generator,
           boot: int = 2000) -> dict:
    """Ratios over T_p = the 8-pair figure's variance over subsets x fpc (the plan's (N - 1)
    / (N - 8), or N / (N - 8), exact for a mean drawn without replacement from N); the size
    law's n-pair variances x N / (N - n). Intervals: the subsets resampled (T_p and the
    means together)."""
    full = np.array([r["full"] for r in recs])
    v1, v4 = np.array([r["v1"] for r in recs]), np.array([r["v4"] for r in recs])
    r7, r4 = np.array([r["row7"] for r in recs]), np.array([r["row4"] for r in recs])

    def stat(ix):  # ix [resamples, subsets]: one row per resample
        tp = full[ix].var(ddof=1, axis=-1) * fpc
        m1, m4 = v1[ix].mean(axis=-1), v4[ix].mean(axis=-1)
        return np.stack([m1 / tp, m4 / tp, (m1 - m4) / tp,
                         r7[ix].var(ddof=1, axis=-1) * n_pool / (n_pool - 7) * 7 / (8 * tp),
                         r4[ix].var(ddof=1, axis=-1) * n_pool / (n_pool - 4) * 4 / (8 * tp)], axis=-1)

    point = stat(np.arange(len(recs))[None])[0]
    # the resamples drawn one at a time, as before (the same stream), computed at once
    bs = stat(np.array([rng.integers(0, len(recs), len(recs)) for _ in range(boot)]))
    lo, hi = np.percentile(bs, [2.5, 97.5], axis=0)
    names = ("v1_tp", "v4_tp", "v1_v4_tp", "n7_tp7", "n4_tp4")
    tp = float(full.var(ddof=1) * fpc)
    return {"t_p": tp, "mean": float(full.mean()), "excess": float(v1.mean() - tp),
            **{n: [float(point[i]), float(lo[i]), float(hi[i])] for i, n in enumerate(names)}}


def table(recs: list[dict], variants: tuple[str, ...], fpc: float, n_pool: int, seed: int) -> dict:
    """{arm or "BN - none": {variant: ratios}}."""
    pk = picks(seed, len(recs))
    out = {}
    for arm in (*ARMS, "BN - none"):
        out[arm] = {}
        for v in variants:
            rs = [summary(difference(r["batchnorm"][v], r["none"][v]) if arm == "BN - none"
                          else r[arm][v], pk[u]) for u, r in enumerate(recs)]
            out[arm][v] = ratios(rs, fpc, n_pool, np.random.default_rng(7))
    return out


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pool-dir", type=Path, required=True)
    ap.add_argument("--subsets", type=int, default=200)
    ap.add_argument("--seed", type=int, default=41)
    ap.add_argument("--store", type=Path, default=ROOT / "results" / "real_shadow_excess.jsonl")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--split-roles", action="store_true",
                    help="exploratory (after the outcome): the split_roles variant alone, 16 "
                         "pairs per subset (8 targets, 8 references), its own store")
    return ap


def read_store(store: Path) -> dict:
    return {json.loads(x)["unit"]: json.loads(x) for x in
            (store.read_text().splitlines() if store.is_file() else [])}


def compute(a, subsets: list, store: Path, unit_rows) -> tuple[list[dict], bool]:
    """(the store's records of every subset, whether any was computed): the missing ones
    computed from the pool (which is read only then) and appended."""
    done = read_store(store)
    missing = any(u not in done for u in range(len(subsets)))
    if missing:
        labels = load_pool(str(a.pool_dir / "pool.npz"))["y_train"]
        data = {arm: load_arm(a.pool_dir, arm, labels) for arm in ARMS}
        if not a.split_roles:
            for arm in ARMS:
                check_base(data[arm], subsets[0], headline_variant(2 * PAIRS))
        with store.open("a") as f:
            for u, pairs in enumerate(subsets):
                if u not in done:
                    done[u] = {"unit": u, **{arm: unit_rows(data[arm], pairs) for arm in ARMS}}
                    f.write(json.dumps(done[u]) + "\n")
                    f.flush()
    return [done[u] for u in range(len(subsets))], missing


def build(a) -> str:
    """The study's markdown (its units computed where the store lacks them)."""
    t0 = time.time()
    if a.split_roles:
        rng = np.random.default_rng([a.seed, 2])
        subsets = [rng.choice(DRAW_FROM, 2 * PAIRS, replace=False).reshape(2, PAIRS).T
                   for _ in range(a.subsets)]
        store = a.store.with_name(a.store.stem + "_split_roles.jsonl")
        recs, new = compute(a, subsets, store, lambda d, units: {"split_roles": split_rows(d, units)})
        # each role's 8 pairs are drawn from the 113: the exact finite-pool factor for 8 of 113
        out = {"arms": table(recs, ("split_roles",), EXACT_FPC, DRAW_FROM, a.seed)}
        out.update(timing(store, t0, new))
        return markdown(out, a).replace("# Where the pairs'", "# (exploratory) Where the pairs'") + (
            "\nEach unit is two pool pairs, one the target, the other a reference for every "
            "other unit's target (the base's leave-one-out with the two roles played by "
            "different pairs); 16 pairs per subset.\n")
    rng = np.random.default_rng(a.seed)
    subsets = [np.sort(rng.choice(DRAW_FROM, PAIRS, replace=False)) for _ in range(a.subsets)]
    recs, new = compute(a, subsets, a.store,
                   lambda d, pairs: {v: subset_rows(d, pairs, v) for v in VARIANTS})
    out = {"arms": table(recs, VARIANTS, PLAN_FPC, DRAW_FROM, a.seed),
           "exact": table(recs, VARIANTS, EXACT_FPC, DRAW_FROM, a.seed)}
    out.update(timing(a.store, t0, new))
    return markdown(out, a) + "\n" + "\n".join(outcome(out)) + "\n"


def main() -> None:
    a = parser().parse_args()
    text = build(a)
    if a.out:
        a.out.write_text(text)
    print(text)


def timing(store: Path, t0: float, computed: bool) -> dict:
    """The computing run's seconds and machine: written to the store's meta by the run that
    computed units, read back by one that only reads the store."""
    meta = store.with_suffix(".meta.json")
    if computed:
        meta.write_text(json.dumps({"seconds": time.time() - t0, "machine": lscpu.describe()}))
    return json.loads(meta.read_text())


def reading(r: dict) -> str:
    """The plan's criterion on V_1 / T_p's 95 % interval: shows the excess (wholly above 1.3),
    free of it (upper end below 1.3) or neither."""
    _, lo, hi = r["v1_tp"]
    return "shows the excess" if lo > 1.3 else "free of it" if hi < 1.3 else "neither"


def outcome(out: dict) -> list[str]:
    """The plan's readings on BN - none."""
    v = {k: reading(r) for k, r in out["arms"]["BN - none"].items()}
    lines = ["## Outcome (the plan's criteria, on BN - none)", ""]
    lines += [f"- {k}: {w}" for k, w in v.items()]
    if v["base"] != "shows the excess":
        return lines + ["", "- base does not show the excess on this figure: nothing else is read."]
    said = []
    if v["per_model"] == "free of it":
        said.append("H-pool supported (per_model free, base shows it)")
    if v["mean_loc"] == "free of it":
        said.append("H-med supported (mean_loc free, base shows it)")
    if v["refs_only"] == "shows the excess" and v["targets_only"] == "free of it":
        said.append("H-ref supported (refs_only shows it, targets_only free)")
    if v["targets_only"] == "shows the excess" and v["refs_only"] == "free of it":
        said.append("the targets and the pooled ROC (targets_only shows it, refs_only free)")
    return lines + [""] + ([f"- **{x}**" for x in said] or
                           ["- **no candidate cause is supported**: the pattern is reported as "
                            "it is, with no cause claimed"])


def markdown(out: dict, a) -> str:
    split = a.split_roles
    L = ["# Where the pairs' jackknife's excess comes from", "",
         (f"Plan: [real_shadow_excess_plan.md](real_shadow_excess_plan.md) (written before any "
          "figure)" if not split else
          "Exploratory, not in the plan [real_shadow_excess_plan.md](real_shadow_excess_plan.md): "
          "run after its outcome was read") +
         f". `python bench/real_shadow_excess.py --pool-dir {a.pool_dir} --subsets "
         f"{a.subsets} --seed {a.seed}{' --split-roles' if split else ''}`: "
         f"{out['seconds']:.0f} s on {out['machine']}.", "",
         "Each cell: ratio [95 % interval, resampling the subsets]. T_p: the 8-pair figure's "
         "variance over the subsets x " + ("the plan's 112 / 105" if not split else
                                           "113 / 105 (each role's 8 pairs drawn from 113)") +
         ". V_1 / T_p: the delete-one jackknife over it; V_4 / T_p: the delete-4 jackknife (all "
         "35 splits); (V_1 - V_4) / T_p paired per subset; V_1 - T_p: the excess in absolute "
         "terms; n Var(S_n) / 8 T_p at n = 7 and 4 (one row per subset, chosen at random; "
         "variances x 113 / (113 - n)): the variance-vs-size law (1 if the figure's variance "
         "falls as 1 / n). Reading: the plan's criterion on V_1 / T_p's interval (shows the "
         "excess: above 1.3; free of it: below 1.3).", "",
         "| arm | variant | mean figure | T_p | V_1 / T_p | V_4 / T_p | (V_1 - V_4) / T_p | "
         "V_1 - T_p | 7 Var(S_7) / 8 T_p | 4 Var(S_4) / 8 T_p | reading |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for arm, vs in out["arms"].items():
        for v, r in vs.items():
            cells = [f"{r[k][0]:.2f} [{r[k][1]:.2f}, {r[k][2]:.2f}]"
                     for k in ("v1_tp", "v4_tp", "v1_v4_tp")]
            cells.append(f"{r['excess']:.2e}")
            cells += [f"{r[k][0]:.2f} [{r[k][1]:.2f}, {r[k][2]:.2f}]" for k in ("n7_tp7", "n4_tp4")]
            L.append(f"| {arm} | {v} | {r['mean']:.4f} | {r['t_p']:.2e} | " + " | ".join(cells)
                     + f" | {reading(r)} |")
    if "exact" in out:
        changed = [f"{arm} {v} ({reading(r)} -> {reading(out['exact'][arm][v])}, lower end "
                   f"{r['v1_tp'][1]:.3f} -> {out['exact'][arm][v]['v1_tp'][1]:.3f})"
                   for arm, vs in out["arms"].items() for v, r in vs.items()
                   if reading(r) != reading(out["exact"][arm][v])]
        L += ["", "With the exact finite-pool factor, 113 / 105 instead of the plan's 112 / 105, "
              "every ratio is 0.9 % lower; readings that change: "
              + ("; ".join(changed) if changed else "none") + "."]
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    main()
