"""The analysis of bench/results/real_shadows_pooled_plan.md (fixed before any pool-D figure,
amended at 00:15 before any was read): the delete-d rules selected on real-shadow pools
A + C + B pooled, checked on each pool and on a fresh pool D; class E's D4 re-tested on D.

    python bench/real_shadow_pooled.py --out bench/results/real_shadows_pooled.md
    python bench/real_shadow_pooled.py --select-only          # the pooled selection alone

Pool D is read only at its 200 subsets (the amendment of 00:15).

Each pool is scored against its own truth by bench/real_shadow_deleted.py's per-subset
coverage (V_4 in the pipeline's split-mean form); a pooled cell concatenates, per key, the
pools' per-subset coverages (A 200, C 200, B 100), so its coverage weights them 2 : 2 : 1.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_shadow_deleted as D  # noqa: E402
import real_shadow_halves as H  # noqa: E402
import real_shadow_rules as R  # noqa: E402
from tpr_rules import Z  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SELECTION = (("A", 0, 200), ("C", 2, 200), ("B", 1, 100))  # (pool, seed, subsets)
CONFIRMATION = ("D", 3, 200)


def load_pool(seed: int, subsets: int, results: Path = ROOT / "results") -> dict:
    """One pool's stores (main, halves, delete-d), V_4 in split-mean form."""
    return D.load(results / f"real_shadows_seed{seed}.jsonl",
                  results / f"real_shadows_halves_seed{seed}.jsonl",
                  results / f"real_shadows_deleted_seed{seed}.jsonl", subsets, "split-mean")


def cell_pooled(pools: list[dict], cls: str, rule: str, ts_scale: float = 1.0,
                empirical: bool = False, to_b8: bool = False) -> dict:
    """D.cell over several pools: per key, every pool's per-subset coverage against its own
    truth, concatenated; the width over the calibrated one averaged over all records."""
    keys = H.class_keys(pools[0], cls)
    if any(H.class_keys(d, cls) != keys for d in pools[1:]):
        raise SystemExit(f"class {cls}: the pools hold different keys")
    covs, cal, bound, free, per, undefined = [], [], [], [], [], []
    for k in keys:
        ps, ratios, fulls, bs, fs, n_ok, n_all = [], [], [], [], [], 0, 0
        for d in pools:
            c = H.components(d, k)
            scale = max(c["b8"], 0.0) / c["v_h"] if to_b8 and c["v_h"] > 0 else 1.0
            p, _, h, ok = D.per_subset(d, k, rule, cls, c, ts_scale, empirical, scale)
            full = np.full(ok.size, np.nan)
            full[ok] = p
            fulls.append(full)
            ps.append(p)
            ratios.append(h / (Z * np.sqrt(c["t_p"] + c["t_s"])))
            binds = ((d["hcov"][k][:, 1] < 0)[ok] if cls not in D.TPR_CLASSES or rule not in D.RULES
                     else np.zeros(ok.sum(), bool))
            bs.append(p[binds])
            fs.append(p[~binds])
            n_ok, n_all = n_ok + int(ok.sum()), n_all + ok.size
        p, r = np.concatenate(ps), np.concatenate(ratios)
        covs.append(float(p.mean()) if p.size else np.nan)
        cal.append(float(r.mean()) if r.size else np.nan)
        bound.append(np.concatenate(bs))
        free.append(np.concatenate(fs))
        per.append(np.concatenate(fulls))
        undefined.append(1 - n_ok / max(n_all, 1))
    return H.pooled(covs, cal, bound, free, per, undefined)


def table_pooled(pools: list[dict]) -> dict:
    """D.table's layout over the pooled pools; today's rule over the pools whose main store
    has coverage subsets (A and B)."""
    out = {}
    with_cov = [d for d in pools if d["has_cov"]]
    for cls, (_, today) in R.CLASSES.items():
        rules = {}
        for rule in ((today,) if with_cov else ()) + tuple(r for r in D.RULES if D.applies(r, cls)):
            use = with_cov if rule not in D.RULES else pools
            c = cell_pooled(use, cls, rule)
            c["ts15"] = cell_pooled(use, cls, rule, 1.5)
            c["emp"] = cell_pooled(use, cls, rule, empirical=True)
            c["b8"] = cell_pooled(use, cls, rule, to_b8=True) if rule in D.RULES else c
            rules[rule] = c
        out[cls] = {"today": today, "rules": rules}
    return out


