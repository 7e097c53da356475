"""The analysis of bench/results/real_shadows_ninth_plan.md (fixed before any of pool I's
figures): a ninth, fresh pool (I, data seed 9) tests `jacksum_s`, jacksum's variance V_j + V_S
with a Satterthwaite t quantile, nu = (V_j + V_S)^2 / (V_j^2 / (P - 1) + V_S^2 / (B - 1)),
for memorization at the common point, against theta_full (the read on all of a pool's pairs).

    # needs pool I's logits (/work/realpool9): its full read and V_j check
    python bench/real_shadow_ninth.py compute
    python bench/real_shadow_ninth.py table --out bench/results/real_shadows_ninth.md
    # the same over pools A-H, H the last (the check made before pool I)
    python bench/real_shadow_ninth.py table --as-of H
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
import real_shadow_eighth as E  # noqa: E402
import real_shadow_fullread as F  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_pareto as P  # noqa: E402
import real_shadow_rules as R  # noqa: E402

FRESH = ("I", 9, 200)
OUT = ROOT / "results" / "real_shadows_ninth.json"
DRAWS = 100  # the pipeline's samples' bootstrap draws: V_S's df B - 1 in nu
K1, K2 = F.KEYS
KEY_FLOOR_FRESH = {K2: 0.91, K1: 0.90}  # gate 1, pool I alone
POOLED_KEY_FLOOR, CLASS_CEILING = 0.93, 0.99  # gate 2, the nine pools per key
MANY = {8: "eight", 9: "nine"}


def nu(v_j: np.ndarray, v_s: np.ndarray, pairs: int = R.PAIRS, draws: int = DRAWS) -> np.ndarray:
    """Satterthwaite's degrees of freedom of V_j + V_S: V_j on P - 1, V_S on B - 1."""
    v_j, v_s = np.asarray(v_j, float), np.asarray(v_s, float)
    return (v_j + v_s) ** 2 / (v_j ** 2 / (pairs - 1) + v_s ** 2 / (draws - 1))


def widen(d: dict, key: str) -> np.ndarray:
    """Per subset, t_nu(0.975) / 1.96: jacksum_s's half-width over jacksum's."""
    return stats.t.ppf(0.975, nu(d["hcov"][key][:, 2], d["an"][key][:, 2])) / H.Z


def load(fresh: str) -> tuple[list[dict], dict]:
    """Pools A-H (with H's full read, the eighth's) and, for fresh "I", pool I with its own."""
    pools, full = E.with_h()
    if fresh == "I":
        full["I"] = json.loads(OUT.read_text())["I"]
        if full["I"]["pool"] != F._meta_pool(FRESH[1]):
            raise SystemExit("pool I's full read comes from another pool")
        pools.append(P.load(*FRESH))
    return pools, full


def figures(pools: list[dict], full: dict) -> dict:
    """Per key, per pool: jacksum's and jacksum_s's coverage of theta_full, jacksum_s's mean
    width over jacksum's and its median nu."""
    out = {}
    for k in P.keys_of():
        row = {"JS": [], "JSs": [], "ratio": [], "nu": [], "vj_df": []}
        for d in pools:
            comp = R.truth_parts(d, k)
            shift = comp["mu"] - full[d["label"]]["reads"][k]
            w = widen(d, k)
            row["JS"].append(float(np.nanmean(P.cover(d, k, "JS", comp, shift))))
            row["JSs"].append(float(np.nanmean(P.cover(d, k, "JS", comp, shift, w))))
            row["ratio"].append(float(np.nanmean(w)))
            row["nu"].append(float(np.nanmedian(nu(d["hcov"][k][:, 2], d["an"][k][:, 2]))))
            vj = d["hcov"][k][:, 2]
            vj = vj[np.isfinite(vj)]
            row["vj_df"].append(float(2 * vj.mean() ** 2 / vj.var(ddof=1)))  # after the review
        out[k] = row
    return out


def decision(f: dict) -> dict:
    """The plan's gates (the fresh pool is the last)."""
    g1 = {k: f[k]["JSs"][-1] >= floor for k, floor in KEY_FLOOR_FRESH.items()}
    pooled = {k: float(np.mean(r["JSs"])) for k, r in f.items()}
    cls = float(np.mean(list(pooled.values())))
    ok1 = all(g1.values())
    ok2 = min(pooled.values()) >= POOLED_KEY_FLOOR and cls <= CLASS_CEILING
    return {"gate1": ok1, "gate1_keys": g1, "gate2": ok2, "lowest": min(pooled.values()),
            "class": cls, "adopted": ok1 and ok2}


