"""Every interval README.md quotes for a committed run comes from that run's report.md
(so a rerun that moves a number fails here until README follows)."""
import re

import pytest

from conftest import ROOT, load_script

INTERVAL = re.compile(r"[+−-]?\d+\.\d+ \[[+−-]?\d+\.\d+, [+−-]?\d+\.\d+\]")


def _norm(text: str) -> str:
    return text.replace("−", "-")


@pytest.mark.parametrize("heading, report", [
    ("## What the default run shows", "report.md"),             # the default dvc repro
    ("## What to use instead of BN", "results/dp/report.md"),   # make dp
    ("## The memorization regime", "results/memreg/report.md"),  # make memreg
    ("## The zoo", "results/grid.md"),                           # make grid
    ("### Full-scale Fashion-MNIST", ("results/fullscale/report.md",           # make fullscale
                                      "results/fullscale_7079912/report.md",    # before endpoints
                                      "results/fullscale_6epochs/report.md")),  # its first run
])
def test_readme_numbers_come_from_the_report(heading, report):
    """Every interval a section quotes is in its run's report (a section that quotes two
    runs: in one of them); a section ends at the next heading of its level or above."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index(heading)
    level = "\n" + heading.split(" ")[0] + " "
    ends = [i for i in (readme.find("\n## ", start + 10), readme.find(level, start + 10)) if i > 0]
    section = readme[start:min(ends)]
    quoted = INTERVAL.findall(section)
    assert len(quoted) >= 4, "the section quotes its intervals"
    reports = (report,) if isinstance(report, str) else report
    text = " ".join(_norm((ROOT / r).read_text()) for r in reports)
    missing = [q for q in quoted if _norm(q) not in text]
    assert not missing, f"README quotes intervals {report} does not hold: {missing}"


def test_readme_tpr_1e4_coverage_comes_from_its_study():
    """The 1e-4 coverage README (and the report's caveat) quotes is the seed-20 study's (of
    the earlier rule, `both`: pairs_t is not simulated at 1e-4)."""
    import json
    study = json.loads((ROOT / "results" / "coverage_vlow_seed20.json").read_text())["table"]["both"]
    one, paired = study["tpr_vlow_all"], study["tpr_vlow_all_delta"]
    assert one["runs"] == paired["runs"] == 500
    readme = (ROOT / "README.md").read_text()
    quoted = f"**{one['coverage']:.3f}** / {one['mean_width']:.4f} for one arm and " \
             f"**{paired['coverage']:.3f}** / {paired['mean_width']:.4f} for the paired"
    assert quoted in " ".join(readme.split()), quoted
    verdict = ("calibrated" if 0.93 <= min(one["coverage"], paired["coverage"])
               and max(one["coverage"], paired["coverage"]) <= 0.97 else
               "under-covers" if min(one["coverage"], paired["coverage"]) < 0.93 else "conservative")
    assert f"paired difference: {verdict}" in " ".join(readme.split())
    report = " ".join((ROOT / "report.md").read_text().split())
    assert f"covered {one['coverage']:.3f} one arm, {paired['coverage']:.3f} paired" in report


def test_readme_and_report_quote_the_32_pair_tpr_check():
    """The seed-27 check of `pairs_t` at 32 pairs (bench/results/coverage_vlow_pairs_t_seed27_plan.md):
    its four judged coverages, recomputed from the study's table, are what README, the
    report's interval sentence and its TPR caveat quote, with the plan's word for them."""
    import json

    from bnmem.report.markdown import _procedure_text
    study = json.loads((ROOT / "results" / "coverage_vlow_pairs_t_seed27.json").read_text())
    tab = study["table"]["pairs_t"]
    cells = [tab[k] for k in ("tpr_low_all", "tpr_vlow_all", "tpr_low_all_delta", "tpr_vlow_all_delta")]
    assert study["n_models"] == 64 and all(c["runs"] == 500 for c in cells)
    cov = [c["coverage"] for c in cells]
    word = ("calibrated" if all(0.93 <= c <= 0.97 for c in cov) else
            "under-covers" if min(cov) < 0.93 else "conservative")
    quoted = f"{cov[0]:.3f} / {cov[1]:.3f} one arm at FPR 1e-3 / 1e-4, {cov[2]:.3f} / {cov[3]:.3f} paired"
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"`pairs_t` {word} at 32 pairs: {quoted}" in readme
    assert f"TPR at 32 pairs ({quoted}" in _procedure_text("mixed", 100, 8)
    report = " ".join((ROOT / "report.md").read_text().split())
    assert quoted.replace(" at FPR", " at") in report
    # the full-scale run (32 pairs) says it of its own table
    assert f"{cov[0]:.3f} / {cov[1]:.3f} one arm at 1e-3 / 1e-4 and {cov[2]:.3f} / {cov[3]:.3f} paired" in readme
    # how much wider a normal interval would need to be: 1.96 over the z that covers c
    from scipy.stats import norm
    wider = [round(100 * (norm.ppf(0.975) / norm.ppf(0.5 + c / 2) - 1)) for c in (max(cov), min(cov))]
    assert f"would need to be {wider[0]}-{wider[1]} % wider" in readme
    assert f"would need to be {wider[0]}-{wider[1]} % wider" in report


def test_readme_quotes_the_32_pair_rule_studies():
    """The seed-28 selection and seed-29 confirmation of bench/results/tpr32_rules_plan.md,
    and the second confirmation on seed 34 pooled with seed 29 (tpr32_rules_second_plan.md),
    recomputed from their stores by the study's analysis, are what README quotes, and the
    pipeline's rule above 8 pairs is the confirmed one (or pairs_t where none was)."""
    from bnmem.attack import intervals
    tr = load_script("bench/tpr_rules.py")
    figs = ("tpr_low_all", "tpr_vlow_all")
    tabs = {s: {f: tr.table(ROOT / "results" / f"tpr32_components_seed{s}.jsonl", f) for f in figs}
            for s in (28, 29)}
    assert all(t[f]["C6"]["one_arm"]["runs"] == 500 for t in tabs.values() for f in figs)
    rule, _ = tr.select_cells(tabs[28])
    confirmed = tr.confirms(tabs[29], rule)
    readme = " ".join((ROOT / "README.md").read_text().split())
    for seed in (28, 29):
        c = [tabs[seed][f][rule][k]["coverage"] for f in figs for k in ("one_arm", "difference")]
        assert (f"{c[0]:.3f} / {c[2]:.3f} one arm at FPR 1e-3 / 1e-4, {c[1]:.3f} / {c[3]:.3f} "
                "paired") in readme
    names = {"C0": "both", "C1": "twoway", "C3": "sum", "C8": "jacksum"}
    assert ("confirmed it" if confirmed else "did not confirm it") in readme
    # the second confirmation (tpr32_rules_second_plan.md): seed 34 pooled with seed 29
    s34, s29 = (ROOT / "results" / f"tpr32_components_seed{s}.jsonl" for s in (34, 29))
    tr.check_store(s34, s29)
    fresh = {f: tr.table(s34, f) for f in figs}
    both = {f: tr.pooled([fresh[f], tabs[29][f]]) for f in figs}
    again = not confirmed and rule == "C1" and tr.confirms_again(fresh, both, "C1")
    for t in (fresh, both):
        c = [t[f]["C1"][k]["coverage"] for f in figs for k in ("one_arm", "difference")]
        assert (f"{c[0]:.3f} / {c[2]:.3f} one arm at FPR 1e-3 / 1e-4, {c[1]:.3f} / {c[3]:.3f} "
                "paired") in readme
    assert ("seed 34 confirmed it" if again else "seed 34 did not confirm it") in readme
    # the lean below the truth over the three seeds that bear on C1, at 1e-3
    t28 = tr.table(ROOT / "results" / "tpr32_components_seed28.jsonl", "tpr_low_all")["C1"]
    lean = {}
    for k in ("one_arm", "difference"):
        cells = [t28[k], tabs[29]["tpr_low_all"]["C1"][k], fresh["tpr_low_all"]["C1"][k]]
        lean[k] = [sum(round(c[m] * c["runs"]) for c in cells) for m in ("miss_below", "miss_above")]
    assert (f"{lean['one_arm'][0]} below against {lean['one_arm'][1]} above one arm, "
            f"{lean['difference'][0]} / {lean['difference'][1]} paired, in 1 500 runs") in readme
    assert f"holds about {1 - lean['one_arm'][0] / 1500:.3f} one-sided" in readme
    want = names.get(rule) if confirmed or again else None
    assert want == "twoway"  # the rule above 8 pairs until the seventh plan's (test_tpr_robust)
    assert intervals.TPR_RULE_MANY_PAIRS == "both_sqrt"
