"""The coverage figures report.md states for its intervals come from the committed
coverage studies: the TPR rule's confirmation (bench/results/tpr_rules_plan.md), recomputed
from its store by the study's own analysis (bench/tpr_rules.py)."""
import json
from pathlib import Path

import numpy as np
import pytest

from bnmem.attack.intervals import designs
from bnmem.report.markdown import _procedure_text
from conftest import ROOT, load_script


def _rules():
    return load_script("bench/tpr_rules.py")


def test_report_quotes_the_tpr_rules_confirmation():
    rules = _rules()
    tab = rules.table(ROOT / "results" / "tpr_components_seed23.jsonl")["C6"]  # pairs_t
    one, diff = tab["one_arm"]["coverage"], tab["difference"]["coverage"]
    text = _procedure_text("mixed", 100, 8)
    assert f"{one:.3f} one arm, {diff:.3f} paired, " in text
    misses = [tab[k]["miss_below"] for k in ("one_arm", "difference")]
    sel22 = rules.table(ROOT / "results" / "tpr_components_seed22.jsonl")["C6"]
    misses += [sel22[k]["miss_below"] for k in ("one_arm", "difference")]
    assert f"{100 * min(misses):.1f}-{100 * max(misses):.1f} % of runs" in text
    from scipy import stats
    assert f"{stats.t.ppf(0.975, 7):.2f} sd" in text  # t on 7 df (8 pairs)
    # above 8 pairs TPR reads both_sqrt (tpr32_robust_plan.md), a normal quantile on the
    # square-root scale
    assert ("for TPR at low FPR: ± 1.96 sd on the square-root scale (delta method), "
            "back-transformed, sd over draws that resample the pairs and the samples together, "
            "and a difference by MOVER from its two arms' intervals (asymmetric intervals) "
            "(`both_sqrt`)") in _procedure_text("mixed", 20, 32)
    # the rule the plan selected on seed 22 is the one the pipeline runs
    sel, qualifies = rules.select(rules.table(ROOT / "results" / "tpr_components_seed22.jsonl"))
    assert (sel, qualifies) == ("C6", False)
    from bnmem.attack.intervals import mixed_procedure
    assert mixed_procedure("tpr_low_all") == "pairs_t"


def test_the_studys_pairs_t_is_the_pipelines():
    """C6 of bench/tpr_rules.py (from a stored variance) equals IntervalPlan('pairs_t') on the
    draws that variance came from, so the confirmed coverage is the production rule's."""
    import numpy as np
    from bnmem.attack.intervals import IntervalPlan
    rules = _rules()
    rng = np.random.default_rng(4)
    draws = np.r_[0.01, rng.gamma(4, 0.0025, 100)]
    plan = IntervalPlan("pairs_t", 8, {"pairs": (1, 101)})
    v = plan.variances(draws)["pairs"]
    rec = np.array([[0.01, v, np.nan, np.nan, np.nan, np.nan, np.nan, np.nan]])
    lo, hi = rules.one_arm(rec, "C6", 8)
    assert np.allclose((lo[0], hi[0]), plan.ci(0.01, draws, "tpr_low_all"), rtol=1e-12, atol=0)
    mixed = IntervalPlan("mixed", 8, {"pairs": (1, 101), "jackknife": (1, 9), "samples": (1, 101)})
    assert mixed.ci(0.01, draws, "tpr_low_all") == plan.ci(0.01, draws, "tpr_low_all")
    # one pair: no spread to estimate, so no interval (not a zero-width one)
    assert IntervalPlan("pairs_t", 1, {"pairs": (1, 101)}).ci(0.01, draws, "tpr_low_all") == (None, None)


@pytest.mark.parametrize("rule,proc", [("C0", "both"), ("C1", "twoway"), ("C3", "sum"),
                                       ("C6", "pairs_t"), ("C8", "jacksum")])
def test_the_tpr32_candidates_are_the_pipelines_procedures_at_32_pairs(rule, proc):
    """The candidates of bench/tpr_rules.py that are pipeline procedures, from stored
    variances at 32 pairs, equal IntervalPlan(proc, 32) on the draws those came from (the
    study's normal quantile 1.959964, the pipeline's 1.96), one arm and difference."""
    import numpy as np
    from bnmem.attack.intervals import IntervalPlan
    rules = _rules()
    seg = {"jackknife": (1, 33), "samples": (33, 133), "pairs": (133, 233), "both": (233, 333)}
    rng = np.random.default_rng(5)
    draws = np.r_[0.004, rng.gamma(9, 0.0005, 332)]
    var = IntervalPlan("both", 32, seg).variances(draws)
    rec = np.array([[0.004, var["pairs"], var["samples"], var["both"], var["jackknife"],
                     np.nan, np.nan, np.nan]])
    plan = IntervalPlan(proc, 32, {d: seg[d] for d in designs(proc)})
    ref = plan.ci(0.004, draws, "tpr_low_all")
    for lo, hi in (rules.one_arm(rec, rule, 32), rules.difference(rec, rec, rec, rule, 32)):
        assert hi[0] - 0.004 == pytest.approx(ref[1] - 0.004, rel=1e-4)
        assert 0.004 - lo[0] == pytest.approx(0.004 - ref[0], rel=1e-4)
    other = IntervalPlan("samples", 32, seg).ci(0.004, draws)
    assert ref[1] != pytest.approx(other[1], rel=1e-4)  # the check can fail


def test_report_quotes_the_matched_rules_studies():
    """The matched reads' coverages report.md quotes are the seed-25/26 studies'
    (bench/results/matched_rules_plan.md), recomputed from their stores, and the rules the
    pipeline runs are the ones adopted there."""
    mr = load_script("bench/matched_rules.py")
    tab25, _ = mr.table(ROOT / "results" / "matched_components_seed25.jsonl")
    tab26, runs = mr.table(ROOT / "results" / "matched_components_seed26.jsonl")
    assert runs == 500
    text = _procedure_text("mixed", 100, 8)
    both = (tab25, tab26)
    cov = lambda tab, read, rule: tab[read][rule]["coverage"]  # noqa: E731
    a = [cov(t, r, "C8") for t in both for r in ("auc_matched", "auc_fit")]
    b = [cov(tab26, r, "C0") for r in ("auc_overlap", "auc_fit_overlap")]
    assert f"{min(a):.3f}-{max(a):.3f} at the common point" in text
    assert f"{b[0]:.3f} / {b[1]:.3f} over their overlap" in text
    assert f"{cov(tab26, 'tpr_low_matched', 'C6'):.3f} at matched utility" in text
    mem = max(cov(t, r, "C8") for t in both for r in mr.CLASSES["C"][0])
    assert f"matched utility or fit (up to {mem:.3f})" in text
    eqm = max(cov(t, r, "C8") for t in both for r in mr.CLASSES["F"][0])
    assert f"at equal budgets (up to {eqm:.3f}; " in text
    eqa = [cov(t, r, "C8") for t in both for r in mr.CLASSES["E"][0]]
    assert f"covers {min(eqa):.3f}-{max(eqa):.3f} under jacksum (above" in text
    eqt = max(cov(t, r, "C6") for t in both for r in mr.CLASSES["G"][0])
    assert f"(up to {eqt:.3f})" in text
    from bnmem.attack.intervals import MIXED_RULES
    from bnmem.attack.intervals import HALVES_FALLBACK
    # the simulated rules quoted here: jacksum at the common point and at equal reads is the
    # fallback of their real-shadow rule (bench/results/real_shadows_seventh_plan.md) off the
    # default recipe or pair count, and the rule of every other AUC figure of those reads
    assert MIXED_RULES[("auc", "overlap")] == "delete4_halves"  # the common point: D4s (the eleventh plan)
    assert MIXED_RULES[("auc", "common")] == "delete4_halves_s"
    assert HALVES_FALLBACK[("auc", "overlap")] == "both"  # where the seed-26 confirmation applies
    assert "(0.990 / 0.995 at 1.53-1.57 times a calibrated width on pools A and B;" in text  # the common point
    assert HALVES_FALLBACK[("auc", "common")] == "jacksum"
    assert MIXED_RULES[("tpr", "common")] == "pairs_t"
    assert MIXED_RULES[("mem", "overlap")] == HALVES_FALLBACK[("mem", "common")] == "jacksum"
    assert MIXED_RULES[("mem", "common")] == "jacksum_s"  # the ninth plan's, on real shadows only
    assert MIXED_RULES[("auc", "equal")] == "delete4_halves" and HALVES_FALLBACK[("auc", "equal")] == "jacksum"
    assert "averaged over a matched criterion's overlap)" in text  # the rule list names the read
    assert "or over an overlap ± 1.96 sd over draws that resample the pairs and the samples together, `both`" in text


