"""The analysis of bench/results/real_shadows_tenth_plan.md (fixed before any of pool J's
figures and before any of pool I's AUC figures): a tenth, fresh pool (J, data seed 10)
re-checks every real-shadow rule in use, no rule proposed.

- The AUC classes A, B and E under D4 (`delete4_halves`), the eighth plan's gates
  (split_upper=False): pools I and J, each alone, with the fresh-pool key floors (pool I's
  AUC stores are as fresh as J's: the pre-read review's amendment 2), the ten pools A-J per
  key with the pooled floors. A class that fails on the lower side reverts (A and E to
  jacksum, B to `both`); a failure on the upper side alone keeps D4 and is named.
- Memorization at the common point under `jacksum_s` against theta_full, the ninth plan's
  gates: pool J alone (K2 >= 0.91, K1 >= 0.90), ten pools (every key >= 0.93, class <=
  0.99). A failure changes the report's caveat, not the rule.
- Reported, deciding nothing: the headline key's D4 variance over the truth and its
  effective df; D4 with a Satterthwaite quantile (V_4 on 7 df); memorization under
  V_j + max(V_h, 0) with t(5) (both found on pools A-H, the plan's exploratory analysis).

    # needs pool J's logits (/work/realpool10): its full read and V_j check
    python bench/real_shadow_tenth.py compute
    python bench/real_shadow_tenth.py table --out bench/results/real_shadows_tenth.md
    # the same analysis over pools A-H (neither I nor J): the check made before pool J
    python bench/real_shadow_tenth.py table --as-of H
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import real_shadow_deleted as D  # noqa: E402
import real_shadow_eighth as E  # noqa: E402
import real_shadow_fullread as F  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_keypooled as K  # noqa: E402
import real_shadow_ninth as N  # noqa: E402
import real_shadow_pareto as P  # noqa: E402
import real_shadow_rules as R  # noqa: E402
import real_shadow_sixth as S  # noqa: E402
import real_shadow_seventh as V  # noqa: E402

FRESH = ("J", 10, 200)
POOL_I = N.FRESH  # ("I", 9, 200): the ninth plan's fresh pool, its AUC stores first read here
POOLS = E.POOLS + (POOL_I, FRESH)  # A, C, B, D, E, F, G, H, I, J
OUT = ROOT / "results" / "real_shadows_tenth.json"
DECIDED = V.DECIDED  # A, B, E
OTHERWISE = {"A": "jacksum", "B": "both", "E": "jacksum"}  # the eighth plan's fallbacks
MANY = {8: "eight", 9: "nine", 10: "ten", 11: "eleven", 12: "twelve", 13: "thirteen"}
K1, K2 = F.KEYS
JH_DF = 5  # the reported memorization candidate's t df (V_j's effective df on K2, rounded down)


def spec_of(as_of: str) -> tuple:
    return POOLS if as_of == "J" else E.POOLS


# --- AUC classes ---------------------------------------------------------------------------

def auc_decide(per_pool: dict, pooled: dict, fresh: tuple[str, ...]) -> dict:
    """Per class: gate 1 on each pool fresh for the AUC classes (fresh floors), gate 2 over
    all pools per key (pooled floors), split_upper=False, and the action. A class reverts
    only if a gate fails on its lower side (the gates with the band's upper end removed:
    under-coverage); a failure on the upper side alone keeps D4 and is reported, since the
    fallbacks over-cover more (0.990-0.998 on pools A and B)."""
    out = {}
    low_band = (K.BAND[0], np.inf)
    for cls in DECIDED:
        cells = {**{f"pool {p}": (per_pool[p][cls]["rules"]["D4"], K.FRESH_FLOORS) for p in fresh},
                 "all pools": (pooled[cls], K.POOLED_FLOORS)}
        full = {w: K.gates(c, K.BAND, fl, False) for w, (c, fl) in cells.items()}
        low = {w: K.gates(c, low_band, fl, False) for w, (c, fl) in cells.items()}
        under = [f"{w}: {low[w][1]}" for w in cells if not low[w][0]]
        over = [f"{w}: {full[w][1]}" for w in cells if low[w][0] and not full[w][0]]
        out[cls] = {"gates": full, "lower": low, "d4": not under, "over": over,
                    "gate1": full[f"pool {fresh[-1]}"], "gate2": full["all pools"],
                    "action": (f"D4 stays for class {cls}" if not under else
                               f"class {cls} reverts to {OTHERWISE[cls]} (" + "; ".join(under) + ")")
                    + (" (over-covers: " + "; ".join(over) + "; the fallback over-covers more)"
                       if over and not under else "")}
    return out


def auc_part(spec: tuple, loaded: tuple[dict, dict] | None = None) -> tuple[str, dict]:
    pools, per_pool = loaded or S.load_tables(spec)
    names = [name for name, _, _ in spec]
    pools, per_pool = {p: pools[p] for p in names}, {p: per_pool[p] for p in names}
    fresh, many = names[-1], MANY[len(names)]
    pooled = {cls: K.pooled_cell(list(pools.values()), cls) for cls in DECIDED}
    dec = auc_decide(per_pool, pooled, tuple(p for p in ("I", "J") if p in per_pool) if fresh == "J" else (fresh,))
    title = ((f"a tenth pool ({fresh}) re-checks every real-shadow rule in use" if fresh == "J" else
              f"the tenth plan's analysis as of pool {fresh}"), "tenth",
             "written before any of pool J's figures and any of pool I's AUC figures" if fresh == "J"
             else "pools A-H, H last: the check made before pool J, deciding nothing")
    command = ("python bench/real_shadow_tenth.py table --out bench/results/real_shadows_tenth.md"
               if fresh == "J" else "python bench/real_shadow_tenth.py table --as-of H")
    # the seventh's "rules in use" lines name R.CLASSES' rules from before D4; D4 is in use
    # for all three classes now, so they are left out; gate 1 on each pool fresh for the AUC
    # classes (amendment 2)
    deciding = tuple(p for p in ("I", "J") if p in per_pool) if fresh == "J" else (fresh,)
    L = V.markdown(per_pool, pooled, dec, S.headline(pools), fresh, many, title, command,
                   rules_in_use=False, gate1=deciding).rstrip("\n").split("\n")
    if "I" in per_pool and fresh != "I":
        L += ["", "Pool I alone (its AUC stores first read here; fresh for the AUC classes, its gate 1 "
              "decides as pool J's does, amendment 2):", "", *K.HEAD,
              *(K._row(f"{cls}: {R.LABEL[cls]}", per_pool["I"][cls]["rules"]["D4"]) for cls in DECIDED)]
    L += ["", "Every gate, in full (band [0.93, 0.97]) and on its lower side alone (what decides):", ""]
    for cls in DECIDED:
        L.append(f"- {cls}: " + "; ".join(
            f"{w} " + ("passes" if ok else "fails: " + why) + ("" if dec[cls]["lower"][w][0] else " (lower side)")
            for w, (ok, why) in dec[cls]["gates"].items()))
    return "\n".join(L), {"decision": dec, "pooled": pooled, "per_pool": per_pool,
                          "headline": S.headline(pools), "pools": pools}


# --- memorization at the common point ---------------------------------------------------------

def mem_load(as_of: str) -> tuple[list[dict], dict]:
    """Pools A-H (as_of "H") or A-J with their full reads."""
    if as_of == "H":
        return N.load("H")
    pools, full = N.load("I")
    here = json.loads(OUT.read_text())
    if here["J"]["pool"] != F._meta_pool(FRESH[1]):
        raise SystemExit("pool J's full read comes from another pool")
    full["J"] = here["J"]
    return [*pools, P.load(*FRESH)], full


def mem_part(pools: list[dict], full: dict) -> tuple[list[str], dict]:
    f = N.figures(pools, full)
    dec = N.decision(f)  # the ninth plan's gates, the last pool fresh
    labels = [d["label"] for d in pools]
    fresh, many = labels[-1], MANY[len(pools)]
    mean = lambda k, c: float(np.mean(f[k][c]))  # noqa: E731
    L = [f"## Memorization at the common point: `jacksum_s` against theta_full, pool {fresh} fresh", "",
         "The ninth plan's figures (`real_shadow_ninth.figures`): jacksum_s ± t_nu sqrt(V_j + V_S), "
         f"nu = (V_j + V_S)² / (V_j² / 7 + V_S² / {N.DRAWS - 1}); truth theta_full. {many.capitalize()} "
         "pools: " + ", ".join(labels) + ", weighted equally per key.", "",
         f"| key | pool {fresh}: jacksum / jacksum_s | {many} pools: jacksum / jacksum_s (lowest pool) | "
         f"per pool (jacksum_s) |", "|---|---|---|---|"]
    for k, r in f.items():
        L.append(f"| `{k}` | {r['JS'][-1]:.3f} / {r['JSs'][-1]:.3f} | {mean(k, 'JS'):.3f} / "
                 f"{mean(k, 'JSs'):.3f} ({min(r['JSs']):.3f}) | " + ", ".join(f"{x:.3f}" for x in r["JSs"]) + " |")
    L += ["", f"Class (12 keys), {many} pools: jacksum_s {dec['class']:.3f} (lowest key {dec['lowest']:.3f}); "
          f"pool {fresh}: {np.mean([r['JSs'][-1] for r in f.values()]):.3f}.", "",
          "### Decision", "",
          f"- Gate 1 (pool {fresh} alone; K2 ≥ {N.KEY_FLOOR_FRESH[K2]}, K1 ≥ {N.KEY_FLOOR_FRESH[K1]}): "
          + ("passes" if dec["gate1"] else "fails") + f" (K2 {f[K2]['JSs'][-1]:.3f}, K1 {f[K1]['JSs'][-1]:.3f})",
          f"- Gate 2 ({many} pools per key; every key ≥ {N.POOLED_KEY_FLOOR}, class ≤ {N.CLASS_CEILING}): "
          + ("passes" if dec["gate2"] else "fails") + f" (lowest key {dec['lowest']:.3f}, class {dec['class']:.3f})"]
    caveat = caveat_lines(f, dec, fresh, many)
    if fresh == "J":
        L.append("- **jacksum_s stays** (a check, not a choice: no other rule was pre-registered); "
                 + ("no caveat follows" if not caveat else "the report's caveat: " + " ".join(caveat)))
        L += ["", N.vj_check_line(full, fresh)]
    failing = caveat
    return L, {"figures": f, "decision": dec, "failing": failing}


def caveat_lines(f: dict, dec: dict, fresh: str, many: str) -> list[str]:
    """The caveat the plan fixed for a failed memorization check: each key under its floor on
    the fresh pool, each under 0.93 over all pools, the class over 0.99, with its figures."""
    out = []
    for k, floor in N.KEY_FLOOR_FRESH.items():
        if f[k]["JSs"][-1] < floor:
            out.append(f"`{k}` covered {f[k]['JSs'][-1]:.3f} on pool {fresh}, a fresh pool (floor {floor}), "
                       f"{np.mean(f[k]['JSs']):.3f} over {many} pools.")
    for k, r in f.items():
        if np.mean(r["JSs"]) < N.POOLED_KEY_FLOOR:
            out.append(f"`{k}` covers {np.mean(r['JSs']):.3f} over {many} pools (floor {N.POOLED_KEY_FLOOR}).")
    if dec["class"] > N.CLASS_CEILING:
        out.append(f"The class covers {dec['class']:.3f} over {many} pools (ceiling {N.CLASS_CEILING}).")
    return out


# --- reported, deciding nothing ------------------------------------------------------------------

def _covered(d: dict, key: str, comp: dict, h: np.ndarray, shift: float = 0.0) -> float:
    dev = (d["dcov"][key][:, 0] - comp["mu"]) * np.sqrt(d["n_pairs"] / (d["n_pairs"] - R.PAIRS)) + shift
    ok = np.isfinite(h) & np.isfinite(dev)
    return float(R.covered(h[ok], dev[ok], comp["t_s"])[0].mean())


def reported(auc_pools: dict, mem_pools: list[dict], full: dict) -> tuple[list[str], dict]:
    """The plan's reported figures: the headline key's V / T and effective df per pool; D4
    with Satterthwaite's quantile (V_4 on 7 df, V_h's df many) per class key; memorization
    under V_j + max(V_h, 0) with t(JH_DF), against theta_full, with its mean width over
    jacksum_s's."""
    names = list(auc_pools)
    out = {"headline": {}, "d4s": {}, "jh": {}}
    for p, d in auc_pools.items():
        c = H.components(d, S.HEADLINE)
        v = d["dcov"][S.HEADLINE][:, 3] + np.maximum(d["hcov"][S.HEADLINE][:, 1], 0.0)
        v = v[np.isfinite(v)]
        out["headline"][p] = {"v_over_t": float(v.mean() / (c["t_p"] + c["t_s"])),
                              "df": float(2 * v.mean() ** 2 / v.var(ddof=1))}
    out["vt"] = {}
    for cls in DECIDED:
        for k in H.class_keys(auc_pools[names[0]], cls):
            row, vt = [], []
            for d in auc_pools.values():
                c = H.components(d, k)
                vt.append(float(np.nanmean(D.variance(d, k, "D4", cls)) / (c["t_p"] + c["t_s"])))
                row.append(_covered(d, k, c, D.half_width(d, k, D.SATTERTHWAITE, cls)))
            out["d4s"][k] = row
            out["vt"][k] = float(np.mean(vt))
    mem = {d["label"]: d for d in mem_pools}
    out["parts"] = {}
    for k in P.keys_of():  # the components over the truth's parts, mean over the pools
        rows = []
        for p in names:
            d, q = auc_pools[p], mem[p]
            c = R.truth_parts(q, k)
            rows.append((np.nanmean(q["hcov"][k][:, 2]) / c["t_p"], np.nanmean(q["an"][k][:, 2]) / c["t_s"],
                         np.nanmean(d["hcov"][k][:, 1]) / c["t_s"]))
        out["parts"][k] = [float(x) for x in np.mean(rows, axis=0)]
    for k in P.keys_of():
        cov, ratio = [], []
        for p in names:
            d, q = auc_pools[p], mem[p]
            c = H.components(d, k)
            vj, vh, vs = q["hcov"][k][:, 2], np.maximum(d["hcov"][k][:, 1], 0.0), q["an"][k][:, 2]
            h = stats.t.ppf(0.975, JH_DF) * np.sqrt(vj + vh)
            cov.append(_covered(d, k, c, h, c["mu"] - full[p]["reads"][k]))
            hs = stats.t.ppf(0.975, N.nu(vj, vs)) * np.sqrt(vj + vs)
            ratio.append(float(np.nanmean(h) / np.nanmean(hs)))
        out["jh"][k] = {"cov": cov, "ratio": ratio}
    many = MANY[len(names)]
    hd = out["headline"]
    L = ["## Reported, deciding nothing (the plan's exploratory figures, recomputed)", "",
         f"The headline key under D4, per pool ({', '.join(names)}): mean V / T "
         + ", ".join(f"{hd[p]['v_over_t']:.2f}" for p in names) + "; V's relative SD over the pool's "
         "subsets " + ", ".join(f"{np.sqrt(2 / hd[p]['df']):.2f}" for p in names) + ", its effective df "
         "(2 mean² / variance) " + ", ".join(f"{hd[p]['df']:.1f}" for p in names)
         + f", mean {np.mean([hd[p]['df'] for p in names]):.1f}; the 1.96 quantile on a variance with that "
         f"many df covers {2 * stats.t.cdf(1.96, np.mean([hd[p]['df'] for p in names])) - 1:.3f} (Student's t).", "",
         f"D4 with Satterthwaite's quantile (V_4 on 7 df), coverage over the {many} pools per key "
         "(lowest pool):", ""]
    for cls in DECIDED:
        L.append(f"- {cls}: " + "; ".join(f"`{k}` {np.mean(r):.3f} ({min(r):.3f})"
                                          for k, r in out["d4s"].items() if k in H.class_keys(auc_pools[names[0]], cls)))
    L += ["", f"D4's mean V / T per key (mean over the {many} pools):", ""]
    for cls in DECIDED:
        L.append(f"- {cls}: " + "; ".join(f"`{k}` {v:.2f}" for k, v in out["vt"].items()
                                          if k in H.class_keys(auc_pools[names[0]], cls)))
    pt = out["parts"]
    L += ["", f"Memorization at the common point, the components over the truth's parts (mean over the {many} "
          "pools): V_j / T_p, V_S / T_s, V_h / T_s per key:", ""]
    L += [f"- `{k}` {a:.2f}, {b:.2f}, {c:.2f}" for k, (a, b, c) in pt.items()]
    L += ["", f"V_j / T_p {min(v[0] for k, v in pt.items() if k != K1):.2f}–"
          f"{max(v[0] for k, v in pt.items() if k != K1):.2f} on the eleven keys other than K1 "
          f"({pt[K1][0]:.2f}); V_S / T_s {min(v[1] for v in pt.values()):.2f}–{max(v[1] for v in pt.values()):.2f}; "
          f"V_h / T_s {np.mean([v[2] for v in pt.values()]):.2f} over the keys."]
    jm = {k: float(np.mean(r["cov"])) for k, r in out["jh"].items()}
    L += ["", f"Memorization at the common point under V_j + max(V_h, 0), ± t({JH_DF}) sd, against "
          f"theta_full, {many} pools per key (lowest pool; mean width over jacksum_s's):", ""]
    L += [f"- `{k}` {jm[k]:.3f} ({min(r['cov']):.3f}; {np.mean(r['ratio']):.3f})" for k, r in out["jh"].items()]
    L += ["", f"Class {np.mean(list(jm.values())):.3f}, lowest key {min(jm.values()):.3f}, highest "
          f"{max(jm.values()):.3f}" + "".join(
              f"; on pool {p} alone {np.mean([r['cov'][i] for r in out['jh'].values()]):.3f} (lowest key "
              f"{min(r['cov'][i] for r in out['jh'].values()):.3f}; K1 {out['jh'][K1]['cov'][i]:.3f}, K2 "
              f"{out['jh'][K2]['cov'][i]:.3f})" for i, p in enumerate(names) if p in ("I", "J")) + "."]
    return L, out


