"""bnmem.attack.anova: the samples' part without the interaction, checked where the truth is
known (bench/results/real_shadows_anova_plan.md)."""
import numpy as np
import pytest

from bnmem.attack import anova
from bnmem.attack.roc import bootstrap_weights


def _table(rng, p, kind, sa, sb, se):
    n = kind.size
    return (rng.normal(0, sa, (p, 1)) + rng.normal(0, sb, (1, n)) + rng.normal(0, se, (p, n))
            + kind[None] * 0.3)


def test_components_unbiased_on_a_two_way_table():
    """E[B] is the samples' part (n_k - 1) P^2 sb^2 summed over strata and E[I] the
    interaction (n_k - 1) P se^2, within 3 %; a wrong residual (no P / (P - 1)) or a V_S that
    kept the interaction would miss by far more."""
    rng = np.random.default_rng(3)
    p, kind = 8, np.repeat([0, 1, 2], [300, 60, 20])
    sa, sb, se = 0.5, 0.2, 0.6
    bs, its = [], []
    for _ in range(3000):
        r = anova.samples_part(_table(rng, p, kind, sa, sb, se), kind)
        bs.append(r["b"])
        its.append(r["interaction"])
    df = sum(np.sum(kind == k) - 1 for k in (0, 1, 2))
    assert np.mean(bs) == pytest.approx(df * p * p * sb ** 2, rel=0.03)
    assert np.mean(its) == pytest.approx(df * p * se ** 2, rel=0.03)


def test_each_kinds_part_is_unbiased_with_unequal_variances():
    """Per kind k, b_k (samples_part's strata, the Satterthwaite df's input) is unbiased for
    (n_k - 1) P^2 sb_k^2 when the kinds' sample and interaction variances differ, and the
    interaction is heteroscedastic within a kind (per-sample scale): within 4 %."""
    rng = np.random.default_rng(8)
    p, kind = 8, np.repeat([0, 1, 2], [200, 60, 20])
    sb, se = np.array([0.1, 0.4, 0.8]), np.array([0.3, 0.9, 1.5])
    parts = {0: [], 1: [], 2: []}
    for _ in range(4000):
        scale = rng.uniform(0.5, 1.5, kind.size)
        u = (rng.normal(0, 0.5, (p, 1)) + rng.normal(0, sb[kind])[None]
             + rng.normal(0, 1, (p, kind.size)) * (se[kind] * scale)[None])
        for k, (b, n) in anova.samples_part(u, kind)["strata"].items():
            parts[k].append(b)
    for k in (0, 1, 2):
        n = int(np.sum(kind == k))
        assert np.mean(parts[k]) == pytest.approx((n - 1) * p * p * sb[k] ** 2, rel=0.04)


def test_v_s_is_the_stratified_bootstrap_variance():
    """V_S equals the variance of the read's sum under the attack stage's stratified
    bootstrap of samples (20 000 draws: within 3 %)."""
    rng = np.random.default_rng(4)
    kind = np.repeat([0, 1, 2], [200, 40, 10])
    u = _table(rng, 8, kind, 0.3, 0.4, 0.5)
    w = bootstrap_weights(kind, 20000, np.random.default_rng(5))
    sums = w @ u.sum(axis=0)
    assert anova.samples_part(u, kind)["v_s"] == pytest.approx(sums.var(), rel=0.03)


def test_pair_cells_and_a_linear_read():
    """The cells of complementary pairs give FZ memorization and accuracies as the attack
    stage computes them (means over models), and linear_cells sums to the linear read."""
    rng = np.random.default_rng(6)
    p, n = 4, 30
    first = rng.random((p, n)) < 0.5
    keep = np.empty((2 * p, n), bool)
    keep[0::2], keep[1::2] = first, ~first
    correct = rng.random((2 * p, n)) < 0.7
    c_in, c_out = anova.pair_cells(correct, keep)
    fz = (correct & keep).sum(0) / p - (correct & ~keep).sum(0) / p
    assert np.allclose((c_in - c_out).mean(0), fz)
    mask = np.arange(n) < 20
    acc_out = (correct & ~keep)[:, mask].sum() / (p * mask.sum())
    u = anova.linear_cells([(2.0, c_in - c_out, ~mask), (-1.0, c_out, mask)])
    assert u.sum() == pytest.approx(2.0 * fz[~mask].mean() - acc_out)
    with pytest.raises(ValueError, match="complementary"):
        anova.pair_cells(correct, np.ones_like(keep))


def test_gradient_of_an_interpolation():
    f = lambda x: x[0] * 0.25 + x[1] * 0.75 - x[2]  # noqa: E731
    assert np.allclose(anova.gradient(f, np.array([0.3, 0.5, 0.1])), [0.25, 0.75, -1.0], atol=1e-7)