def test_the_32_pair_plans_selection_over_four_cells():
    """bench/tpr_rules.select_cells (tpr32_rules_plan.md): over one figure it is the seed-22
    plan's select; over two, a rule must qualify in all four cells, and the narrowest such
    rule wins; with none qualifying, the closest to 0.95 in its worst cell, flagged."""
    rules = _rules()
    tab22 = rules.table(ROOT / "results" / "tpr_components_seed22.jsonl")
    assert rules.select_cells({"tpr_low_all": tab22}) == rules.select(tab22)

    def cell(cov, width, below=0.02, above=0.02):
        return {"coverage": cov, "mean_width": width, "miss_below": below, "miss_above": above}
    good = {r: {"one_arm": cell(0.90, 0.01), "difference": cell(0.90, 0.01)} for r in rules.CANDIDATES}
    vlow = {r: {"one_arm": cell(0.90, 0.01), "difference": cell(0.90, 0.01)} for r in rules.CANDIDATES}
    for r, w in (("C1", 0.03), ("C3", 0.02)):
        good[r] = {"one_arm": cell(0.95, w), "difference": cell(0.95, w)}
        vlow[r] = {"one_arm": cell(0.95, w), "difference": cell(0.95, w)}
    assert rules.select_cells({"a": good, "b": vlow}) == ("C3", True)  # both qualify: narrower
    vlow["C3"]["difference"] = cell(0.95, 0.02, below=0.05)  # one tail misses too often
    assert rules.select_cells({"a": good, "b": vlow}) == ("C1", True)
    vlow["C1"]["one_arm"] = cell(0.932, 0.03)  # outside [0.935, 0.965]: nothing qualifies
    assert rules.select_cells({"a": good, "b": vlow}) == ("C3", False)  # worst cell 0.95 vs 0.932
    assert rules.confirms({"a": good, "b": vlow}, "C1") and not rules.confirms({"a": good, "b": vlow}, "C0")
    assert not rules.confirms({"a": good, "b": vlow}, "C3")  # 0.95, but 5 % of misses below
    # a tie in the fallback goes to the narrower rule
    tie = {r: {"one_arm": cell(0.90, 0.01), "difference": cell(0.90, 0.01)} for r in rules.CANDIDATES}
    tie["C8"] = {"one_arm": cell(0.90, 0.005), "difference": cell(0.90, 0.005)}
    assert rules.select_cells({"a": tie}) == ("C8", False)


def test_the_report_names_the_tpr_rule_its_run_used():
    """report.md's TPR caveat follows the run's recorded rule (membership.json's rules,
    which rules_for sets by the pair count): pairs_t's 32-pair shortfall where it is used,
    the confirmed rule's name where the run had more than 8 pairs and one is set."""
    from bnmem.report.markdown import _tpr_rule_text
    assert _tpr_rule_text("pairs_t").startswith("`pairs_t`, which at 64 shadows (32 pairs) under-covers")
    from bnmem.attack.intervals import TPR_RULE_MANY_PAIRS
    other = _tpr_rule_text(TPR_RULE_MANY_PAIRS)
    assert other.startswith("`both_sqrt`, the rule above 8 pairs") and "tpr32_robust_plan.md" in other
    before = _tpr_rule_text("twoway")  # a run made under the rule before (an archived record)
    assert before.startswith("`twoway`, the rule above 8 pairs") and "tpr32_rules_second_plan.md" in before
    report = " ".join((ROOT / "report.md").read_text().split())
    assert "the procedure of TPR at 1e-3, `pairs_t`, which at 64 shadows" in report  # 8 pairs


def test_the_second_32_pair_confirmation_pools_runs_and_reads_the_fresh_seed():
    """bench/tpr_rules.pooled and confirms_again (tpr32_rules_second_plan.md): two stores'
    runs pool run by run (coverage, misses and width weighted by runs); the decision needs
    every pooled cell in [0.93, 0.97] and no fresh cell's Monte Carlo range wholly outside."""
    from bnmem.attack.coverage import wilson
    rules = _rules()

    def cell(cov, runs=500, width=0.01, below=0.02, above=0.01):
        return {"coverage": cov, "mc_range": wilson(cov, runs), "runs": runs,
                "mean_width": width, "miss_below": below, "miss_above": above}

    def tab(cov, **kw):
        return {r: {"one_arm": cell(cov, **kw), "difference": cell(cov, **kw)}
                for r in rules.CANDIDATES}
    old, fresh = tab(0.972, width=0.02), tab(0.964, runs=250, width=0.01)
    both = rules.pooled([old, fresh])
    c = both["C1"]["one_arm"]
    assert c["runs"] == 750 and c["coverage"] == (486 + 241) / 750
    assert abs(c["mean_width"] - (0.02 * 500 + 0.01 * 250) / 750) < 1e-12
    figs = {"a": fresh, "b": fresh}
    assert rules.confirms_again(figs, {"a": both, "b": both}, "C1")  # pooled 0.969: in
    low = tab(0.926)  # the fresh seed alone below 0.93: refused, though pooled 0.949
    assert rules.pooled([old, low])["C1"]["one_arm"]["coverage"] >= 0.93
    assert not rules.confirms_again({"a": low, "b": fresh},
                                    {"a": rules.pooled([old, low]), "b": both}, "C1")
    assert not rules.confirms_again(figs, {"a": rules.pooled([tab(0.98), tab(0.97)]),
                                           "b": both}, "C1")  # pooled 0.975: out
    tails = rules.pooled([tab(0.95, below=0.045), tab(0.95, below=0.04)])  # pooled 0.0425
    assert not rules.confirms_again(figs, {"a": tails, "b": both}, "C1")
    # the real store, pooled with itself: a shape check only
    store = ROOT / "results" / "tpr32_components_seed29.jsonl"
    t29 = rules.table(store, "tpr_low_all")
    p = rules.pooled([t29, t29])
    assert p["C1"]["one_arm"]["coverage"] == t29["C1"]["one_arm"]["coverage"]
    assert p["C1"]["one_arm"]["runs"] == 1000


