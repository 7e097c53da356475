"""The delete-d jackknife of the real-shadow study (bench/results/real_shadows_deleted_plan.md)
where the truth is known: exact for a mean of per-pair terms at every d, and, for a median
(the attack's location), the delete-one jackknife overstates the variance while deleting
half the pairs does not; its rows' layout; and the analysis, fed V_d = V_j, reproduces the
halves' analysis's jackhalves cell to the bit."""
import json
import sys
from itertools import combinations
from math import comb
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import real_shadow_coverage as rsc  # noqa: E402  (bench/real_shadow_coverage.py)
import real_shadow_deleted as rsd  # noqa: E402
import real_shadow_halves as rsh  # noqa: E402


def test_deleted_counts_layout():
    c, seg = rsc.deleted_counts(8, np.random.default_rng(3))
    assert list(seg) == [2, 3, 4] and c.shape == (3 * rsc.DELETED_ROWS, 8)
    for d, (a, b) in seg.items():
        rows = c[a:b]
        assert b - a == rsc.DELETED_ROWS
        assert ((rows == 0).sum(1) == d).all() and set(np.unique(rows)) == {0, 1}
        assert len({tuple(r) for r in rows}) == b - a           # no subset twice
    two = c[slice(*seg[2])]
    assert {tuple(np.flatnonzero(r == 0)) for r in two} == set(combinations(range(8), 2))
    four = c[slice(*seg[4])]
    assert (four[0::2] + four[1::2] == 1).all()                 # complementary splits
    c2, _ = rsc.deleted_counts(8, np.random.default_rng(4))
    assert not np.array_equal(c, c2)                            # d = 3, 4 drawn


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_deleted_variance_is_exact_for_a_mean_of_per_pair_terms(d):
    x = np.random.default_rng(d).standard_normal(8)
    sets = list(combinations(range(8), d))
    reps = np.array([np.delete(x, s).mean() for s in sets])
    assert rsc.deleted_variance(reps, 8, d) == pytest.approx(x.var(ddof=1) / 8, rel=1e-12)
    # a random half of the subsets: unbiased, not exact
    assert len(sets) == comb(8, d)


def test_complementary_splits_read_a_means_variance_without_bias():
    """d = P / 2 takes a sample of complementary splits, both halves each: for a mean of
    per-pair terms every split's two rows give an estimate whose mean over the 35 splits is
    the exact variance (so any sample of splits is unbiased), and all 35 splits give it
    exactly; the simple-random-sampling form read 14 splits 28 / 27 x 69 / 70 high."""
    from bnmem.attack.resample import deleted_rows
    x = np.random.default_rng(12).standard_normal(8)
    truth = x.var(ddof=1) / 8
    firsts = [s for s in combinations(range(8), 4) if 0 in s]
    per_split = [rsc.deleted_variance(np.array([np.delete(x, s).mean(),
                                                np.delete(x, sorted(set(range(8)) - set(s))).mean()]),
                                      8, 4) for s in firsts]
    assert np.mean(per_split) == pytest.approx(truth, rel=1e-12)
    every = [np.delete(x, np.flatnonzero(r == 0)).mean() for r in deleted_rows(8, 4, np.random.default_rng(0), 70)]
    assert rsc.deleted_variance(np.array(every), 8, 4) == pytest.approx(truth, rel=1e-12)
    # 14 splits, as the pipeline draws them: for a mean of per-pair terms the estimate is the
    # mean of its splits' two-row estimates (so its expectation is the truth above), and the
    # old form is 28 / 27 x 69 / 70 of it, for any rows
    vals = np.array([np.delete(x, np.flatnonzero(r == 0)).mean()
                     for r in deleted_rows(8, 4, np.random.default_rng(1))])
    assert vals.size == 28
    per = [rsc.deleted_variance(vals[i:i + 2], 8, 4) for i in range(0, 28, 2)]
    assert rsc.deleted_variance(vals, 8, 4) == pytest.approx(np.mean(per), rel=1e-12)
    old = 69 / 70 * vals.var(ddof=1)
    assert old / rsc.deleted_variance(vals, 8, 4) == pytest.approx(28 / 27 * 69 / 70, rel=1e-12)
    assert rsd.SPLIT_MEAN_OF_STORED == pytest.approx(27 / 28 * 70 / 69, rel=1e-15)


def test_the_analysis_reads_old_stores_v4_in_the_split_mean_form(tmp_path):
    """--v4 split-mean rescales V_4 of a store whose meta has no "v4" (written before the
    split-mean form) and leaves a store written in that form as it is."""
    import shutil
    paths = [ROOT / Path(f"results/real_shadows{x}_seed0.jsonl") for x in ("", "_halves", "_deleted")]
    for p in paths[2:]:
        shutil.copy(p, tmp_path / p.name)
    deleted = tmp_path / paths[2].name
    meta = json.loads(paths[2].with_suffix(".meta.json").read_text())
    assert "v4" not in meta
    deleted.with_suffix(".meta.json").write_text(json.dumps(meta))
    stored = rsd.load(paths[0], paths[1], deleted, 10)
    split = rsd.load(paths[0], paths[1], deleted, 10, "split-mean")
    k = next(iter(stored["dcov"]))
    assert np.allclose(split["dcov"][k][:, 3], stored["dcov"][k][:, 3] * 27 / 28 * 70 / 69,
                       equal_nan=True)
    assert np.array_equal(split["dcov"][k][:, [0, 1, 2, 4]], stored["dcov"][k][:, [0, 1, 2, 4]],
                          equal_nan=True)
    deleted.with_suffix(".meta.json").write_text(json.dumps({**meta, "v4": "split-mean"}))
    again = rsd.load(paths[0], paths[1], deleted, 10, "split-mean")
    assert np.array_equal(again["dcov"][k], stored["dcov"][k], equal_nan=True)