def decide(sel: dict, per_pool: dict[str, dict], n_d: int) -> dict:
    """Per class (the plan's amendment of 00:15): the pooled selection, its confirmation-gate
    result on every pool (A, C, B, D), and what follows: a rule is adopted only if it passes
    on all four; class E's D4 (in use) stays if it passes on pool D and reverts to jacksum
    if not; nothing is decided before pool D holds CONFIRMATION[2] subsets."""
    out = {}
    for cls in R.CLASSES:
        rule, why = D.select(sel, cls)
        checks = ({p: D.passes(t[cls]["rules"][rule], D.BANDS["confirm"]) for p, t in per_pool.items()}
                  if rule in D.RULES else {})
        if n_d < CONFIRMATION[2]:
            action = f"nothing decided (pool D holds {n_d} of {CONFIRMATION[2]} subsets)"
        elif cls == "E":
            ok, why_d = D.passes(per_pool["D"]["E"]["rules"]["D4"], D.BANDS["confirm"])
            action = ("D4 (in use) stays: it passes on pool D" if ok
                      else f"D4 reverts to jacksum (on pool D: {why_d})")
        elif checks and all(ok for ok, _ in checks.values()):
            action = f"adopt {rule} (passes on every pool)"
        else:
            action = "today's rule stays"
        out[cls] = {"selected": rule, "why": why, "checks": checks, "action": action}
    return out


def markdown(sel: dict, conf: dict, dd: dict, dec: dict, n_d: int) -> str:
    def row(cls, rule, c):
        return (f"| {cls}: {R.LABEL[cls]} | {H.name(rule) if rule not in D.RULES else rule} | "
                f"{c['coverage']:.3f} [{c['range'][0]:.3f}, {c['range'][1]:.3f}] "
                f"({c['min']:.3f}-{c['max']:.3f}) | {c['width_calibrated']:.2f} | "
                f"{c['share']:.2f} ({c['n_bound']}) | {c['bound']:.3f} / {c['free']:.3f} | "
                f"{c['ts15']['coverage']:.3f} ({c['ts15']['min']:.3f}) | {c['emp']['coverage']:.3f} | "
                f"{c['b8']['coverage']:.3f} |")
    head = ["| class | rule | coverage [95 % range] (lowest-highest key) | width / calibrated | "
            "floor binds (records) | where it binds / not | T_s x 1.5: coverage (lowest key) | "
            "empirical samples' part | V_h at B8 |", "|---|---|---|---|---|---|---|---|---|"]
    L = ["# Real shadows: the delete-d rules selected on pools A + C + B, checked on every pool and "
         "a fresh pool D",
         "", "Plan: [real_shadows_pooled_plan.md](real_shadows_pooled_plan.md) (written before any "
         "pool-D figure). `python bench/real_shadow_pooled.py"
         + "`. V_4 in split-mean form. "
         "Nominal 0.95; selection band [0.935, 0.965], confirmation [0.93, 0.97].", "",
         "## Selection: pools A (200 subsets), C (200), B (100) pooled", "", *head]
    L += [row(cls, r, c) for cls, t in sel.items() for r, c in t["rules"].items()]
    L += ["", "Today's rules (jacksum, both, pairs_t) are scored over pools A and B only (pool C's "
          "main store holds no coverage subsets). The pools weigh 2 : 2 : 1 (their subsets); at "
          "1 : 1 : 1 class C's selection is D4t instead of D3t (D4t, which fails gate (iv) here, "
          "qualifies there and is narrower).", "",
          f"## Confirmation: pool D ({n_d} subsets, data seed 3)", "", *head]
    L += [row(cls, r, c) for cls, t in conf.items() for r, c in t["rules"].items()]
    L += ["", "**V_d / T_p** on pool D (ratios of sums over the keys; d = 2 / 3 / 4, and V_j): "
          + "; ".join(f"{cls} " + " / ".join(f"{t['vd_tp'][x]:.2f}" for x in (*D.DS, "j"))
                      for cls, t in conf.items()) + ".", "",
          "True-width oracle on pool D (coverage of 1.96 sqrt(T_p + T_s) / (V_4 + max(V_h, 0)) "
          "over (T_p + T_s)): " + "; ".join(
              f"{cls} {o['coverage']:.3f} / {o['d4_over_truth']:.2f}"
              for cls, o in ((c, D.oracle(dd, c)) for c in conf)) + ".", "",
          "## Outcome (the plan's rules)", ""]
    L += [f"- {cls}: selected {x['selected'] if x['selected'] in D.RULES else H.name(x['selected'])} "
          f"({x['why']}); the confirmation gates per pool: "
          + ("; ".join(f"{p} " + ("passes" if ok else f"fails ({why})")
                       for p, (ok, why) in x["checks"].items()) or "—")
          + f". **{x['action']}**" for cls, x in dec.items()]
    return "\n".join(L) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--select-only", action="store_true", help="the pooled selection alone")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    pools = [load_pool(seed, n) for _, seed, n in SELECTION]
    sel = table_pooled(pools)
    if a.select_only:
        for cls in R.CLASSES:
            print(cls, *D.select(sel, cls))
        return
    dd = load_pool(CONFIRMATION[1], CONFIRMATION[2])  # refuses fewer finished subsets
    conf = D.table(dd)
    per_pool = {name: D.table(load_pool(seed, n)) for name, seed, n in SELECTION}
    dec = decide(sel, {**per_pool, "D": conf}, CONFIRMATION[2])
    H.write(markdown(sel, conf, dd, dec, CONFIRMATION[2]), a.out)


if __name__ == "__main__":
    main()