def test_the_second_plans_store_checks_refuse_what_it_cannot_pool(tmp_path):
    """tpr_rules.check_store: seed 29's store passes against seed 28's; a run stored twice,
    a store without its meta file, the same store twice and another study's shape are
    each one line; the command line runs the decision on two real stores (28 and 29, a
    shape check: seed 28 selected C1 and decides nothing)."""
    import shutil
    import subprocess
    import sys
    rules = _rules()
    res = ROOT / "results"
    s28, s29 = res / "tpr32_components_seed28.jsonl", res / "tpr32_components_seed29.jsonl"
    rules.check_store(s29, s28)
    rules.check_store(s28)

    def copy(name: str, edit=None, meta_edit=None) -> Path:
        out = tmp_path / f"{name}.jsonl"
        lines = s29.read_text().splitlines()
        out.write_text("\n".join(edit(lines) if edit else lines) + "\n")
        meta = json.loads(s29.with_suffix(".meta.json").read_text())
        out.with_suffix(".meta.json").write_text(json.dumps(meta_edit(meta) if meta_edit else meta))
        return out
    twice = copy("twice", lambda ls: ls + [next(x for x in ls if '"kind": "run"' in x)])
    with pytest.raises(SystemExit, match="501 runs \\(500 distinct indices\\)"):
        rules.check_store(twice)
    bare = copy("bare")
    bare.with_suffix(".meta.json").unlink()
    with pytest.raises(SystemExit, match="no bare.meta.json beside it"):
        rules.check_store(bare)
    with pytest.raises(SystemExit, match="the same store"):
        rules.check_store(s29, s29)
    other = copy("other", meta_edit=lambda m: {**m, "command": m["command"].replace(
        "--n 3200", "--n 2000")})
    with pytest.raises(SystemExit, match="is not .*apart from --seed, --workers, --store"):
        rules.check_store(other, s28)
    moved = copy("moved", meta_edit=lambda m: {**m, "command": m["command"].replace(
        "--workers 1", "--workers 2").replace("--seed 29", "--seed 34")})
    rules.check_store(moved, s28)  # only the free flags differ
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "tpr_rules.py"), str(s29),
                          "--confirm-again", "C1", "--with", str(s28), "--common-truth",
                          str(s28)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "C1 confirms again: " in out.stdout and "1000 runs pooled" in out.stdout
    assert "against the common truth" in out.stdout
    # --confirm runs the store checks first (tpr32_twoway_20draws_plan.md): a store cut short
    # is one line; seed 29's whole store gives the first plan's decision (it did not confirm)
    short = copy("short", lambda ls: ls[:-1])
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "tpr_rules.py"), str(short),
                          "--confirm", "C1"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().endswith("the plan needs 500 runs 0..499, each once, and 1000 truth rows")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "tpr_rules.py"), str(s29),
                          "--confirm", "C1"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip().endswith("C1 confirms: False")


@pytest.mark.slow
def test_todays_code_reproduces_seed_29s_stored_runs():
    """The second plan pools seed 29's store (written at an earlier commit) with a run of
    today's code: its truth rows 0 and 999 and its run 0, recomputed now, equal the stored
    values bit for bit."""
    comp = load_script("bench/bench_tpr_components.py")
    from bnmem.attack.coverage import sample_kinds
    store = ROOT / "results" / "tpr32_components_seed29.jsonl"
    rows = [json.loads(x) for x in store.read_text().splitlines()[1:]]
    truth = {d["i"]: d["value"] for d in rows if d["kind"] == "truth"}
    run0 = next(d["value"] for d in rows if d["kind"] == "run" and d["i"] == 0)
    kind, eff, figs = sample_kinds(3200, 0.1, 0.0), (0.6, 0.3), comp.VLOW_FIGS
    for i in (0, 999):
        got = comp._truth((64, 3200, eff, kind, 29 * 1_000_003 + 500_000 + i, 0.3, figs))
        assert [float(x) for x in got] == truth[i]
    got = comp._run((64, 3200, eff, kind, 100, 29 * 1_000_003, 0.3, figs))
    for k, v in run0.items():
        np.testing.assert_array_equal(np.asarray(got[k], float), np.asarray(v, float), err_msg=k)


def test_spread_reads_the_rules_sd_against_the_points_spread(tmp_path):
    """tpr_rules.spread (tpr32_twoway_20draws_plan.md's figures beside the decision) on a
    store whose truth is known: points N(truth, 0.002^2) and design variances that make
    twoway's variance exactly 0.002^2 (V_p = V_s = s^2 / 2, V_both = s^2) give an SD ratio
    near 1, no run-to-run spread, a floor that never binds and an upper bound covering
    about 97.5 %; V_both raised past 2 V_s makes the floor bind in every run."""
    rules = _rules()
    rng = np.random.default_rng(5)
    s, n, truth = 0.002, 4000, 0.01

    def store(vb: float) -> Path:
        return _tpr_store(tmp_path / f"s{vb}.jsonl", rng, s, truth, [vb] * n)
    sp = rules.spread(store(s * s), "tpr_low_all")
    for cell in ("one_arm", "difference"):
        q = sp[cell]
        assert q["mean_sd_ratio"] == pytest.approx(1.0, abs=0.04)
        assert q["sd_rel_spread"] == pytest.approx(0.0, abs=1e-9) and q["floor_binds"] == 0.0
        assert q["upper_covers"] == pytest.approx(0.975, abs=0.01)
    sp = rules.spread(store(3 * s * s), "tpr_vlow_all")
    assert sp["one_arm"]["floor_binds"] == 1.0
    assert sp["one_arm"]["mean_sd_ratio"] == pytest.approx(np.sqrt(0.5), abs=0.03)