def test_deleted_variance_is_undefined_with_an_undefined_row():
    assert np.isnan(rsc.deleted_variance(np.array([0.1, np.nan, 0.3]), 8, 2))
    assert np.isnan(rsc.deleted_variance(np.array([0.1]), 8, 2))


def test_deleting_half_the_pairs_reads_a_medians_variance_and_deleting_one_overstates_it():
    """The estimator where the truth is known (Efron 1982, ch. 3): the delete-one jackknife
    overstates the variance of a median of 8 values (1.76x in 20 000 runs); the delete-d
    jackknife with d = P / 2 reads it (0.95x). 4 000 runs: Monte Carlo SE about 3 % of each
    mean. (A check of the estimator, not of why the attack's V_j is about 2x: the attack's
    median is over 7 shadows, where deleting one overstates only ~1.1x.)"""
    x = np.random.default_rng(11).standard_normal((4000, 8))
    true = np.median(x, 1).var()
    ratio = {}
    for d in (1, 4):
        sets = list(combinations(range(8), d))
        reps = np.stack([np.median(np.delete(x, s, axis=1), 1) for s in sets], 1)
        ratio[d] = np.mean([rsc.deleted_variance(r, 8, d) for r in reps]) / true
    assert ratio[1] > 1.5
    assert 0.85 < ratio[4] < 1.1


def _fake_deleted(halves: Path, out: Path) -> None:
    """A delete-d store whose every V_d is the halves store's V_j."""
    lines = halves.read_text().splitlines()
    rows = [lines[0]]
    for line in lines[1:]:
        u = json.loads(line)
        u["value"] = {k: v if k == "pairs" else [v[0], v[2], v[2], v[2], v[2]] for k, v in u["value"].items()}
        rows.append(json.dumps(u))
    out.write_text("\n".join(rows) + "\n")


def test_the_analysis_with_v_d_equal_to_v_j_is_the_halves_analysis(tmp_path):
    main, halves = ROOT / "results/real_shadows_seed0.jsonl", ROOT / "results/real_shadows_halves_seed0.jsonl"
    _fake_deleted(halves, tmp_path / "d.jsonl")
    d = rsd.load(main, halves, tmp_path / "d.jsonl", 50)
    for cls in ("A", "C"):
        keys = rsh.class_keys(d, cls)
        comps = {k: rsh.components(d, k) for k in keys}
        for ours, theirs in (("D2", "H"), ("D4t", "Ht")):
            a, b = rsd.cell(d, cls, keys, comps, ours), rsh.cell(d, keys, comps, theirs)
            for f in ("coverage", "min", "width_calibrated", "share", "bound", "free"):
                assert a[f] == b[f], (cls, ours, f)
    # gate (v'): V_h rescaled to B8 changes the cell where V_h's mean is not B8
    keys = rsh.class_keys(d, "C")
    comps = {k: rsh.components(d, k) for k in keys}
    assert rsd.cell(d, "C", keys, comps, "D2", to_b8=True)["coverage"] != rsd.cell(d, "C", keys, comps, "D2")["coverage"]


