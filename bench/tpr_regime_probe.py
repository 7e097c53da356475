"""Which simulated regime has the full-scale run's TPR variance components? For each
configuration, a few simulated runs (seeds 90 000 000 + r, a range no coverage study uses)
give each run's design variances of TPR at FPR 1e-3 / 1e-4 (one arm, paired difference),
and this prints their medians as the ratios the full-scale run's records show: V_s / V_p,
V_b / (V_p + V_s), V_j / V_p, how often twoway's floor at V_p binds, and the point. No truth
is computed and no coverage is read: it picks a regime, it decides no rule.

    python bench/tpr_regime_probe.py --runs 4 --config n=3200,flipped=0.1,effects=0.6:0.3
    python bench/tpr_regime_probe.py --fullscale results/fullscale/results/membership.json
"""
import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
import bnmem  # noqa: E402,F401
import numpy as np  # noqa: E402

from bnmem.attack.coverage import draw_figures, sample_kinds, simulate_run  # noqa: E402
from bnmem.attack.intervals import IntervalPlan, interval_records  # noqa: E402
from bnmem.attack.resample import draw_designs  # noqa: E402

FIGS = ("tpr_low_all", "tpr_vlow_all")
DESIGNS = ("pairs", "samples", "both", "jackknife")


def ratios(vp, vs, vb, vj) -> dict:
    vp, vs, vb, vj = map(np.asarray, (vp, vs, vb, vj))
    return {"Vs/Vp": float(np.median(vs / vp)), "Vb/(Vp+Vs)": float(np.median(vb / (vp + vs))),
            "Vj/Vp": float(np.median(vj / vp)), "floor": float(np.mean(2 * (vp + vs) - vb < vp))}


def fullscale(path: Path) -> dict:
    rows = {"tpr_low_all": [], "tpr_vlow_all": []}
    for p, rec in interval_records(json.loads(path.read_text())):
        if rec.get("rule") == "twoway":
            s = rec["sd"]
            rows["tpr_vlow_all" if "tpr_vlow_all" in p else "tpr_low_all"].append(
                [s[k] ** 2 for k in DESIGNS] + [rec["value"]])
    out = {}
    for f, r in rows.items():
        r = np.array(r)
        out[f] = {**ratios(*r[:, :4].T), "records": len(r), "point_median": float(np.median(r[:, 4]))}
    return out


def probe(n_models, n, effects, flipped, ood, arm_rho, draws, runs, tdf=0.0) -> dict:
    kind = sample_kinds(n, flipped, ood)
    p = n_models // 2
    acc = {f"{f}_{c}": [] for f in FIGS for c in "ad"}
    t0 = time.time()
    for r in range(runs):
        seed = 90_000_000 + r
        phi, keep = simulate_run(n_models, n, effects, kind, seed, arm_rho, tdf or None)
        counts, weights, seg = draw_designs(kind, p, draws, np.random.default_rng([seed, 0xC0F]), DESIGNS)
        f = draw_figures(phi, keep, kind, counts, weights, FIGS)
        plan = IntervalPlan("both", p, seg)
        for j, name in enumerate(FIGS):
            for c, vals in (("a", f[0, :, j]), ("d", f[0, :, j] - f[1, :, j])):
                v = plan.variances(vals)
                if all(v[k] is not None for k in DESIGNS):
                    acc[f"{name}_{c}"].append([v[k] for k in DESIGNS] + [float(vals[0])])
    out = {}
    for k, r in acc.items():
        r = np.array(r)
        out[k] = {**ratios(*r[:, :4].T), "point_median": float(np.median(r[:, 4])), "runs": len(r)} if len(r) else None
    out["seconds_per_run"] = round((time.time() - t0) / runs, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", action="append", default=[],
                    help="n=..,flipped=..,ood=..,effects=a:b,models=..,rho=..,tdf=.. (Student-t "
                    "noise on tdf df, 0: normal)")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--draws", type=int, default=20)
    ap.add_argument("--fullscale", type=Path)
    ap.add_argument("--md", type=Path, help="also write the medians as a table here")
    a = ap.parse_args()
    rows = []
    if a.fullscale:
        fs = fullscale(a.fullscale)
        print(json.dumps({"fullscale": fs}, indent=1))
        for f, v in fs.items():
            rows.append(f"| full-scale records (`{a.fullscale}`) | {f} (arms and differences) | "
                        f"{v['records']} | {v['Vs/Vp']:.2f} | {v['Vb/(Vp+Vs)']:.2f} | "
                        f"{v['Vj/Vp']:.2f} | {v['floor']:.2f} | — |")
    for c in a.config:
        kv = dict(x.split("=") for x in c.split(","))
        cfg = {"n_models": int(kv.get("models", 64)), "n": int(kv.get("n", 3200)),
               "effects": tuple(float(x) for x in kv.get("effects", "0.6:0.3").split(":")),
               "flipped": float(kv.get("flipped", 0.1)), "ood": float(kv.get("ood", 0.0)),
               "arm_rho": float(kv.get("rho", 0.3)), "tdf": float(kv.get("tdf", 0))}
        res = probe(**cfg, draws=a.draws, runs=a.runs)
        print(json.dumps({"config": c, **res}), flush=True)
        for k, v in res.items():
            if isinstance(v, dict):
                rows.append(f"| `{c}` | {k} | {v['runs']} runs | {v['Vs/Vp']:.2f} | "
                            f"{v['Vb/(Vp+Vs)']:.2f} | {v['Vj/Vp']:.2f} | {v['floor']:.2f} | "
                            f"{v['point_median']:.5f} |")
    if a.md:
        head = ["# TPR variance components: simulated regimes against the full-scale records",
                "", f"`python {' '.join(sys.argv)}` ({a.draws} draws per design, seeds "
                "90 000 000 + r, the same in every configuration; medians over the runs; "
                "no truth, no coverage). One arm is arm a; _d the a - b difference.", "",
                "| source | figure | records | V_s / V_p | V_b / (V_p + V_s) | V_j / V_p | "
                "floor binds | point |", "|---|---|---:|---:|---:|---:|---:|---:|"]
        a.md.write_text("\n".join(head + rows) + "\n")


if __name__ == "__main__":
    main()