def test_satterthwaite_df():
    """One part alone gives its own df; equal parts on 7 and 99 df give their harmonic mix."""
    assert anova.satterthwaite_df(2.0, 2.0, {0: (-1.0, 100)}, 8) == pytest.approx(7.0)
    assert anova.satterthwaite_df(2.0, 1.0, {0: (1.0, 100)}, 8) == pytest.approx(4 / (1 / 7 + 1 / 99))


def test_reads_from_cells_equal_the_production_path():
    """Every memorization read computed from the cells (read_terms' point) equals the attack
    stage's own (arm_draw per endpoint, then draw_compare), on a simulated run; and the
    linearization's sum moves with the read under a small reweighting of the samples."""
    from bnmem.attack.coverage import sample_kinds
    from bnmem.attack.coverage_matched import endpoint_draws, simulate
    from bnmem.attack.frontier import draw_compare
    kind = sample_kinds(400, 0.1, 0.05)
    phi, keep = simulate(16, 400, kind, 7, arm_rho=0.3, end_rho=0.3)
    ends = endpoint_draws(phi, keep, kind, np.ones((1, 8), np.int64), np.ones((1, 400)))
    ea, eb = ends[0][0], ends[1][0]
    cells = [[anova.endpoint_cells(phi[j, k, ..., 0] > 0, keep, kind) for k in range(phi.shape[1])]
             for j in range(2)]
    n = 0
    for fig in ("fz_flipped", "fz_ood"):
        for k in range(phi.shape[1]):
            point, _ = anova.read_terms(cells[0], cells[1], fig, budget=k)
            assert point == pytest.approx(ea[k][fig] - eb[k][fig], abs=1e-12)
            n += 1
        for crit in ("heldout", "fit"):
            ref = draw_compare(ea, eb, crit)
            for key in (fig, f"{fig}_overlap"):
                point, terms = anova.read_terms(cells[0], cells[1], fig, crit, key)
                assert point == pytest.approx(ref[key], abs=1e-12)
                n += 1
    assert n == 14
    # the linearization: a read under sample weights 1 + eps x w moves by eps x sum_s w_s z_s
    point, terms = anova.read_terms(cells[0], cells[1], "fz_flipped", "heldout", "fz_flipped")
    u = anova.linear_cells(terms)
    w = np.random.default_rng(1).normal(size=400)
    eps = 1e-6
    sw = 1 + eps * w
    ends_w = endpoint_draws(phi, keep, kind, np.ones((1, 8), np.int64), sw[None])
    moved = draw_compare(ends_w[0][0], ends_w[1][0], "heldout")["fz_flipped"]
    # a reweighted mean over stratum k is sum w_s x / sum w_s: the linear term centres w per stratum
    wc = w.copy()
    for k in np.unique(kind):
        wc[kind == k] -= w[kind == k].mean()
    assert (moved - point) / eps == pytest.approx(float(wc @ u.sum(axis=0)), rel=1e-4, abs=1e-9)



@pytest.mark.slow  # six pools' stores (about 15 s)
def test_the_outcome_follows_from_the_stores():
    """bench/results/real_shadows_anova.md regenerates from the committed stores byte for
    byte; no candidate qualifies in either class (so jacksum stays); the figures README
    quotes; and the gates can fail and pass: every candidate fails for the reasons the
    outcome gives."""
    import sys
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "bench"))
    import real_shadow_anova as A
    pools = [A.load_pool(*p) for p in A.POOLS]
    fresh = A.load_pool(*A.FRESH)
    tab = A.table(pools, fresh)
    text = A.markdown(tab, pools, fresh) + "\n" + "\n".join(A.diagnosis(pools + [fresh]))
    assert text == (root / "bench" / "results" / "real_shadows_anova.md").read_text()
    assert tab["C"]["chosen"] is None and tab["F"]["chosen"] is None
    assert tab["F"]["why"]["ANs"][1] == "lowest key at T_s x 1.5 0.913"
    key = "batchnorm_reg_minus_batchnorm/fz_flipped_matched"
    assert round(tab["C"]["select"]["JS"]["per_key"][key], 3) == 0.901
    assert round(tab["C"]["select"]["JS"]["coverage"], 3) == 0.976
    assert round(tab["F"]["select"]["ANs"]["coverage"], 3) == 0.954
    # without the two reg - BN flipped keys (0.860, 0.909) class C's ANs would pass every
    # selection gate: those keys alone decide
    sel = A.cell(pools, "C", "ANs")
    sel15 = A.cell(pools, "C", "ANs", 1.5)
    for c in (sel, sel15):
        c["per_key"].pop(key)
        c["per_key"].pop("batchnorm_reg_minus_batchnorm/fz_flipped_fit")
        c["min"] = min(c["per_key"].values())
    assert A.gates(sel, sel15, A.SELECT_BAND, A.POOLED_FLOORS, True)[0]