def test_the_reports_twoway_figures_come_from_the_stores():
    """The report's twoway sentences (_tpr_rule_text, _COVERAGE_TEXT): the 20-draw range is
    seed 35's four C1 cells, and the floored-case range is C1's coverage over the runs whose
    floor at V_p binds, lowest and highest cell over seeds 28, 29, 34 and 35 (TPR at 1e-3
    and 1e-4, one arm and paired), each against its store's own truth."""
    from bnmem.report.markdown import _COVERAGE_TEXT, _tpr_rule_text
    rules = _rules()
    res = ROOT / "results"
    s35 = res / "tpr32_components_20draws_seed35.jsonl"
    cells = [rules.table(s35, f)["C1"][k]["coverage"] for f in ("tpr_low_all", "tpr_vlow_all")
             for k in ("one_arm", "difference")]
    twenty = f"{min(cells):.3f}-{max(cells):.3f}"
    floored = []
    for store in [res / f"tpr32_components_seed{s}.jsonl" for s in (28, 29, 34)] + [s35]:
        truth, rec, pairs = rules.load(store)
        for f in ("tpr_low_all", "tpr_vlow_all"):
            for arm in ("a", "d"):
                r = rec[f"{f}_{arm}"]
                binds = 2 * (r[:, 1] + r[:, 2]) - r[:, 3] < r[:, 1]
                lo, hi = rules.one_arm(r, "C1", pairs)  # the difference reads its own record
                hit = (lo <= truth[f"{f}_{arm}"]) & (truth[f"{f}_{arm}"] <= hi)
                floored.append(hit[binds].mean())
    span = f"{min(floored):.2f}-{max(floored):.2f}"
    assert (twenty, span) == ("0.940-0.962", "0.78-0.96")
    text = _tpr_rule_text("twoway")
    assert f"{twenty} from 20 draws" in text and f"({span} over those seeds" in text
    coverage = " ".join(_COVERAGE_TEXT.split())
    assert f"{twenty} at 20 draws" in coverage and f"under-covers, {span}, and no floor" in coverage


def _tpr_store(path: Path, rng, s: float, truth: float, vbs: list[float]) -> Path:
    """A components store whose truth is known: one run per entry of `vbs`, points
    N(truth, s^2), V_p = V_s = s^2 / 2, V_jackknife = s^2 and V_b the entry (s^2: twoway
    exactly s^2, its floor free; above V_p + 2 V_s = 1.5 s^2 the floor binds and C1 reads
    V_p = s^2 / 2 alone)."""
    runs = len(vbs)
    lines = [json.dumps({"study": "x"})]
    for i, vb in enumerate(vbs):
        val = {f"{f}_{arm}": [truth + s * rng.standard_normal(), s * s / 2, s * s / 2, vb, s * s,
                              np.nan, np.nan, np.nan]
               for f in ("tpr_low_all", "tpr_vlow_all") for arm in "abd"}
        lines.append(json.dumps({"kind": "run", "i": i, "value": val}))
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".meta.json").write_text(json.dumps({
        "truth": {f"{f}_{arm}": truth for f in ("tpr_low_all", "tpr_vlow_all") for arm in "abd"},
        "command": "python bench/bench_tpr_components.py --n-models 64", "runs": runs}))
    return path