def test_a_store_whose_pairs_differ_is_refused(tmp_path):
    main, halves = ROOT / "results/real_shadows_seed0.jsonl", ROOT / "results/real_shadows_halves_seed0.jsonl"
    _fake_deleted(halves, tmp_path / "d.jsonl")
    lines = (tmp_path / "d.jsonl").read_text().splitlines()
    u = json.loads(lines[1])
    k = next(k for k in u["value"] if k != "pairs")
    u["value"][k][0] += 0.01
    lines[1] = json.dumps(u)
    (tmp_path / "d.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SystemExit, match="differ"):
        rsd.load(main, halves, tmp_path / "d.jsonl", 50)


def test_selection_takes_the_narrowest_qualifier_and_keeps_todays_when_none():
    good = {"coverage": 0.95, "min": 0.93, "max": 0.97, "free": 0.95, "bound": 0.95, "n_bound": 0,
            "width_calibrated": 1.0, "ts15": {"min": 0.93}, "emp": {"coverage": 0.95},
            "b8": {"coverage": 0.95}}
    wide = {**good, "coverage": 0.99}
    tab = {"A": {"today": "C8", "rules": {"C8": wide, "D2": {**good, "width_calibrated": 1.1},
                                         "D2t": wide, "D3": good, "D3t": wide, "D4": wide,
                                         "D4t": wide}}}
    assert rsd.select(tab, "A")[0] == "D3"
    tab["A"]["rules"]["D3"] = {**good, "b8": {"coverage": 0.92}}   # gate (v') fails
    assert rsd.select(tab, "A")[0] == "D2"
    tab["A"]["rules"]["D2"] = {**good, "min": 0.91}
    assert rsd.select(tab, "A")[0] == "C8"


# the pipeline's delete-d designs and rules (bnmem.attack.intervals / resample)

def test_the_pipelines_deleted_rows_are_the_studys_and_none_at_another_pair_count():
    from bnmem.attack.resample import deleted_rows
    c, seg = rsc.deleted_counts(8, np.random.default_rng(5))
    rng = np.random.default_rng(5)
    for d in (2, 3, 4):
        assert np.array_equal(deleted_rows(8, d, rng), c[slice(*seg[d])])
    assert deleted_rows(16, 4, np.random.default_rng(0)).shape == (0, 16)


def test_draw_designs_lays_out_the_deleted_segments_last():
    from bnmem.attack.resample import draw_designs
    kind = np.zeros(30, int)
    names = ("jackknife", "samples", "halves", "delete4", "delete3")
    counts, weights, seg = draw_designs(kind, 8, 20, np.random.default_rng(2), names)
    assert seg["delete4"] == (49, 77) and seg["delete3"] == (77, 105)
    assert ((counts[49:77] == 0).sum(1) == 4).all() and ((counts[77:] == 0).sum(1) == 3).all()
    assert (weights[49:] == 1).all()
    c0, w0, _ = draw_designs(kind, 8, 20, np.random.default_rng(2), names[:3])
    assert np.array_equal(counts[:49], c0) and np.array_equal(weights[:49], w0)
    c16, _, seg16 = draw_designs(kind, 16, 20, np.random.default_rng(2), names)
    assert seg16["halves"][0] == seg16["delete4"][0] == seg16["delete4"][1] == seg16["delete3"][1]  # empty at 16


def test_the_pipelines_deleted_rules_equal_the_analysis():
    """IntervalPlan's delete4_halves / delete3 give the half-widths the study scores (D4 and
    D3 of bench/real_shadow_deleted.py: V_4 + max(V_h, 0), V_3 alone, 1.96), from rows."""
    from bnmem.attack.intervals import IntervalPlan, designs
    rng = np.random.default_rng(9)
    rows4, rows3 = rng.normal(0, 0.01, 28), rng.normal(0, 0.01, 28)
    v4, v3 = rsc.deleted_variance(rows4, 8, 4), rsc.deleted_variance(rows3, 8, 3)
    seg = {"delete4": (1, 29), "delete3": (29, 57)}
    var = IntervalPlan("delete3", 8, seg).variances(np.concatenate([[0.0], rows4, rows3]))
    assert var["delete4"] == v4 and var["delete3"] == v3
    for vh in (-1e-5, 2e-5):
        lo, hi = IntervalPlan("delete4_halves", 8, {}).ci_from(0.01, {"delete4": v4, "halves": vh})
        assert (hi - lo) / 2 == pytest.approx(1.96 * np.sqrt(v4 + max(vh, 0.0)), rel=1e-12)
    lo, hi = IntervalPlan("delete3", 8, {}).ci_from(0.0, {"delete3": v3})
    assert hi == pytest.approx(1.96 * np.sqrt(v3), rel=1e-12)
    assert designs("delete4_halves") == ("delete4", "halves") and designs("delete3") == ("delete3",)
    rows3[4] = np.nan                                        # a subset's figure undefined
    assert IntervalPlan("delete3", 8, seg).variances(np.concatenate([[0.0], rows4, rows3]))["delete3"] is None


def test_mixed_falls_back_where_a_deleted_rule_cannot_be_read(monkeypatch):
    from bnmem.attack import intervals as I
    monkeypatch.setitem(I.MIXED_RULES, ("auc", "common"), "delete4_halves")
    monkeypatch.setitem(I.HALVES_FALLBACK, ("auc", "common"), "jacksum")
    monkeypatch.setitem(I.MIXED_RULES, ("tpr", "common"), "delete3")
    monkeypatch.setitem(I.HALVES_FALLBACK, ("tpr", "common"), "pairs_t")
    monkeypatch.setattr(I, "DELETED_STUDIED", {**I.DELETED_STUDIED, ("auc", "common"): ("auc_all",),
                                               ("tpr", "common"): ("tpr_low_all",)})
    var = {"jackknife": 4e-4, "samples": 3e-4, "pairs": 2e-4, "halves": 1e-4, "delete4": 2e-4,
           "delete3": 3e-4}
    ok = I.IntervalPlan("mixed", 8, {"halves": (9, 109)})
    assert ok.ci_from(0.0, var, "auc_all@common")[1] == pytest.approx(1.96 * np.sqrt(3e-4))
    assert ok.ci_from(0.0, var, "tpr_low_all@common")[1] == pytest.approx(1.96 * np.sqrt(3e-4))
    jacksum, pairs_t = 1.96 * np.sqrt(7e-4), None
    assert ok.ci_from(0.0, {**var, "delete4": None}, "auc_all@common")[1] == pytest.approx(jacksum)
    assert ok.ci_from(0.0, {**var, "halves": None}, "auc_all@common")[1] == pytest.approx(jacksum)
    assert I.IntervalPlan("mixed", 8, {"halves": (9, 49)}).ci_from(0.0, var, "auc_all@common")[1] \
        == pytest.approx(jacksum)                             # V_h from too few reweightings
    assert I.IntervalPlan("mixed", 16, {"halves": (9, 109)}).ci_from(0.0, var, "auc_all@common")[1] \
        == pytest.approx(jacksum)                             # another pair count
    from scipy import stats
    pairs_t = float(stats.t.ppf(0.975, 7)) * np.sqrt(2e-4)
    assert ok.ci_from(0.0, {**var, "delete3": None}, "tpr_low_all@common")[1] == pytest.approx(pairs_t)
    # the rule each interval records is the one that made it, the fallback included
    assert ok.rule_for("auc_all@common", var) == "delete4_halves"
    assert ok.rule_for("auc_all@common", {**var, "halves": None}) == "jacksum"
    assert ok.rule_for("tpr_low_all@common", {**var, "delete3": None}) == "pairs_t"
    assert I.IntervalPlan("mixed", 8, {"halves": (9, 49)}).rule_for("auc_all@common", var) == "jacksum"
    assert I.IntervalPlan("jackknife", 8, {}).rule_for("auc_all@common", var) == "jackknife"
    assert {"delete4", "delete3", "halves"} <= set(I._mixed_designs())
    with pytest.raises(RuntimeError, match="without a HALVES_FALLBACK"):
        I.check_halves_rules({("auc", "equal"): "delete4_halves"}, {})


def test_the_deleted_rule_reads_only_the_figures_it_was_studied_on():
    """delete4_halves (classes A and E, adopted by bench/results/real_shadows_seventh_plan.md;
    B by real_shadows_eighth_plan.md; A reverted by real_shadows_tenth_plan.md) reads at 8
    pairs all samples' AUC difference averaged over the overlap of matched held-out accuracy
    and of matched fit, and at equal epochs or budgets, only; every other figure of those reads (per
    subset, the identity query, the loss and gap criteria, the within-run read) keeps
    jacksum, or both over the overlap."""
    from bnmem.attack import intervals as I
    assert {I.MIXED_RULES[("auc", r)] for r in ("overlap", "equal")} == {"delete4_halves"}
    # reverted to jacksum by the tenth plan; its Satterthwaite form adopted by the eleventh
    assert I.MIXED_RULES[("auc", "common")] == "delete4_halves_s"
    assert I.HALVES_FALLBACK == {("auc", "common"): "jacksum", ("auc", "equal"): "jacksum",
                                 ("auc", "overlap"): "both",
                                 ("mem", "common"): "jacksum"}  # jacksum_s's (the ninth plan)
    for fig in ("auc_all@equal",):
        assert I.mixed_procedure(fig) == "delete4_halves"
        assert I.mixed_procedure(fig, 32) == I.mixed_procedure(fig, 4) == "jacksum"
    for fig in ("auc_all/heldout@common", "auc_all/fit@common"):
        assert I.mixed_procedure(fig) == "delete4_halves_s"
        assert I.mixed_procedure(fig, 32) == I.mixed_procedure(fig, 4) == "jacksum"
    for fig in ("auc_all/heldout@overlap", "auc_all/fit@overlap"):
        assert I.mixed_procedure(fig) == "delete4_halves"
        assert I.mixed_procedure(fig, 32) == I.mixed_procedure(fig, 4) == "both"
    for fig, want in (("auc_all/loss@common", "jacksum"), ("auc_all/gap@common", "jacksum"),
                      ("auc_clean/heldout@common", "jacksum"), ("auc_all@common", "jacksum"),
                      ("auc_all/loss@overlap", "both"), ("auc_clean/fit@overlap", "both"),
                      ("auc_ood@equal", "jacksum"),
                      ("auc_clean@equal", "jacksum"), ("auc_identity@equal", "jacksum"),
                      ("tpr_low_all/heldout@common", "pairs_t"), ("fz_flipped/heldout@common", "jacksum_s"),
                      ("fz_flipped/loss@common", "jacksum"), ("fz_flipped/heldout@overlap", "jacksum")):
        assert I.mixed_procedure(fig) == want, fig
    assert I.family("in_acc_flipped/fit") == "mem" and I.family("auc_all/loss") == "auc"


def test_fewer_draws_read_the_fallback(monkeypatch):
    """With a real-shadow rule named, a run of fewer than 100 draws (under 50 shared
    reweightings) reads and names the rule it replaced, and one of 100 reads the rule (no
    rule is named today, so this runs with one named: without it the check could not fail)."""
    from bnmem.attack import intervals as I
    from bnmem.report.markdown import _procedure_text
    monkeypatch.setitem(I.MIXED_RULES, ("auc", "common"), "delete4_halves")
    assert I.rules_for(8, 50)[("auc", "common")] == "jacksum" == I.rules_for(8, 99)[("auc", "common")]
    assert I.rules_for(8, 100)[("auc", "common")] == "delete4_halves"
    assert "(`delete4_halves`)" not in _procedure_text("mixed", 50, 8)
    assert "(`delete4_halves`)" in _procedure_text("mixed", 100, 8)


def _pools(v4: str = "stored"):
    out = {}
    for name, seed, n in (("A", 0, 200), ("C", 2, 200), ("B", 1, 100)):
        d = rsd.load(ROOT / f"results/real_shadows_seed{seed}.jsonl",
                     ROOT / f"results/real_shadows_halves_seed{seed}.jsonl",
                     ROOT / f"results/real_shadows_deleted_seed{seed}.jsonl", n, v4)
        out[name] = (d, rsd.table(d))
    return out


@pytest.mark.slow  # the three pools' analysis (about 40 s): the full suite, not the edit loop
def test_readme_quotes_the_deleted_outcome():
    """README's figures for the delete-d study, recomputed from the committed stores by the
    plan's analysis: pool A's selection, the confirmation on pools C and B, and the figures
    the review asked for; the pipeline adopts exactly what was confirmed on both."""
    from bnmem.attack import intervals as I
    pools = _pools()
    flat = " ".join((ROOT / "README.md").read_text().split())
    (da, ta), (dc, tc), (db, tb) = pools["A"], pools["C"], pools["B"]
    chosen = {cls: rsd.select(ta, cls)[0] for cls in ta}
    assert chosen == {"A": "D4", "B": "D4", "C": "C8", "D": "D3", "E": "D4", "F": "C8", "G": "C6"}
    confirmed = {cls for cls, r in chosen.items() if r in rsd.RULES
                 and all(rsd.passes(t[cls]["rules"][r], rsd.BANDS["confirm"])[0] for t in (tc, tb))}
    assert confirmed == {"E"}
    # E: (auc, equal), adopted by this plan, reverted after a fifth pool (pool E) failed its key
    # floor; A: (auc, common), adopted by that later plan (real_shadows_keypooled_plan.md),
    # reverted after a sixth (real_shadows_sixth_plan.md); both adopted after a seventh
    # (real_shadows_seventh_plan.md); the overlap's after an eighth (real_shadows_eighth_plan.md);
    # A's reverted again after a tenth (real_shadows_tenth_plan.md), and its Satterthwaite
    # form adopted after an eleventh (real_shadows_eleventh_plan.md)
    assert {I.MIXED_RULES[("auc", r)] for r in ("equal", "overlap")} == {"delete4_halves"}
    assert I.MIXED_RULES[("auc", "common")] == "delete4_halves_s"
    assert I.MIXED_RULES[("tpr", "common")] == "pairs_t"
    cov = {p: t["E"]["rules"]["D4"]["coverage"] for p, (_, t) in pools.items()}
    assert f"{cov['A']:.3f} / {cov['C']:.3f} / {cov['B']:.3f} on pools A / C / B" in flat
    w = [t["E"]["rules"]["D4"]["width_calibrated"] for _, t in pools.values()]
    assert f"at {min(w):.2f}–{max(w):.2f}× the calibrated width" in flat
    js = [t["E"]["rules"]["C8"] for t in (ta, tb)]
    assert (f"covers {js[0]['coverage']:.3f} / {js[1]['coverage']:.3f} (pools A / B) at "
            f"{min(j['width_calibrated'] for j in js):.2f}–{max(j['width_calibrated'] for j in js):.2f}×") in flat
    for cls, label in (("B", "AUC over the overlap (D4 "), ("A", "AUC at the common point (")):
        c = [t[cls]["rules"]["D4"]["coverage"] for t in (ta, tc, tb)]
        assert f"{label}{c[0]:.3f} / {c[1]:.3f} / {c[2]:.3f}" in flat
    assert f"{tb['B']['rules']['D4']['bound']:.3f} where V_h's floor binds" in flat
    assert f"falls to {tc['A']['rules']['D4']['ts15']['min']:.3f} with T_s × 1.5" in flat
    c = [t["D"]["rules"]["D3"]["coverage"] for t in (ta, tc, tb)]
    assert f"(D3 {c[0]:.3f} / {c[1]:.3f} / {c[2]:.3f}: pairs_t stays)" in flat
    orc = [rsd.oracle(d, cls) for d, _ in pools.values() for cls in "ABE"]
    o = [x["coverage"] for x in orc]
    r = [x["d4_over_truth"] for x in orc]
    assert f"covers only {min(o):.3f}–{max(o):.3f} for the AUC classes" in flat
    assert f"is {min(r):.2f}–{max(r):.2f}× T_p + T_s there" in flat
    oe = [rsd.oracle(d, "E") for d, _ in pools.values()]
    assert (f"({min(x['coverage'] for x in oe):.3f}–{max(x['coverage'] for x in oe):.3f} at equal budget)"
            in flat)
    assert (f"({min(x['d4_over_truth'] for x in oe):.2f}–{max(x['d4_over_truth'] for x in oe):.2f} "
            "at equal budget)") in flat
    mem = [t[cls]["rules"]["D4"]["coverage"] for _, t in pools.values() for cls in "CF"]
    assert f"the same rule covers only {min(mem):.3f}–{max(mem):.3f}" in flat
    v4 = [t[cls]["vd_tp"][4] for _, t in pools.values() for cls in "CF"]
    assert f"V_4 / T_p {min(v4):.2f}–{max(v4):.2f})" in flat
    for key, dd in (("1.81", "j"), ("1.68", 2), ("1.35", 3), ("1.28", 4)):
        v = [t[cls]["vd_tp"][dd] for _, t in pools.values() for cls in "ABE"]
        assert f"{min(v):.2f}–{max(v):.2f} at" in flat and f"{min(v):.2f}" == key
    vm = [t[cls]["vd_tp"][x] for _, t in pools.values() for cls in "CF" for x in (2, 3, 4)]
    assert f"memorization {min(vm):.2f}–{max(vm):.2f} at every d" in flat
    # the pipeline's split-mean V_4: the adopted rule, re-read, still passes on C and B
    split = _pools("split-mean")
    assert all(rsd.passes(split[p][1]["E"]["rules"]["D4"], rsd.BANDS["confirm"])[0] for p in "CB")
    cs = {p: t["E"]["rules"]["D4"]["coverage"] for p, (_, t) in split.items()}
    ws = [t["E"]["rules"]["D4"]["width_calibrated"] for _, t in split.values()]
    assert (f"*split-mean*: {cs['A']:.3f} / {cs['C']:.3f} / {cs['B']:.3f} at "
            f"{min(ws):.2f}–{max(ws):.2f}×") in flat
    from bnmem.report.markdown import _procedure_text
    text = " ".join(_procedure_text("mixed", 100, 8).split())
    assert (f"jacksum covers it {js[0]['coverage']:.3f} / {js[1]['coverage']:.3f} (two pools of 128 "
            "pairs") in text
    # since the seventh pool (real_shadows_seventh_plan.md) the rule list names it at 8 pairs,
    # not at another count (its fallback there)
    assert I.rules_for(8, 100)[("auc", "equal")] == "delete4_halves"  # the common point: D4s (eleventh plan)
    assert I.rules_for(8, 100)[("auc", "common")] == "delete4_halves_s"
    assert I.rules_for(8, 99)[("auc", "common")] == I.rules_for(32, 100)[("auc", "common")] == "jacksum"
    assert "(`delete4_halves`)" in text and "(`delete4_halves`)" not in _procedure_text("mixed", 100, 32)
    # the simulation check (reported): the equal-epoch generator, seed 32
    import json
    sim = json.loads((ROOT / "results/coverage_deleted_seed32.json").read_text())["table"]
    d4, js32 = sim["delete4_halves"]["auc_all_delta"], sim["jacksum"]["auc_all_delta"]
    assert d4["runs"] == js32["runs"] == 500
    assert (f"equal epochs {d4['coverage']:.3f}, where jacksum covers {js32['coverage']:.3f}") in flat
    # re-run on the same runs with V_4 in the split-mean form: the same runs (jacksum equal)
    sm = json.loads((ROOT / "results/coverage_deleted_splitmean_seed32.json").read_text())["table"]
    d4s, jss = sm["delete4_halves"]["auc_all_delta"], sm["jacksum"]["auc_all_delta"]
    assert jss == js32 and d4s["runs"] == 500 and d4s["mean_width"] < d4["mean_width"]
    assert (f"split-mean form, {d4s['coverage']:.3f} with intervals "
            f"{100 * (1 - d4s['mean_width'] / d4['mean_width']):.1f} % narrower") in flat
    # the report says which figures take the rule, and from which plans (the seventh pool; the
    # tenth took the common point back to jacksum, the eleventh to delete4_halves_s)
    assert ("averaged over the overlap of matched held-out accuracy and of matched fit and at equal "
            "epochs or budgets take `delete4_halves`") in text and "real_shadows_seventh_plan.md" in text
    assert ("At the common point of matched held-out accuracy and fit the difference reads "
            "`delete4_halves_s`") in text


@pytest.mark.slow  # the stage's bootstrap with 100 draws (about 15 s)
def test_the_stage_draws_the_delete4_rows_where_its_rule_is_read():
    """The attack stage's bootstrap at 8 pairs under today's rules (classes A and E on
    delete4_halves since bench/results/real_shadows_seventh_plan.md): with 100 draws on the
    default recipe it draws the delete-4 and halves rows and records delete4_halves for AUC at
    equal epochs (delete4_halves_s at the common point, the eleventh plan's), where all
    samples' AUC difference is 1.96 sqrt(V_4 + max(V_h, 0)) and the clean samples' jacksum's;
    with 20 draws or another
    recipe neither row is drawn and the fallback, jacksum, is recorded and read; a comparison
    with an arm outside the real shadows' (GroupNorm) reads jacksum from the same rows."""
    from bnmem.attack.stage import _resampled
    from bnmem.attack.intervals import variance_from_sd
    from bnmem.core.config import config_from_dict
    from bnmem.core.keep import keep_matrix
    rng = np.random.default_rng(21)
    m, n = 16, 600
    kind = np.where(np.arange(n) < 60, 1, 0).astype(np.int8)
    keep = keep_matrix(m, n, 0)
    for draws, rule, arch, other in ((100, "delete4_halves", "lenet", "batchnorm"),
                                     (20, "jacksum", "lenet", "batchnorm"),
                                     (100, "jacksum", "resnet", "batchnorm"),  # another recipe
                                     (100, "delete4_halves", "lenet", "groupnorm")):  # another arm
        cfg = config_from_dict({"arms": ["none", other], "pool_size": n, "arch": arch,
                                "shadow": {"n_models": m, "budgets": [], "workers": 1},
                                "attack": {"model_bootstrap": draws}})
        data = {}
        for j, arm in enumerate(cfg.arms):
            phi = rng.normal(size=(m, n, 1)) + (0.5 + 0.3 * j) * keep[..., None]
            data[arm] = {"phi": phi, "keep": keep, "correct": phi[..., 0] > 0.3,
                         "model_ids": np.arange(m), "epoch_phi": None, "epoch_correct": None,
                         "loss": rng.random((m, n)), "budgets": []}
        mem = _resampled(cfg, data, kind, "lira_online_fixed")
        # the common point reads delete4_halves_s since the eleventh plan, its fallback jacksum
        common = "delete4_halves_s" if rule == "delete4_halves" else "jacksum"
        assert mem["rules"]["auc@common"] == common and mem["rules"]["auc@equal"] == rule
        # rows no rule reads are not drawn: another recipe, or too few draws for V_h
        assert ("delete4" in mem["segments"]) == ("halves" in mem["segments"]) \
            == (rule == "delete4_halves")
        (eq,) = (c["equal_epochs"] for c in mem["compare"].values())
        for f in ("auc_all", "auc_clean"):
            v = {k: variance_from_sd(x) for k, x in eq[f]["sd"].items()}
            if f == "auc_all" and rule == "delete4_halves" and other == "batchnorm":
                assert eq[f]["rule"] == "delete4_halves"
                want = v["delete4"] + max(v["halves"], 0.0)
            else:
                assert eq[f]["rule"] == "jacksum"
                want = v["jackknife"] + v["samples"]
            assert eq[f]["hi"] - eq[f]["value"] == pytest.approx(1.96 * np.sqrt(want))


def test_the_default_runs_auc_reads_the_delete4_rule():
    """On the committed default run (results/membership.json, dvc repro of this code): every
    comparison's all-sample AUC difference averaged over the overlap of matched held-out
    accuracy and of matched fit, and at each equal budget, is 1.96 sqrt(V_4 + max(V_h, 0))
    from its recorded SDs and records delete4_halves; at the common point (delete4_halves_s
    since bench/results/real_shadows_eleventh_plan.md) it is t_nu sqrt(V_4 + max(V_h, 0)),
    nu = (V_4 + V_h+)² / (V_4² / 7), and records that rule and nu; the loss and gap criteria
    and the clean samples' AUC read jacksum, or over the overlap both."""
    import json

    from scipy import stats

    from bnmem.attack.intervals import variance_from_sd
    m = json.loads((ROOT / "results/membership.json").read_text())
    assert m["rules"]["auc@equal"] == m["rules"]["auc@overlap"] == "delete4_halves"
    assert m["rules"]["auc@common"] == "delete4_halves_s"
    assert "delete4" in m["segments"] and "halves" in m["segments"]
    n = n_eq = n_ov = 0
    for comp, x in m["frontier"]["compare"].items():
        for crit, c in x["criteria"].items():
            for f, fig in c["figures"].items():
                if not f.startswith("auc"):
                    continue
                at = fig["at_common"]
                if at["value"] is None or at["hi"] is None:
                    continue
                v = {k: variance_from_sd(s) for k, s in at["sd"].items()}
                if f == "auc_all" and crit in ("heldout", "fit"):
                    assert at["rule"] == "delete4_halves_s", (comp, crit)
                    want = v["delete4"] + max(v["halves"], 0.0)
                    nu = want ** 2 / (v["delete4"] ** 2 / 7)
                    assert at["df"] == pytest.approx(nu, rel=1e-9)
                    q = float(stats.t.ppf(0.975, nu))
                    n += 1
                else:
                    assert at["rule"] == "jacksum" and at["df"] is None, (comp, crit, f)
                    want, q = v["jackknife"] + v["samples"], 1.96
                assert at["hi"] - at["value"] == pytest.approx(q * np.sqrt(want), rel=1e-9)
                ov = fig["overlap"]
                if ov.get("hi") is not None:  # the gap criterion has no overlap
                    v = {k: variance_from_sd(s) for k, s in ov["sd"].items()}
                    if f == "auc_all" and crit in ("heldout", "fit"):
                        assert ov["rule"] == "delete4_halves", (comp, crit)
                        want = v["delete4"] + max(v["halves"], 0.0)
                        n_ov += 1
                    else:
                        assert ov["rule"] == "both", (comp, crit, f)
                        want = v["both"]
                    assert ov["hi"] - ov["value"] == pytest.approx(1.96 * np.sqrt(want), rel=1e-9)
        for b in x["equal_budget"]:
            a = b["auc_all"]
            v = {k: variance_from_sd(s) for k, s in a["sd"].items()}
            assert a["rule"] == "delete4_halves"
            assert a["hi"] - a["value"] == pytest.approx(1.96 * np.sqrt(v["delete4"] + max(v["halves"], 0.0)),
                                                        rel=1e-9)
            n_eq += 1
    assert n == n_ov == 2 * len(m["frontier"]["compare"]) and n_eq >= 4 * len(m["frontier"]["compare"])


@pytest.mark.slow  # loads pool B's stores (about 10 s)
def test_pooled_cells_are_the_pools_cells_concatenated():
    """bench/real_shadow_pooled.py: one pool pooled alone is that pool's cell; a pool pooled
    with itself has the same coverage and width (each per-subset record twice)."""
    import real_shadow_pooled as rsp
    d = rsp.load_pool(1, 100)
    keys = rsh.class_keys(d, "A")
    comps = {k: rsh.components(d, k) for k in keys}
    for rule in ("D4", "D3t"):
        one = rsd.cell(d, "A", keys, comps, rule)
        alone, twice = rsp.cell_pooled([d], "A", rule), rsp.cell_pooled([d, d], "A", rule)
        for f in ("coverage", "min", "max", "width_calibrated", "bound", "free", "undefined"):
            assert alone[f] == pytest.approx(one[f], rel=1e-12) == twice[f], (rule, f)
        assert twice["n_bound"] == 2 * one["n_bound"]
    with pytest.raises(SystemExit, match="different keys"):
        rsp.cell_pooled([d, {**d, "hcov": {k: v for k, v in d["hcov"].items() if k != keys[0]}}],
                        "A", "D4")


@pytest.mark.slow  # loads pool D's stores (about 10 s)
def test_readme_quotes_the_fresh_pools_retest():
    """README's figures for the rule in use on pool D (bench/results/real_shadows_pooled_plan.md),
    recomputed from the committed stores: it passes the confirmation gates, so it stays."""
    import real_shadow_pooled as rsp
    from bnmem.attack import intervals as I
    d = rsp.load_pool(3, 200)
    t = rsd.table(d)
    c = t["E"]["rules"]["D4"]
    # it stayed after pool D; a fifth pool reverted it (real_shadows_keypooled_plan.md), a
    # seventh brought it back (real_shadows_seventh_plan.md)
    assert rsd.passes(c, rsd.BANDS["confirm"])[0] and I.MIXED_RULES[("auc", "equal")] == "delete4_halves"
    flat = " ".join((ROOT / "README.md").read_text().split())
    assert (f"**{c['coverage']:.3f}** (lowest key {c['min']:.3f}) at {c['width_calibrated']:.2f}× "
            "the calibrated width") in flat
    o = rsd.oracle(d, "E")  # the offsetting errors, on pool D
    assert (f"an interval of the true width covers {o['coverage']:.3f} and V_4 + max(V_h, 0) is "
            f"{o['d4_over_truth']:.2f}× T_p + T_s") in flat
    # the overlap's D4 passes on pool D; README: it failed pool B alone
    assert rsd.passes(t["B"]["rules"]["D4"], rsd.BANDS["confirm"])[0]
    assert (f"failing pool B alone (0.972 where V_h's floor binds; "
            f"{t['B']['rules']['D4']['coverage']:.3f} on pool D)") in flat
    v4 = [t[cls]["vd_tp"][4] for cls in "ABE"]
    vj = [t[cls]["vd_tp"]["j"] for cls in "ABE"]
    assert (f"V_4 / T_p for the AUC classes is {min(v4):.2f}–{max(v4):.2f} and the delete-one "
            f"jackknife's {min(vj):.2f}–{max(vj):.2f}") in flat


@pytest.mark.slow  # the four pools' tables and the pooled selection (about 40 s)
def test_the_pooled_plans_decisions_follow_its_amendment():
    """bench/real_shadow_pooled.py regenerates the committed table byte for byte, and decides
    as the amended plan says: a rule only if it passes on every pool (none of A-D does),
    class E's D4 kept because it passes on pool D, reverted to jacksum were it to fail."""
    import copy
    import real_shadow_pooled as rsp
    loaded = {name: rsp.load_pool(seed, n) for name, seed, n in rsp.SELECTION}
    sel = rsp.table_pooled(list(loaded.values()))
    dd = rsp.load_pool(*rsp.CONFIRMATION[1:])
    per = {name: rsd.table(d) for name, d in loaded.items()}
    per["D"] = rsd.table(dd)
    dec = rsp.decide(sel, per, rsp.CONFIRMATION[2])
    assert {c: x["selected"] for c, x in dec.items()} == {
        "A": "D4", "B": "D4", "C": "D3t", "D": "D3", "E": "D4", "F": "C8", "G": "C6"}
    assert all(dec[c]["action"] == "today's rule stays" for c in "ABCDFG")
    assert dec["E"]["action"].startswith("D4 (in use) stays")
    # B fails on pool B alone: pool D alone (the plan as first written) would have adopted it
    assert [p for p, (ok, _) in dec["B"]["checks"].items() if not ok] == ["B"]
    assert f"{per['B']['B']['rules']['D4']['bound']:.3f} where V_h's floor binds" == "0.972 where V_h's floor binds"
    text = rsp.markdown(sel, per["D"], dd, dec, rsp.CONFIRMATION[2]) + "\n"
    assert text == (ROOT / "bench/results/real_shadows_pooled.md").read_text()
    worse = copy.deepcopy(per)
    worse["D"]["E"]["rules"]["D4"]["coverage"] = 0.92
    assert "reverts to jacksum" in rsp.decide(sel, worse, 200)["E"]["action"]
    assert "nothing decided" in rsp.decide(sel, per, 150)["E"]["action"]


@pytest.mark.slow  # loads pool M's stores (about 10 s)
def test_the_mnist_pool_leaves_the_recipe_gate_as_the_plan_fixed():
    """bench/results/real_shadows_mnist_plan.md: class E's D4 on a pool of another dataset
    (MNIST) misses one confirmation gate (where V_h's floor is free, above 0.97), so the
    pipeline keeps the rule to Fashion-MNIST + LeNet; the table regenerates byte for byte
    from the stores and README quotes it."""
    from bnmem.attack import intervals as I
    import real_shadow_halves as rsh
    d = rsd.load(ROOT / "results/real_shadows_mnist_seed5.jsonl",
                 ROOT / "results/real_shadows_mnist_halves_seed5.jsonl",
                 ROOT / "results/real_shadows_mnist_deleted_seed5.jsonl", 200, "split-mean")
    t = rsd.table(d)
    c = t["E"]["rules"]["D4"]
    ok, why = rsd.passes(c, rsd.BANDS["confirm"])
    assert not ok and why == f"where the floor is free {c['free']:.3f}" and c["free"] > 0.97
    assert not I.real_shadow_recipe("mnist", "lenet") and I.real_shadow_recipe("fashion_mnist", "lenet")
    conf = rsh.confirmations("E=D4", lambda cl, r: rsd.passes(t[cl]["rules"][r], rsd.BANDS["confirm"]))
    title = ("Real shadows on MNIST (pool M, data seed 5): the delete-d rules; the rule in use "
             "(class E's D4) confirmed or not (plan: real_shadows_mnist_plan.md)")
    assert rsd.markdown(t, d, title, None, conf) + "\n" == (
        ROOT / "bench/results/real_shadows_mnist.md").read_text()
    flat = " ".join((ROOT / "README.md").read_text().split())
    assert (f"covers {c['coverage']:.3f} [{c['range'][0]:.3f}, {c['range'][1]:.3f}] (lowest key "
            f"{c['min']:.3f}) at {c['width_calibrated']:.2f}× the calibrated width, but where "
            f"V_h's floor is free it covers {c['free']:.5f}") in flat
    vj = [t[cls]["vd_tp"]["j"] for cls in "ABE"]
    assert f"V_j / T_p {min(vj):.2f}–{max(vj):.2f} for the AUC classes" in flat
    assert f"but memorization at matched utility or fit {t['C']['vd_tp']['j']:.2f}" in flat
    assert f"D4's variance is {rsd.oracle(d, 'E')['d4_over_truth']:.2f}× the truth's for class E" in flat
    # the miss is inside the Monte Carlo noise; pool D passed the same gate by as little
    mc = rsd.free_resampled(d, "E", "D4")
    assert mc["point"] == pytest.approx(c["free"], abs=1e-12)
    assert (f"SD {mc['sd']:.4f} over resampled subsets, above 0.97 in {100 * mc['above']:.0f} % "
            "of 2 000 resamplings") in flat
    import real_shadow_pooled as rsp
    mcd = rsd.free_resampled(rsp.load_pool(3, 200), "E", "D4")
    assert f"pool D passed the same gate at {mcd['point']:.3f} (above 0.97 in {100 * mcd['above']:.0f} %)" in flat
    cs = [t["C"]["rules"][r]["coverage"] for r in rsd.RULES]
    assert f"under-covers with every delete-d rule ({min(cs):.3f}–{max(cs):.3f})" in flat
    a4 = t["A"]["rules"]["D4"]
    assert f"D4 covers {a4['coverage']:.3f} with its lowest key {a4['min']:.3f}" in flat


@pytest.mark.slow  # loads pool M's main store with coverage subsets (about 15 s)
def test_the_rules_an_mnist_run_uses_on_pool_m():
    """Reported after pool M's outcome (decides nothing): today's rules beside the delete-d
    ones on its first 100 subsets; the table regenerates from the stores, README quotes it."""
    t, text = rsd.afterwards("real_shadows_mnist_", 5, "Real shadows on MNIST (pool M): today's "
                             "rules beside the delete-d ones, first 100 subsets (measured after "
                             "the plan's outcome; decides nothing)")
    assert text == (ROOT / "bench/results/real_shadows_mnist_today.md").read_text()
    flat = " ".join((ROOT / "README.md").read_text().split())
    cov = {c: t[c]["rules"][t[c]["today"]]["coverage"] for c in "ABCDEFG"}
    e = t["E"]["rules"]
    assert (f"the rules an MNIST run uses cover {cov['E']:.3f} for AUC at equal budgets (jacksum, "
            f"{e[t['E']['today']]['width_calibrated']:.2f}× the calibrated width, where D4 covers "
            f"{e['D4']['coverage']:.3f} at {e['D4']['width_calibrated']:.2f}×), {cov['A']:.3f} at "
            f"the common point (jacksum), {cov['B']:.3f} over the overlap (`both`), "
            f"{cov['C']:.3f} and {cov['F']:.3f} for memorization at matched utility and at equal "
            f"budgets (jacksum), {cov['D']:.3f} and {cov['G']:.3f} for TPR at matched utility and "
            f"at equal budgets (`pairs_t`; lowest key at matched utility "
            f"{t['D']['rules'][t['D']['today']]['min']:.3f})") in flat
