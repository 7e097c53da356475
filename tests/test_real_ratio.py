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