def _floor_store(path: Path, rng, runs: int, s: float, truth: float, vb_hi: float) -> Path:
    """_tpr_store with the floor free in the first half of the runs (V_b = s^2) and V_b =
    vb_hi in the second."""
    return _tpr_store(path, rng, s, truth, [s * s] * (runs // 2) + [vb_hi] * (runs - runs // 2))


def test_the_floor_plans_rules_where_the_truth_is_known(tmp_path):
    """tpr32_floor_plan.md's figures on stores whose truth is known: where twoway's floor
    binds, C1 reads V_p = s^2 / 2 alone and covers about P(|Z| < 1.96 / sqrt 2) = 0.834;
    C10 (floored at V_p + V_s = s^2) covers about 0.95 there; C11 reads V_b (4 s^2: about
    0.9999); where the floor is free every rule reads twoway = s^2 (0.95). Selection: C1
    fails the floored clause, C10 qualifies, and C11 is wider, so C10 wins; confirmation
    of C1 fails, of C10 passes."""
    rules = _rules()
    rng = np.random.default_rng(11)
    s, truth = 0.002, 0.01
    stores = [_floor_store(tmp_path / f"s{k}.jsonl", rng, 4000, s, truth, 4 * s * s) for k in range(2)]
    sc = rules.floor_scores(stores[0], "tpr_low_all")
    for cell in ("one_arm", "difference"):
        assert sc["C1"][cell]["floored"]["runs"] == 2000
        assert sc["C1"][cell]["floored"]["coverage"] == pytest.approx(0.834, abs=0.025)
        assert sc["C1"][cell]["free"]["runs"] == 2000  # the other half: twoway = s^2
        assert sc["C1"][cell]["free"]["coverage"] == pytest.approx(0.95, abs=0.015)
        assert sc["C10"][cell]["floored"]["coverage"] == pytest.approx(0.95, abs=0.015)
        assert sc["C11"][cell]["floored"]["coverage"] > 0.995
        assert sc["C9"][cell]["floored"]["coverage"] == pytest.approx(0.917, abs=0.02)  # 0.75 s^2
        for r in rules.FLOOR_CANDIDATES + rules.FLOOR_BESIDE:  # the free half: twoway = s^2
            lo, hi = rules.one_arm(rules.load(stores[0])[1]["tpr_low_all_a"][:2000], r, 32)
            assert np.allclose(hi - lo, 2 * rules.Z * s)
    sc12 = rules.floor_scores(stores[0], "tpr_low_all", ("C10", "C12"))  # C12 beside: the same
    assert sc12["C12"] == sc12["C10"]  # here: V_p + V_s = twoway's s^2 where free, s^2 floored
    # they part where twoway lies between V_p and V_p + V_s: C12 keeps it, C10 lifts it
    r = np.array([[0.0, 1.0, 1.0, 3.0, 0.0], [0.0, 1.0, 1.0, 6.0, 0.0]])  # tw = 1 (= V_p); -2
    assert list(rules.variance(r, "C12")) == [1.0, 2.0] and list(rules.variance(r, "C10")) == [2.0, 2.0]
    assert list(rules.variance(r, "C1")) == [1.0, 1.0] and list(rules.variance(r, "C11")) == [1.0, 6.0]
    fig = rules.floor_groups({"g": [stores[0]], "h": [stores[1]]})
    assert fig["floored"]["tpr_low_all"]["C1"]["one_arm"]["runs"] == 4000  # pooled over stores
    # overall C10 covers about (0.95 + 0.95) / 2, C1 about (0.95 + 0.834) / 2 = 0.89
    assert rules.select_floor(fig) == ("C10", True)
    scores = {f: rules.floor_scores(stores[1], f) for f in ("tpr_low_all", "tpr_vlow_all")}
    assert rules.confirms_floor(scores, "C10") and not rules.confirms_floor(scores, "C1")
    assert not rules.confirms_floor(scores, "C11")  # over-covers overall (about 0.975)
    # nothing qualifies where every floored cell under-covers: no rule changes
    tight = [_floor_store(tmp_path / "t.jsonl", rng, 2000, s, truth, 40 * s * s)]
    assert rules.select_floor(rules.floor_groups({"g": tight}, ("C1", "C9"))) == ("", False)


def test_check_study_refuses_a_store_of_another_study(tmp_path):
    """tpr32_heavy_plan.md: --confirm with --expect reads a decision only from the planned
    study's store; its command may differ in --workers and --store alone."""
    rules = _rules()
    planned = ("python bench/bench_tpr_components.py --seed 37 --runs 500 --draws 20 "
               "--noise-df 3 --workers 2 --store results/x.jsonl")
    store = tmp_path / "s.jsonl"
    for cmd, ok in ((planned, True),
                    (planned.replace("--workers 2", "--workers 1").replace("results/x", "/w/y"), True),
                    (planned.replace(" --noise-df 3", ""), False),  # normal noise
                    (planned.replace("--seed 37", "--seed 35"), False),
                    (planned.replace("--draws 20", "--draws 100"), False)):
        store.with_suffix(".meta.json").write_text(json.dumps({"command": cmd}))
        if ok:
            rules.check_study(store, planned)
        else:
            with pytest.raises(SystemExit, match="is not the planned one"):
                rules.check_study(store, planned)


def test_readme_quotes_the_floor_plans_selection():
    """README's floored-case paragraph and the report's sentence (tpr32_floor_plan.md): the
    selection over the four read stores finds none, and every range README quotes is the
    table's: the floored cells of the wide floors (C10, C11), their cells above 0.970, the
    free-case cells of C1, the floored cells of C2 and C9, and C12's worst cell."""
    from bnmem.report.markdown import _COVERAGE_TEXT, _tpr_rule_text
    import functools
    rules = _rules()
    rules.load = functools.lru_cache(None)(rules.load)  # each store read once
    fig = rules.floor_groups({"G100": [ROOT / s for s in rules.FLOOR_G100],
                              "G20": [ROOT / s for s in rules.FLOOR_G20]},
                             rules.FLOOR_CANDIDATES + rules.FLOOR_BESIDE)
    def only(rs):  # the figures of some rules alone
        keep = lambda by: {f: {r: t[r] for r in rs} for f, t in by.items()}  # noqa: E731
        return {"groups": {g: keep(v) for g, v in fig["groups"].items()}, "floored": keep(fig["floored"])}
    assert rules.select_floor(only(rules.FLOOR_CANDIDATES)) == ("", False)

    def cells(part, rs):
        src = fig["floored"].values() if part == "floored" else [
            t for g in fig["groups"].values() for t in g.values()]
        return [t[r][c]["coverage"] for t in src for r in rs for c in ("one_arm", "difference")]
    def rng(v):
        return f"{min(v):.3f}–{max(v):.3f}"
    wide = cells("floored", ("C10", "C11"))
    over = [c for c in cells("groups", ("C10", "C11")) if c > 0.970]
    narrow = cells("floored", ("C2", "C9"))
    text = " ".join((ROOT / "README.md").read_text().split())
    for quoted in (f"({rng(wide)} where it binds)", f"over-cover overall ({rng(over)})",
                   f"stay at {rng(narrow)} where it binds",
                   f"({max(cells('groups', ('C12',))):.3f} in one cell)", "**none qualifies**"):
        assert quoted in text, quoted
    # the free case: C1 where its floor does not bind, per store group (the referee's figures)
    free = []
    for stores in (rules.FLOOR_G100, rules.FLOOR_G20):
        for f in ("tpr_low_all", "tpr_vlow_all"):
            for arm in ("a", "d"):
                hit = n = 0
                for st in stores:
                    truth, rec, pairs = rules.load(ROOT / st)
                    r = rec[f"{f}_{arm}"]
                    lo, hi = rules.one_arm(r, "C1", pairs)
                    ok = ~rules.floor_binds(r)
                    t = truth[f"{f}_{arm}"]
                    hit += int(((lo <= t) & (t <= hi))[ok].sum())
                    n += int(ok.sum())
                free.append(hit / n)
    assert f"already covers {rng(free)}" in text
    assert "tpr32_floor_plan.md" in _tpr_rule_text("twoway") and "tpr32_floor_plan.md" in _COVERAGE_TEXT


def test_readme_and_report_quote_the_heavy_tailed_check():
    """tpr32_heavy_plan.md's outcome as README and the report quote it, recomputed from the
    seed-37 store: C1's four cells (not calibrated), the floored and free runs' ranges, the
    upper bound at 1e-4, C11's cells; the store is the planned study."""
    from bnmem.report.markdown import _COVERAGE_TEXT, _tpr_rule_text
    rules = _rules()
    store = ROOT / "results" / "tpr32_components_heavy_seed37.jsonl"
    rules.check_store(store)
    rules.check_study(store, "python bench/bench_tpr_components.py --seed 37 --runs 500 "
                      "--truth-runs 1000 --n 3200 --n-models 64 --flipped 0.1 --ood 0.0 --vlow "
                      "--draws 20 --noise-df 3 --workers 2 --store x")
    s35 = ROOT / "results" / "tpr32_components_20draws_seed35.jsonl"
    t35 = {f: rules.table(s35, f) for f in ("tpr_low_all", "tpr_vlow_all")}
    truth, rec, pairs = rules.load(store)
    tabs = {f: rules.table(store, f) for f in ("tpr_low_all", "tpr_vlow_all")}
    assert not rules.confirms(tabs, "C1")
    c1 = [tabs[f]["C1"][k]["coverage"] for f in tabs for k in ("one_arm", "difference")]
    split = [x for f in tabs for x in rules.floor_scores(store, f, ("C1",))["C1"].values()]
    floored, free = [x["floored"]["coverage"] for x in split], [x["free"]["coverage"] for x in split]
    r = rec["tpr_vlow_all_a"]
    upper = ((r[:, 0] + rules.Z * np.sqrt(rules.variance(r, "C1"))) >= truth["tpr_vlow_all_a"]).mean()
    c11 = [x for f in ("tpr_low_all", "tpr_vlow_all")
           for x in (rules.floor_scores(store, f, ("C11",))["C11"][k]["all"]["coverage"]
                     for k in ("one_arm", "difference"))]
    drops = [t35[f]["C1"][k]["coverage"] - tabs[f]["C1"][k]["coverage"]
             for f in tabs for k in ("one_arm", "difference")]
    binds = [rules.floor_binds(rec[f"{f}_{arm}"]).mean() for f in tabs for arm in ("a", "d")]
    truth35 = rules.load(s35)[0]
    ratio = [truth35[f"{f}_a"] / truth[f"{f}_a"] for f in tabs]
    c4 = {n: [t[f]["C4"][k]["coverage"] for f in t for k in ("one_arm", "difference")]
          for n, t in (("37", tabs), ("35", t35))}
    s36 = ROOT / "results" / "tpr32_components_20draws_seed36.jsonl"
    c4["36"] = [rules.table(s36, f)["C4"][k]["coverage"] for f in tabs for k in ("one_arm", "difference")]
    c11_below = rules.floor_scores(store, "tpr_vlow_all", ("C11",))["C11"]["one_arm"]["all"]["miss_below"]
    text = " ".join((ROOT / "README.md").read_text().split())
    assert (f"{c1[0]:.3f} / {c1[1]:.3f} one arm / paired at FPR 1e-3, {c1[2]:.3f} / {c1[3]:.3f} "
            f"at 1e-4, each {min(drops):.2f}–{max(drops):.2f} below seed 35's") in text
    assert f"binds in {100 * min(binds):.0f}–{100 * max(binds):.0f} % of those runs" in text
    assert f"lowers the true TPR {ratio[0]:.1f} / {ratio[1]:.1f} times" in text
    assert f"({tabs['tpr_vlow_all']['C1']['one_arm']['miss_below']:.3f} one arm: the upper" in text
    assert f"misses below {c11_below:.3f} at 1e-4 one arm" in text
    assert (f"(C4) covers {min(c4['37']):.3f}–{max(c4['37']):.3f} here and "
            f"{min(c4['35'] + c4['36']):.3f}–{max(c4['35'] + c4['36']):.3f} on seeds 35 and 36") in text
    assert f"which cover {min(floored):.2f}–{max(floored):.2f}" in text
    assert f"the free runs cover {min(free):.2f}–{max(free):.2f}" in text
    assert f"the upper bound holds {upper:.3f} one-sided there" in text
    assert f"(C11) covers {min(c11):.3f}–{max(c11):.3f} there" in text
    normal = rules.floor_groups({"G100": [ROOT / st for st in rules.FLOOR_G100],
                                 "G20": [ROOT / st for st in rules.FLOOR_G20]}, ("C11",))
    worst = max(x["coverage"] for g in normal["groups"].values() for t in g.values()
                for x in t["C11"].values())  # the selection table's cells
    assert f"over-covered under normal noise (up to {worst:.3f})" in text
    span = f"{min(c1):.3f}-{max(c1):.3f}"
    assert f"covers only {span}" in _tpr_rule_text("twoway")
    assert f"it covers {span}" in " ".join(_COVERAGE_TEXT.split())


def test_the_report_marks_intervals_at_twoways_floor():
    """Intervals at twoway's floor (2 (V_p + V_s) - V_b < V_p from the recorded SDs) carry
    the report's mark and its sentence: 32 of the full-scale run's 55 twoway intervals (the
    count README quotes), none in the default run (8 pairs: pairs_t), and only twoway
    records are ever marked."""
    from bnmem.attack.intervals import twoway_floored
    from bnmem.report.cells import FLOORED_MARK, _est
    from bnmem.report.markdown import _floored_text
    rec = {"value": 0.01, "lo": 0.008, "hi": 0.012, "rule": "twoway",
           "sd": {"pairs": 1.0, "samples": 1.0, "both": 1.4}}  # SDs: twoway 4 - 1.96, free
    assert not twoway_floored(rec) and not _est(rec, digits=4).endswith(FLOORED_MARK)
    rec["sd"]["both"] = 1.9  # 2 (1 + 1) - 3.61 = 0.39 < V_p = 1: the floor binds
    assert twoway_floored(rec) and _est(rec, digits=4) == f"0.0100 [0.0080, 0.0120]{FLOORED_MARK}"
    assert not twoway_floored({**rec, "rule": "pairs_t"}) and not twoway_floored({**rec, "sd": {}})
    # the full-scale run under twoway (kept since the rerun under both_sqrt, which has none)
    full = json.loads((ROOT / "results" / "fullscale_6018af7" / "results" / "membership.json").read_text())
    text = _floored_text(full)
    assert "(32 of the run's 55 `twoway` intervals)" in text
    now = json.loads((ROOT / "results" / "fullscale" / "results" / "membership.json").read_text())
    assert _floored_text(now) == "" and FLOORED_MARK not in (ROOT / "results/fullscale/report.md").read_text()
    assert "in 32 of the full-scale run's 55 TPR intervals" in " ".join((ROOT / "README.md").read_text().split())
    default = json.loads((ROOT / "results" / "membership.json").read_text())
    assert _floored_text(default) == "" and FLOORED_MARK not in (ROOT / "report.md").read_text()


def test_matched_effects_give_the_heavy_studys_tpr():
    """tpr32_matched_plan.md's effects: today's code at M3's (0.46, 0.26) and M4's (0.31,
    0.18) effects recomputes the seed-38/39 stores' first and last truth rows (so the
    stores are those effects' studies), and their 1000 truth rows give seed 37's (Student-t
    noise, effects 0.6 / 0.3) true TPR at 1e-3 (M3) and 1e-4 (M4) in both arms within 5 %;
    the store's default effects under normal noise (seed 35's truth) give arm a a TPR 1.6 /
    5.7 times seed 37's, so the match is the effects' doing."""
    comp = load_script("bench/bench_tpr_components.py")
    from bnmem.attack.coverage import sample_kinds
    res = ROOT / "results"
    heavy = json.loads((res / "tpr32_components_heavy_seed37.meta.json").read_text())
    assert "--noise-df 3" in heavy["command"] and "--effects" not in heavy["command"]
    kind = sample_kinds(3200, 0.1, 0.0)
    for name, seed, eff, level in (("matched3_seed38", 38, (0.46, 0.26), "tpr_low_all"),
                                   ("matched4_seed39", 39, (0.31, 0.18), "tpr_vlow_all")):
        store = res / f"tpr32_components_{name}.jsonl"
        meta = json.loads(store.with_suffix(".meta.json").read_text())
        assert f"--effects {eff[0]} {eff[1]}" in meta["command"] and "--noise-df" not in meta["command"]
        rows = {d["i"]: d["value"] for d in map(json.loads, store.read_text().splitlines()[1:])
                if d["kind"] == "truth"}
        for i in (0, 999):
            got = comp._truth((64, 3200, eff, kind, seed * 1_000_003 + 500_000 + i, 0.3, comp.VLOW_FIGS))
            np.testing.assert_allclose(np.asarray(got, float), rows[i], rtol=1e-9, atol=1e-12)
        for arm in "ab":
            assert meta["truth"][f"{level}_{arm}"] == pytest.approx(heavy["truth"][f"{level}_{arm}"], rel=0.05)
    assert comp.EFFECTS == (0.6, 0.3)
    default = json.loads((res / "tpr32_components_20draws_seed35.meta.json").read_text())["truth"]
    assert default["tpr_low_all_a"] / heavy["truth"]["tpr_low_all_a"] == pytest.approx(1.6, abs=0.1)
    assert default["tpr_vlow_all_a"] / heavy["truth"]["tpr_vlow_all_a"] == pytest.approx(5.7, abs=0.4)


def _matched_store(path: Path, rng, floored=(), nonfinite=(), runs: int = 500,
                   truth: dict | None = None, command: str | None = None) -> Path:
    """A components store for tpr32_matched_plan.md's readout whose truth is known, cell by
    cell ((figure, arm) keys): points N(truth, s^2) with s a fifth of the truth; V_p =
    0.3 s^2 and V_s = 1.5 s^2 (so C1, floored at V_p, and C2, at max(V_p, V_s), differ);
    V_b = 2.1 s^2 makes twoway 1.5 s^2 (C1 covers about 0.98), V_b = 4 s^2 in `floored`
    cells makes its floor bind (C1 reads 0.3 s^2: about 0.72; C2 1.5 s^2: about 0.98); a
    nan point in the first run of `nonfinite` cells. 1000 truth rows, `command` in the meta
    (default: not a planned study's). Truth: seed 37's at its level where not given."""
    m = load_script("bench/tpr_matched.py")
    truth = truth or {f"{f}_{arm}": (m.SEED37_TRUTH[f][0] if arm == "a" else
                                     m.SEED37_TRUTH[f][1] if arm == "b" else
                                     m.SEED37_TRUTH[f][0] - m.SEED37_TRUTH[f][1])
                      for f in ("tpr_low_all", "tpr_vlow_all") for arm in "abd"}
    lines = [json.dumps({"study": "x"})]
    for i in range(runs):
        val = {}
        for f in ("tpr_low_all", "tpr_vlow_all"):
            for arm in "abd":
                t = truth[f"{f}_{arm}"]
                sd = t / 5
                point = t + sd * rng.standard_normal()
                if i == 0 and (f, arm) in nonfinite:
                    point = float("nan")
                vb = (4.0 if (f, arm) in floored else 2.1) * sd * sd
                val[f"{f}_{arm}"] = [point, 0.3 * sd * sd, 1.5 * sd * sd, vb, sd * sd,
                                     np.nan, np.nan, 0.0]
        lines.append(json.dumps({"kind": "run", "i": i, "value": val}))
    lines += [json.dumps({"kind": "truth", "i": i, "value": [0.0]}) for i in range(1000)]
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".meta.json").write_text(json.dumps({
        "truth": truth, "runs": runs,
        "command": command or "python bench/bench_tpr_components.py --n-models 64"}))
    return path


def test_the_matched_plans_readout_reads_its_decision_cells(tmp_path):
    """bench/tpr_matched.py (tpr32_matched_plan.md's readout) on stores whose truth is known
    cell by cell: C1's floor bound only in each level's decision cells (arm a and the
    difference at M3's 1e-3 and M4's 1e-4) gives "part or all" at both levels; bound only in
    the difference, at one level only that level; bound only in the cells beside (arm b,
    the other level) gives "does not reproduce" at both. So the levels, the arm, the
    difference cell and the rule (C1, not C2) are each pinned. The word's edges; a nan
    raises."""
    m = load_script("bench/tpr_matched.py")
    rng = np.random.default_rng(23)

    def st(name, floored=(), **kw):
        return _matched_store(tmp_path / f"{name}.jsonl", rng, floored, **kw)
    dec3 = {("tpr_low_all", "a"), ("tpr_low_all", "d")}
    dec4 = {("tpr_vlow_all", "a"), ("tpr_vlow_all", "d")}
    _, words, decs = m.readout({"M3": st("a3", dec3), "M4": st("a4", dec4)}, check=False, baseline=False)
    assert words == {"M3": m.PART, "M4": m.PART}
    assert all(c == pytest.approx(0.72, abs=0.05) for d in decs.values() for c in d)
    side3 = {("tpr_low_all", "b"), ("tpr_vlow_all", "a"), ("tpr_vlow_all", "d")}
    side4 = {("tpr_vlow_all", "b"), ("tpr_low_all", "a"), ("tpr_low_all", "d")}
    text, words, decs = m.readout({"M3": st("b3", side3), "M4": st("b4", side4)}, check=False,
                                  baseline=False)
    assert words == {"M3": m.NOT, "M4": m.NOT}
    assert all(c >= 0.95 for d in decs.values() for c in d)
    assert f"): **{m.NOT}**." in text and "- M3 (tpr_low_all; truth over" in text
    _, words, _ = m.readout({"M3": st("c3"), "M4": st("c4", {("tpr_vlow_all", "d")})},
                            check=False, baseline=False)
    assert words == {"M3": m.NOT, "M4": m.PART}
    assert m.matched_word([0.93, 0.93]) == m.NOT
    assert m.matched_word([0.95, 0.918]) == m.PART
    assert m.matched_word([0.92, 0.95]) == m.SEP
    with pytest.raises(ValueError, match="decision cells: 4"):
        m.matched_word([0.95] * 4)
    with pytest.raises(ValueError, match="not finite"):
        m.matched_word([float("nan"), 0.95])


@pytest.mark.slow
def test_the_matched_plans_readout_checks_its_stores(tmp_path):
    """The readout's refusals (tpr32_matched_plan.md's steps 1-3) on 500-run stores: the
    planned studies (their commands with other --workers and --store) pass the checks, and
    the seed-35 + 36 drops are printed; swapped, the study check stops the readout; a
    truth off seed 37's by more than 10 % gives "not matched" at that level only; a
    non-finite interval in a decision cell gives "no word" at that level, one beside blocks
    nothing and is reported."""
    m = load_script("bench/tpr_matched.py")
    rng = np.random.default_rng(29)

    def cmd(n):
        return m.PLANNED[n].replace("--workers 1 --store x", "--workers 2 --store /w/s.jsonl")
    ok = {n: _matched_store(tmp_path / f"{n}.jsonl", rng, command=cmd(n)) for n in ("M3", "M4")}
    text, words, _ = m.readout(ok)
    assert words == {"M3": m.NOT, "M4": m.NOT}
    assert "| M3 | tpr_low_all | one arm |" in text and " ± " in text
    with pytest.raises(SystemExit, match="not the planned one"):
        m.readout({"M3": ok["M4"], "M4": ok["M3"]})
    truth = json.loads(ok["M3"].with_suffix(".meta.json").read_text())["truth"]
    off = dict(truth, tpr_low_all_b=truth["tpr_low_all_b"] * 1.11)
    _, words, _ = m.readout({"M3": _matched_store(tmp_path / "off.jsonl", rng, truth=off,
                                                  command=cmd("M3")), "M4": ok["M4"]})
    assert words == {"M3": m.UNMATCHED, "M4": m.NOT}
    nf = _matched_store(tmp_path / "nf.jsonl", rng, command=cmd("M4"),
                        nonfinite={("tpr_vlow_all", "d")})
    _, words, _ = m.readout({"M3": ok["M3"], "M4": nf})
    assert words == {"M3": m.NOT, "M4": m.NONFINITE}
    side = _matched_store(tmp_path / "side.jsonl", rng, command=cmd("M4"),
                          nonfinite={("tpr_vlow_all", "b"), ("tpr_low_all", "d")})
    text, words, _ = m.readout({"M3": ok["M3"], "M4": side})
    assert words == {"M3": m.NOT, "M4": m.NOT}
    assert "499 of 500 finite" in text


def test_readme_and_report_quote_the_matched_plans_outcome():
    """tpr32_matched_plan.md's outcome as README and the report quote it, recomputed from
    the seed-38/39 stores (each the planned study) by the plan's readout: the word at both
    levels, C1's decision cells, their drops from the seed-35 + 36 baseline and their
    margins over seed 37 with SEs, arm b's cells, the points' CV and skew against seed 37's,
    the floor's binding rates and the floored and free runs' coverage."""
    from bnmem.report.markdown import _COVERAGE_TEXT, _tpr_rule_text
    m = load_script("bench/tpr_matched.py")
    rules = _rules()
    st = {"M3": ROOT / "results" / "tpr32_components_matched3_seed38.jsonl",
          "M4": ROOT / "results" / "tpr32_components_matched4_seed39.jsonl"}
    _, words, decs = m.readout(st)  # the store and study checks included
    assert words == {"M3": m.NOT, "M4": m.NOT}
    dec = decs["M3"] + decs["M4"]
    seed37 = [*m.SEED37["tpr_low_all"], *m.SEED37["tpr_vlow_all"]]
    drops, ses, margins, mses = [], [], [], []
    for n in ("M3", "M4"):
        f = m.LEVEL[n]
        for k, c in zip("ad", decs[n]):
            b, nb = m._pooled_c1(f, k)
            drops.append(c - b)
            ses.append(np.sqrt(c * (1 - c) / 500 + b * (1 - b) / nb))
    for c, s37 in zip(dec, seed37):
        margins.append(c - s37)
        mses.append(np.sqrt(c * (1 - c) / 500 + s37 * (1 - s37) / 500))
    armb = [m.cells(st["M3"], "tpr_low_all", ("C1",))["C1"]["b"]["coverage"],
            m.cells(st["M4"], "tpr_vlow_all", ("C1",))["C1"]["b"]["coverage"]]
    heavy = ROOT / "results" / "tpr32_components_heavy_seed37.jsonl"
    sh37 = {f: m.shape(heavy, f)["a"] for f in ("tpr_low_all", "tpr_vlow_all")}
    shm = {"tpr_low_all": m.shape(st["M3"], "tpr_low_all")["a"],
           "tpr_vlow_all": m.shape(st["M4"], "tpr_vlow_all")["a"]}
    cvr = [sh37[f][0] / shm[f][0] for f in sh37]
    binds = [m.floor_split(st[n], m.LEVEL[n])[k][0] / 500 for n in ("M3", "M4") for k in "ad"]
    split = [m.floor_split(st[n], m.LEVEL[n])[k] for n in ("M3", "M4") for k in "ad"]
    split37 = [m.floor_split(heavy, f)[k] for f in ("tpr_low_all", "tpr_vlow_all") for k in "ad"]
    _, rec37, _ = rules.load(heavy)
    binds37 = [rules.floor_binds(rec37[f"{f}_{k}"]).mean()
               for f in ("tpr_low_all", "tpr_vlow_all") for k in "ad"]
    sd37 = [rules.spread(heavy, f)[c]["mean_sd_ratio"]
            for f in ("tpr_low_all", "tpr_vlow_all") for c in ("one_arm", "difference")]
    sdm = [rules.spread(st[n], m.LEVEL[n])[c]["mean_sd_ratio"]
           for n in ("M3", "M4") for c in ("one_arm", "difference")]
    ratios = []
    for n in ("M3", "M4"):
        _, rec, _ = rules.load(st[n])
        ratios += [float(np.median(rec[f"{m.LEVEL[n]}_{k}"][:, 3] / (rec[f"{m.LEVEL[n]}_{k}"][:, 1]
                                                                    + rec[f"{m.LEVEL[n]}_{k}"][:, 2])))
                   for k in "ad"]
    low37 = rules.table(heavy, "tpr_low_all")["C1"]
    below = [m.cells(st["M3"], "tpr_low_all", ("C1",))["C1"][k]["miss_below"] for k in "ad"]
    below37 = [low37[c]["miss_below"] for c in ("one_arm", "difference")]
    hits3 = [round(c * 500) for c in decs["M3"]]
    share = [-d / (b - s) for d, b, s in zip(drops[:2], [d - x for d, x in zip(decs["M3"], drops[:2])],
                                             m.SEED37["tpr_low_all"])]
    text = " ".join((ROOT / "README.md").read_text().split())
    assert (f"`twoway` covers {dec[0]:.3f} / {dec[1]:.3f} one arm / paired at 1e-3 and "
            f"{dec[2]:.3f} / {dec[3]:.3f} at 1e-4") in text
    assert (f"(seeds 35 + 36 pooled: −{abs(min(drops)):.3f} to +{max(drops):.3f}, SE "
            f"{min(ses):.3f}–{max(ses):.3f}) and {min(margins):.3f}–{max(margins):.3f} above "
            f"seed 37's (SE {min(mses):.3f}–{max(mses):.3f})") in text
    assert f"both cells are {hits3[0]} of 500 against the threshold's 465" in text and hits3[0] == hits3[1]
    z3 = [x / s for x, s in zip(margins[:2], mses[:2])]
    z4 = [x / s for x, s in zip(margins[2:], mses[2:])]
    assert f"only {min(z3):.1f}–{max(z3):.0f} SE above seed 37's" in text
    assert (f"it is clear ({min(margins[2:]):.3f}–{max(margins[2:]):.3f} above seed 37's, "
            f"{int(min(z4))}–{int(max(z4)) + 1} SE)") in text
    assert f"leave to the level is {min(share):.2f}–{max(share):.2f}" in text
    frac = [se / (b - s) for se, b, s in
            zip(ses[:2], [d - x for d, x in zip(decs["M3"], drops[:2])], m.SEED37["tpr_low_all"])]
    assert f"(each drop's SE, {ses[0]:.3f}, is {min(frac):.2f}–{max(frac):.2f} of the gap)" in text
    assert (f"({below[0]:.3f} / {below[1]:.3f} against {below37[0]:.3f} / {below37[1]:.3f}), so "
            f"the upper bound holds no better there ({1 - below[0]:.3f} / {1 - below[1]:.3f} "
            f"one-sided against {1 - below37[0]:.3f} / {1 - below37[1]:.3f})") in text
    assert f"covers {armb[0]:.3f} at 1e-3 and {armb[1]:.3f} at 1e-4" in text
    assert (f"{min(cvr):.1f}–{max(cvr):.1f} times as variable relative to their mean (CV "
            f"{sh37['tpr_low_all'][0]:.2f} / {sh37['tpr_vlow_all'][0]:.2f} against "
            f"{shm['tpr_low_all'][0]:.2f} / {shm['tpr_vlow_all'][0]:.2f} one arm") in text
    assert (f"more skewed at 1e-4 ({sh37['tpr_vlow_all'][1]:+.2f} against {shm['tpr_vlow_all'][1]:+.2f}) "
            f"though not at 1e-3 ({sh37['tpr_low_all'][1]:+.2f} against {shm['tpr_low_all'][1]:+.2f})") in text
    assert sh37["tpr_low_all"][1] < shm["tpr_low_all"][1]
    assert (f"`twoway`'s SD is {min(sd37):.2f}–{max(sd37):.2f} of the points' SD there against "
            f"{min(sdm):.2f}–{max(sdm):.2f} here") in text
    assert (f"binds in {100 * min(binds37):.0f}–{100 * max(binds37):.0f} % of seed 37's runs "
            f"against {100 * min(binds):.0f}–{100 * max(binds):.0f} % here") in text
    assert (f"(the floored runs cover {min(x[1] for x in split):.2f}–{max(x[1] for x in split):.2f} "
            f"here, {min(x[1] for x in split37):.2f}–{max(x[1] for x in split37):.2f} there)") in text
    assert f"three simulated regimes' ({min(ratios):.2f}–{max(ratios):.2f} in these stores'" in text
    quoted = f"{min(dec):.3f}-{max(dec):.3f}"
    for t in (_COVERAGE_TEXT, _tpr_rule_text("twoway")):
        assert f"under normal noise at that TPR {quoted}" in " ".join(t.split())
        assert "tpr32_matched_plan.md" in t