def table(pools: list[dict], full: dict) -> tuple[list[str], dict]:
    f = figures(pools, full)
    dec = decision(f)
    labels = [d["label"] for d in pools]
    fresh, many = labels[-1], MANY[len(pools)]
    mean = lambda k, c: float(np.mean(f[k][c]))  # noqa: E731
    L = [f"# Real shadows: jacksum_s for memorization at the common point, pool {fresh} fresh "
         "(plan: real_shadows_ninth_plan.md)", "",
         "`python bench/real_shadow_ninth.py table` from the committed stores, "
         "results/real_shadows_fullread.json, real_shadows_eighth.json and real_shadows_ninth.json. "
         "jacksum: V_j + V_S, ± 1.96 sd; jacksum_s: the same variance, ± t_nu sd, nu = (V_j + V_S)² / "
         f"(V_j² / 7 + V_S² / {DRAWS - 1}). Truth: theta_full, the read on all of a pool's pairs. "
         f"{many.capitalize()} pools: " + ", ".join(labels) + f", weighted equally per key; pool {fresh} "
         "is the fresh one.", "",
         f"| key | pool {fresh}: jacksum / jacksum_s | {many} pools: jacksum / jacksum_s (lowest pool) | "
         f"width jacksum_s / jacksum, pool {fresh} / {many} | median nu, pool {fresh} |",
         "|---|---|---|---|---|"]
    for k, r in f.items():
        L.append(f"| `{k}` | {r['JS'][-1]:.3f} / {r['JSs'][-1]:.3f} | {mean(k, 'JS'):.3f} / "
                 f"{mean(k, 'JSs'):.3f} ({min(r['JSs']):.3f}) | {r['ratio'][-1]:.3f} / {mean(k, 'ratio'):.3f} | "
                 f"{r['nu'][-1]:.1f} |")
    cj = float(np.mean([mean(k, "JS") for k in f]))
    L += ["", f"Class (12 keys), {many} pools: jacksum {cj:.3f} (lowest key "
          f"{min(mean(k, 'JS') for k in f):.3f}), jacksum_s {dec['class']:.3f} (lowest key "
          f"{dec['lowest']:.3f}); on pool {fresh}: jacksum {np.mean([r['JS'][-1] for r in f.values()]):.3f}, "
          f"jacksum_s {np.mean([r['JSs'][-1] for r in f.values()]):.3f}. Mean width jacksum_s / "
          f"jacksum over the keys, pool {fresh}: {np.mean([r['ratio'][-1] for r in f.values()]):.3f} "
          f"(range {min(r['ratio'][-1] for r in f.values()):.3f}-{max(r['ratio'][-1] for r in f.values()):.3f}).",
          "", "## Decision", "",
          f"- Gate 1 (pool {fresh} alone; K2 ≥ {KEY_FLOOR_FRESH[K2]}, K1 ≥ {KEY_FLOOR_FRESH[K1]}): "
          + ("passes" if dec["gate1"] else "fails") + f" (K2 {f[K2]['JSs'][-1]:.3f}, K1 {f[K1]['JSs'][-1]:.3f})",
          f"- Gate 2 ({many} pools per key; every key ≥ {POOLED_KEY_FLOOR}, class ≤ {CLASS_CEILING}): "
          + ("passes" if dec["gate2"] else "fails") + f" (lowest key {dec['lowest']:.3f}, class {dec['class']:.3f})",
          "- **" + ("jacksum_s adopted for memorization at the common point" if dec["adopted"]
                    else "jacksum stays") + "**"]
    if fresh != "I":
        L += ["", "(As of H: the check made before pool I; deciding nothing.)"]
    else:  # after a hostile review of the outcome (reported, deciding nothing)
        L += ["", "## After the review (reported, deciding nothing)", "",
              "Satterthwaite's nu takes V_j as chi-squared on 7 df. V_j's effective df over a pool's "
              "200 subsets (2 mean² / variance), mean over the nine pools (range): "
              + "; ".join(f"`{k}` {np.mean(f[k]['vj_df']):.1f} ({min(f[k]['vj_df']):.1f}-"
                          f"{max(f[k]['vj_df']):.1f})" for k in (K2, K1))
              + f"; the other ten keys {min(np.mean(r['vj_df']) for k, r in f.items() if k not in (K1, K2)):.1f}-"
              f"{max(np.mean(r['vj_df']) for k, r in f.items() if k not in (K1, K2)):.1f}. Single "
              f"intervals' width over jacksum's: {min(np.nanmin(widen(d, k)) for d in pools for k in f):.3f}-"
              f"{max(np.nanmax(widen(d, k)) for d in pools for k in f):.3f}."]
    L += ["", vj_check_line(full, fresh)]
    return L, {"figures": f, "decision": dec}


def vj_check_line(full: dict, label: str) -> str:
    """A fresh pool's V_j check (`real_shadow_pareto.full_pool`), in one line."""
    vj = full[label]["vj"]
    return (f"Pool {label}'s V_j check (`real_shadow_pareto.full_pool`): {vj['no_source_change']} "
            f"records without a source change, V_j equal to the store's in {vj['equal_there']}; "
            f"{vj['source_change']} with one, V_j differs in {vj['differs_there']}.")


def table_main(a: argparse.Namespace) -> None:
    pools, full = load(a.as_of)
    H.write("\n".join(table(pools, full)[0]), a.out)


def write_full_read(fresh: tuple, out: Path) -> None:
    """A fresh pool's full read and V_j check (`real_shadow_pareto.full_pool`, from its
    logits) to `out`, with the time, machine and command."""
    t0, started = time.time(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    g = P.full_pool(*fresh)
    meta = {"started": started, "seconds": round(time.time() - t0, 1), "cpu": lscpu.model_name(),
            "command": "python " + " ".join(sys.argv)}
    out.write_text(json.dumps({"meta": meta, fresh[0]: g}, indent=1) + "\n")
    print(json.dumps(meta, indent=2))


def compute_main(a: argparse.Namespace) -> None:
    write_full_read(FRESH, OUT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("compute", help="pool I's full read and V_j check (needs the logits)")
    t = sub.add_parser("table", help="the plan's table and decision")
    t.add_argument("--out", type=Path)
    t.add_argument("--as-of", choices=("H", "I"), default="I",
                   help="H: pools A-H with H last (the check made before pool I)")
    a = ap.parse_args()
    {"compute": compute_main, "table": table_main}[a.cmd](a)


if __name__ == "__main__":
    main()