STORES = ("", "halves_", "deleted_", "jackknife_", "anova_", "pareto_")


def check_stores(spec: tuple, auc_pools: dict, mem_pools: list[dict], full: dict) -> str:
    """The plan's store checks (after the pre-read review): every store of a pool and its
    full read carry the main store's pool fingerprint; on every subset and key the delete-d
    store's point equals the halves store's, and (memorization keys) the jackknife and anova
    stores' (1e-12). Stops at the first mismatch; returns the line the table prints."""
    mem = {d["label"]: d for d in mem_pools}
    n_files = n_points = 0
    for label, seed, _ in spec:
        fp = F._meta_pool(seed)
        for st in STORES:
            meta = ROOT / "results" / f"real_shadows_{st}seed{seed}.meta.json"
            if meta.exists():
                got = json.loads(meta.read_text()).get("pool")
                if got != fp:
                    raise SystemExit(f"pool {label}: {meta.name} holds pool {got}, the main store {fp}")
                n_files += 1
        if label in full and full[label].get("pool", fp) != fp:
            raise SystemExit(f"pool {label}: its full read comes from another pool")
        d = auc_pools[label]
        for k in d["dcov"]:
            a, b = d["dcov"][k][:, 0], d["hcov"][k][:, 0]
            if not np.array_equal(np.isfinite(a), np.isfinite(b)) or np.nanmax(np.abs(a - b), initial=0) > 1e-12:
                raise SystemExit(f"pool {label}, {k}: the delete-d store's points are not the halves store's")
            n_points += int(np.isfinite(a).sum())
        for k in P.keys_of():
            a = d["dcov"][k][:, 0]
            for name, other in (("jackknife", mem[label]["hcov"][k][:, 0]), ("anova", mem[label]["an"][k][:, 0])):
                if np.nanmax(np.abs(a - other), initial=0) > 1e-12:
                    raise SystemExit(f"pool {label}, {k}: the delete-d store's points are not the {name} store's")
    return (f"Store checks: {n_files} store files carry their pool's fingerprint; on {n_points} (subset, key) "
            "records the delete-d and halves stores' points agree, and on the memorization keys the "
            "jackknife and anova stores' too (1e-12).")


def table_main(a: argparse.Namespace) -> None:
    spec = spec_of(a.as_of)
    auc, got = auc_part(spec)
    mem_pools, full = mem_load(a.as_of)
    checks = check_stores(spec, got["pools"], mem_pools, full)
    mem, _ = mem_part(mem_pools, full)
    rep, _ = reported(got["pools"], mem_pools, full)
    H.write(auc + "\n\n" + checks + "\n\n" + "\n".join(mem) + "\n\n" + "\n".join(rep), a.out)


def compute_main(a: argparse.Namespace) -> None:
    N.write_full_read(FRESH, OUT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("compute", help="pool J's full read and V_j check (needs the logits)")
    t = sub.add_parser("table", help="the plan's tables and decisions")
    t.add_argument("--out", type=Path)
    t.add_argument("--as-of", choices=("H", "J"), default="J",
                   help="H: pools A-H, H last (the check made before pool J)")
    a = ap.parse_args()
    {"compute": compute_main, "table": table_main}[a.cmd](a)


if __name__ == "__main__":
    main()
