"""The real-ratio study (bench/results/real_ratio_plan.md): its pilot table is what the
committed stores and results/membership.json give, and the real run's ratios it quotes are
read from the run, not typed in."""
import contextlib
import io
import sys

from conftest import ROOT, load_script


def test_the_pilot_table_is_what_its_stores_give(monkeypatch):
    pilot = load_script("bench/real_ratio_pilot.py")
    stores = ["results/matched_components_seed25.jsonl",
              *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "results/real_ratio_pilot").glob("*.jsonl"))]
    assert len(stores) == 7
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "argv", ["real_ratio_pilot.py", *stores])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        pilot.main()
    committed = (ROOT / "bench/results/real_ratio_pilot.md").read_text().split("\n", 2)[2]
    assert out.getvalue() == committed


def test_the_real_medians_come_from_the_run():
    """The plan's table of the default run's V_s / V_p medians is membership.json's."""
    import numpy as np
    pilot = load_script("bench/real_ratio_pilot.py")
    ref = {c: np.median(np.array(v), axis=0)[0]
           for c, v in pilot.real(ROOT / "results/membership.json").items()}
    plan = " ".join((ROOT / "bench/results/real_ratio_plan.md").read_text().split())
    rows = {"AUC (all samples)": "auc_all", "memorization, flipped": "fz_flipped",
            "memorization, OOD": "fz_ood"}
    for label, fig in rows.items():
        cells = " | ".join(f"{ref[(fig, r)]:.2f}" for r in ("common", "overlap", "equal"))
        assert f"| {label} | {cells} |" in plan, (label, cells)


def _range(tabs, cls, rule, mr):
    cov = [tabs[s][r][rule]["coverage"] for s in tabs for r in mr.CLASSES[cls][0]]
    return f"{min(cov):.3f}-{max(cov):.3f}"


def test_readme_quotes_the_real_ratio_outcome():
    """README's and the plan's outcome of the seed-30/31 study, recomputed from the stores
    by the study's analysis: today's rules' coverage per class, the selection on seed 30,
    its failed confirmation on seed 31, and `mixed` unchanged (nothing was confirmed)."""
    from bnmem.attack.intervals import MIXED_RULES
    mr = load_script("bench/matched_rules.py")
    cands = mr.PLANS["real_ratio"]
    tabs = {s: mr.table(ROOT / f"results/matched_components_sd005_seed{s}.jsonl", cands)[0]
            for s in (30, 31)}
    assert all(tabs[s]["auc_matched"]["C8"]["runs"] == 500 for s in tabs)
    picked = mr.select(tabs[30], "C", cands, mr.classes_for("real_ratio"))[0]
    assert picked == "C1t"
    rule, ok, cov = mr.confirm(tabs[31], {"C": picked})["C"]
    assert not ok and max(cov) > 0.97
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"seed 31 gave {min(cov):.3f}-{max(cov):.3f}, one read above 0.97" in readme
    quoted = {("A", "C8"): "AUC at the common point (jacksum) {}",
              ("B", "C0"): "over the overlap (`both`) {}",
              ("E", "C8"): "at equal budgets {}",
              ("C", "C8"): "memorization at matched reads (jacksum) {}",
              ("F", "C8"): "at equal budgets {}; TPR",
              ("D", "C6"): None}
    for (cls, r), text in quoted.items():
        if text:
            assert text.format(_range(tabs, cls, r, mr)) in readme, (cls, r)
    tpr = [tabs[s][x]["C6"]["coverage"] for s in tabs for c in "DG" for x in mr.CLASSES[c][0]]
    assert f"TPR at 1e-3 (`pairs_t`) {min(tpr):.3f}-{max(tpr):.3f}" in readme
    # nothing adopted: memorization kept jacksum at matched reads (at the common point it
    # remains the fallback of jacksum_s, adopted later on real shadows: real_shadows_ninth_plan.md)
    from bnmem.attack.intervals import HALVES_FALLBACK
    assert MIXED_RULES[("mem", "overlap")] == HALVES_FALLBACK[("mem", "common")] == "jacksum"


def test_readme_quotes_the_variance_diagnostic():
    """README's diagnostic: over the four memorization studies, the mean V_p of each matched
    memorization read against the point's run-to-run variance, and jacksum's."""
    import numpy as np
    tr = load_script("bench/tpr_rules.py")
    stores = ["matched_components_seed25", "matched_components_seed26",
              "matched_components_sd005_seed30", "matched_components_sd005_seed31"]
    reads = ("fz_flipped_matched", "fz_flipped_overlap", "fz_ood_matched", "fz_flipped_fit",
             "fz_ood_fit")
    vp, js = [], []
    for name in stores:
        _, rec, _ = tr.load(ROOT / "results" / f"{name}.jsonl")
        for r in reads:
            x = rec[r]
            v = np.var(x[:, 0], ddof=1)
            vp.append(np.mean(x[:, 1]) / v)
            js.append(np.mean(x[:, 4] + x[:, 2]) / v)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"(mean V_p {min(vp):.2f}-{max(vp):.2f} x it)" in readme
    assert f"jacksum is {min(js):.1f}-{max(js):.2f} x the true variance" in readme
