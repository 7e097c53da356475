"""The analysis of bench/results/real_shadows_fullread_plan.md (fixed before any pool-G
figure): does jacksum, the rule in use for memorization, cover the common point's
memorization keys when the truth is the read on all of a pool's pairs (theta_full) rather
than the mean of the 8-pair reads (mu)? Pool G (data seed 7) is the fresh pool; pools A-F
were read before the plan.

    # needs every pool's logits (/work/realpool<seed>): pool G's full read and, on every
    # pool, 10 random splits into two 64-pair halves; writes results/real_shadows_fullread.json
    python bench/real_shadow_fullread.py compute
    # then, on every pool, the full read under 200 stratified reweightings of its samples
    python bench/real_shadow_fullread.py boot
    # the plan's table and decision from the committed stores and that file
    python bench/real_shadow_fullread.py table --out bench/results/real_shadows_fullread.md
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import lscpu  # noqa: E402
import real_shadow_coverage as C  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_anova as RA  # noqa: E402
import real_shadow_pareto as P  # noqa: E402
import real_shadow_rules as R  # noqa: E402

from bnmem.attack.frontier import CRITERIA, draw_compare  # noqa: E402
from bnmem.attack.roc import bootstrap_weights  # noqa: E402
from bnmem.attack.stage import comparison_pairs  # noqa: E402

FRESH = P.CONFIRM  # ("G", 7, 200)
POOLS = P.SELECT + (FRESH,)  # A-F (read before the plan), then G
OUT = ROOT / "results" / "real_shadows_fullread.json"
BOOT = 200  # stratified reweightings of a pool's samples (amendment 1)
SPLITS = 10  # random splits of a pool's pairs into two halves, 20 half reads a pool
KEYS = ("batchnorm_reg_minus_batchnorm/fz_flipped_matched", "batchnorm_reg_minus_batchnorm/fz_flipped_fit")
FRESH_FLOOR, POOLED_FLOOR = 0.90, 0.93  # gate 1 (pool G alone), gate 2 (seven pools, equal weight)


def _meta_pool(seed: int) -> str:
    return json.loads((ROOT / "results" / f"real_shadows_seed{seed}.meta.json").read_text())["pool"]


def half_reads(label: str, seed: int) -> dict:
    """{key: the 64-pair reads of SPLITS random splits of the pool's pairs, both halves each}."""
    n_pairs = P.load_logits(label, seed)[0]
    out: dict = {}
    for s in range(SPLITS):
        perm = np.random.default_rng([seed, 0x64, s]).permutation(n_pairs)
        for half in (perm[: n_pairs // 2], perm[n_pairs // 2:]):
            for k, v in P.pool_reads(np.sort(half))[0].items():
                out.setdefault(k, []).append(v)
    return out


def weighted_reads(cells: dict, w: np.ndarray) -> dict:
    """{key: [the read on the cells' pairs under each row of sample weights w [B, N]]}: each
    endpoint's mean over pairs and the mask's samples, weighted, then draw_compare as for the
    pool's read (with w all ones, P.pool_reads' reads)."""
    means = {}  # (arm, read) -> [B, E, 2]: (util, figure) per endpoint
    for arm, ends in cells.items():
        for read, (crit, fig) in P.READS.items():
            util = CRITERIA[crit][0]
            per_end = []
            for e in ends:
                col = []
                for name in (util, fig):
                    c, m = e[name]
                    colsum = c[:, m].sum(axis=0)  # per sample, over pairs
                    col.append(w[:, m] @ colsum / (c.shape[0] * w[:, m].sum(axis=1)))
                per_end.append(np.stack(col, axis=1))
            means[(arm, read)] = np.stack(per_end, axis=1)
    out: dict = {}
    for a, b in comparison_pairs(C.ARMS):
        for read, (crit, fig) in P.READS.items():
            util = CRITERIA[crit][0]
            out[f"{a}_minus_{b}/{read}"] = [
                float(draw_compare(P._ends(means[(a, read)][i], util, fig),
                                   P._ends(means[(b, read)][i], util, fig), crit, (fig,))[fig])
                for i in range(w.shape[0])]
    return out


def boot_reads(label: str, seed: int) -> dict:
    """{key: the read on all the pool's pairs under each of BOOT stratified reweightings of
    its samples} (amendment 1)."""
    n_pairs = P.load_logits(label, seed)[0]
    w = bootstrap_weights(C._DATA["kind"], BOOT, np.random.default_rng([seed, 0xB0, 0x07]))
    return weighted_reads(RA._cells(np.arange(n_pairs)), w)


def boot_main(a: argparse.Namespace) -> None:
    t0 = time.time()
    data = json.loads(OUT.read_text())
    data["boot"] = {lb: boot_reads(lb, s) for lb, s, _ in POOLS}
    data["meta"]["boot_seconds"] = round(time.time() - t0, 1)
    data["meta"]["boot_command"] = "python " + " ".join(sys.argv)
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(data["meta"], indent=2))


def compute_main(a: argparse.Namespace) -> None:
    t0 = time.time()
    g = P.full_pool(*FRESH)
    halves = {lb: half_reads(lb, s) for lb, s, _ in POOLS}
    meta = {"seconds": round(time.time() - t0, 1), "cpu": lscpu.model_name(),
            "command": "python " + " ".join(sys.argv)}
    OUT.write_text(json.dumps({"meta": meta, FRESH[0]: g, "halves": halves}, indent=1) + "\n")
    print(json.dumps(meta, indent=2))


def figures(pools: list[dict], full: dict) -> dict:
    """Per key and pool: jacksum's coverage of theta_full and of mu, and (mu - theta_full) /
    sqrt(T_p)."""
    out = {}
    for k in P.keys_of():
        row = {"theta": [], "mu": [], "bias": [], "half_bias": [], "boot_bias": [], "corrected": [],
               "skew": [], "run_skew": [], "boot_skew": []}
        for d in pools:
            comp = R.truth_parts(d, k)
            theta = full[d["label"]]["reads"][k]
            shift = comp["mu"] - theta
            row["theta"].append(float(np.nanmean(P.cover(d, k, "JS", comp, shift))))
            row["mu"].append(float(np.nanmean(P.cover(d, k, "JS", comp, 0.0))))
            row["bias"].append(shift / np.sqrt(comp["t_p"]))
            hr = np.array(full["halves"][d["label"]][k], float)
            row["half_bias"].append(float((np.mean(hr) - theta) / np.sqrt(comp["t_p"])))
            b_s = float(np.mean(full["boot"][d["label"]][k])) - theta  # amendment 1
            row["boot_bias"].append(b_s / np.sqrt(comp["t_p"]))
            row["corrected"].append(float(np.nanmean(P.cover(d, k, "JS", comp, shift + b_s))))
            # after the review: the skewness of the 8-pair reads, all the truth's and the
            # judged runs' (the coverage subsets)
            pts, run = d["points"][k], d["hcov"][k][:, 0]
            row["skew"].append(float(stats.skew(pts[np.isfinite(pts)])))
            row["run_skew"].append(float(stats.skew(run[np.isfinite(run)])))
            row["boot_skew"].append(float(stats.skew(full["boot"][d["label"]][k])))
        out[k] = row
    return out


def decision(f: dict) -> dict:
    """The plan's gates per key (K1, K2) against theta_full."""
    res = {}
    for k in KEYS:
        g1, g2 = f[k]["theta"][-1], float(np.mean(f[k]["theta"]))
        res[k] = {"fresh": g1, "pooled": g2, "gate1": g1 >= FRESH_FLOOR, "gate2": g2 >= POOLED_FLOOR}
        res[k]["passes"] = res[k]["gate1"] and res[k]["gate2"]
    return res


HEAD = ("## Against the read on all of a pool's pairs: pool G (plan: real_shadows_fullread_plan.md)",
        "`python bench/real_shadow_fullread.py table` from the committed stores and "
        "results/real_shadows_fullread.json (`compute`: pool G's read on its 128 pairs, and on "
        f"every pool {SPLITS} random splits into two 64-pair halves). ")


def table(pools: list[dict], full: dict, head: tuple[str, str] = HEAD, many: str = "seven",
          outcome: tuple[str, str] = ("caveat dropped", "caveat stays")) -> tuple[list[str], dict]:
    """The plan's table; the fresh pool is the last of `pools` (`many`: how many, in words;
    `head`: the title and the opening of the first paragraph; `outcome`: the words for K1 /
    K2 passing or not)."""
    f = figures(pools, full)
    dec = decision(f)
    labels = [d["label"] for d in pools]
    fresh, Many = labels[-1], many.capitalize()
    L = [head[0], "",
         head[1] + "Rule: jacksum (in use). "
         "theta_full: the read on all of the pool's pairs at its samples; mu: the mean of the "
         f"8-pair reads (every earlier plan's truth). {Many} pools: " + ", ".join(labels)
         + f", weighted equally per key; pool {fresh} is the fresh one.", "",
         "### Decision (K1, K2)", "",
         f"| key | pool {fresh}: covers theta_full (gate 1, ≥ {FRESH_FLOOR:.2f}) | {many} pools: "
         f"covers theta_full (gate 2, ≥ {POOLED_FLOOR:.2f}) | pool {fresh} / {many} pools: covers mu | outcome |",
         "|---|---|---|---|---|"]
    for k in KEYS:
        r = dec[k]
        L.append(f"| `{k}` | {r['fresh']:.3f} ({'passes' if r['gate1'] else 'fails'}) | "
                 f"{r['pooled']:.3f} ({'passes' if r['gate2'] else 'fails'}) | "
                 f"{f[k]['mu'][-1]:.3f} / {np.mean(f[k]['mu']):.3f} | "
                 f"{outcome[0] if r['passes'] else outcome[1]} |")
    L += ["", "### Every memorization key at the common point (reported, deciding nothing)", "",
          f"| key | (mu − theta_full) / sqrt(T_p), pool {fresh} | pool {fresh}: covers theta_full / mu | "
          f"{many} pools: covers theta_full / mu | (mean 64-pair read − theta_full) / sqrt(T_p), per pool "
          + ", ".join(labels) + " | b_s / sqrt(T_p), per pool " + ", ".join(labels) + " |",
          "|---|---|---|---|---|---|"]
    for k in P.keys_of():
        r = f[k]
        L.append(f"| `{k}` | {r['bias'][-1]:+.2f} | {r['theta'][-1]:.3f} / {r['mu'][-1]:.3f} | "
                 f"{np.mean(r['theta']):.3f} / {np.mean(r['mu']):.3f} | "
                 + ", ".join(f"{x:+.2f}" for x in r["half_bias"]) + " | "
                 + ", ".join(f"{x:+.2f}" for x in r["boot_bias"]) + " |")
    cls = {c: [np.mean(f[k][c]) for k in P.keys_of()] for c in ("theta", "mu")}
    clsg = {c: [f[k][c][-1] for k in P.keys_of()] for c in ("theta", "mu")}
    L += ["", f"b_s: the samples' bootstrap estimate of the full read's bias ({BOOT} stratified "
          "reweightings of the pool's samples, all its pairs; amendment 1). Against the "
          "bias-corrected target theta_full − b_s, jacksum covers " + "; ".join(
              f"`{k}` {f[k]['corrected'][-1]:.3f} on pool {fresh}, {np.mean(f[k]['corrected']):.3f} "
              f"over {many} (per pool " + ", ".join(f"{x:.3f}" for x in f[k]["corrected"]) + ")"
              for k in KEYS) + "."]
    L += ["", "### After the review (exploratory, deciding nothing)", "",
          "Skewness of the 8-pair reads (all the reads mu and T_p come from, "
          f"{pools[-1]['points'][KEYS[0]].size} on pool {fresh}; and the judged runs', the "
          f"{pools[-1]['hcov'][KEYS[0]].shape[0]} coverage subsets) and of the full read under the "
          "samples' reweightings, per pool " + ", ".join(labels) + ":", "",
          "| key | 8-pair reads, all | 8-pair reads, the judged runs | full read, samples reweighted |",
          "|---|---|---|---|"]
    for k in KEYS:
        L.append(f"| `{k}` | " + " | ".join(", ".join(f"{x:+.2f}" for x in f[k][c])
                                           for c in ("skew", "run_skew", "boot_skew")) + " |")
    vj = full[fresh]["vj"]
    L += ["", f"Class (12 keys): pool {fresh} covers theta_full {np.mean(clsg['theta']):.3f} "
          f"(lowest key {min(clsg['theta']):.3f}) / mu {np.mean(clsg['mu']):.3f} (lowest "
          f"{min(clsg['mu']):.3f}); {many} pools theta_full {np.mean(cls['theta']):.3f} (lowest "
          f"{min(cls['theta']):.3f}) / mu {np.mean(cls['mu']):.3f} (lowest {min(cls['mu']):.3f}).", "",
          f"Pool {fresh}'s V_j check (as for pools {labels[0]}–{labels[-2]}, `real_shadow_pareto.full_pool`): "
          f"{vj['no_source_change']} records without a source change, V_j equal to the store's in "
          f"{vj['equal_there']}; {vj['source_change']} with one, V_j differs in {vj['differs_there']}."]
    return L, {"figures": f, "decision": dec}


def load_all() -> tuple[list[dict], dict]:
    pools = [P.load(lb, s, n) for lb, s, n in POOLS]
    six = json.loads(P.FULL.read_text())
    here = json.loads(OUT.read_text())
    full = {lb: six[lb] for lb, _, _ in P.SELECT}
    full[FRESH[0]] = here[FRESH[0]]
    full["halves"], full["boot"] = here["halves"], here["boot"]
    for lb, seed, _ in POOLS:
        if full[lb]["pool"] != _meta_pool(seed):
            raise SystemExit(f"pool {lb}'s full read comes from another pool")
    return pools, full


def table_main(a: argparse.Namespace) -> None:
    H.write("\n".join(table(*load_all())[0]), a.out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("compute", help="pool G's full read and every pool's 64-pair half reads (needs the logits)")
    sub.add_parser("boot", help="after compute: every pool's full read under sample reweightings (needs the logits)")
    t = sub.add_parser("table", help="the plan's table and decision")
    t.add_argument("--out", type=Path)
    a = ap.parse_args()
    {"compute": compute_main, "boot": boot_main, "table": table_main}[a.cmd](a)


if __name__ == "__main__":
    main()
