"""The jackknife-excess diagnosis (bench/real_shadow_excess.py, plan
bench/results/real_shadow_excess_plan.md): its estimators where the truth is known, and its
committed tables regenerated from the stores."""
import sys
from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import real_shadow_excess as X  # noqa: E402  (bench/real_shadow_excess.py)


def _rows_of_a_mean(x: np.ndarray) -> dict:
    """subset_rows' layout for the figure 'mean of the 8 per-pair values x'."""
    idx = np.arange(X.PAIRS)
    h = []
    for sp in X.SPLITS:
        h += [x[sp].mean(), x[np.setdiff1d(idx, sp)].mean()]
    return {"full": x.mean(), "j": [np.delete(x, i).mean() for i in idx], "h": h}


def test_both_jackknives_are_exact_for_a_mean_of_per_pair_terms():
    """For a mean of per-pair terms the delete-one and the delete-4 jackknife (all 35
    complementary splits, split-mean form) both equal s^2 / 8 exactly, the unbiased variance
    of the mean; a figure with a term per pair of pairs breaks V_4 = V_1."""
    rng = np.random.default_rng(3)
    assert len(X.SPLITS) == 35 and all(0 in sp for sp in X.SPLITS)
    for _ in range(20):
        x = rng.standard_t(3, X.PAIRS)
        s = X.summary(_rows_of_a_mean(x), (0, 0))
        assert s["v1"] == pytest.approx(x.var(ddof=1) / X.PAIRS, rel=1e-12)
        assert s["v4"] == pytest.approx(x.var(ddof=1) / X.PAIRS, rel=1e-12)
    # a degree-2 figure: the mean over pairs of pairs of b[i, j]; V_4 > V_1 here
    b = rng.normal(size=(X.PAIRS, X.PAIRS))
    b = b + b.T

    def fig(ix):
        return np.mean([b[i, j] for i, j in combinations(ix, 2)])

    idx = np.arange(X.PAIRS)
    rows = {"full": fig(idx), "j": [fig(np.delete(idx, i)) for i in idx], "h": []}
    for sp in X.SPLITS:
        rows["h"] += [fig(sp), fig(np.setdiff1d(idx, sp))]
    s = X.summary(rows, (0, 0))
    assert s["v4"] > s["v1"]


def test_auc_counts_ties_half_like_a_pairwise_count():
    rng = np.random.default_rng(5)
    for _ in range(10):
        s = rng.integers(0, 6, 80).astype(float)  # heavy ties
        lab = rng.random(80) < 0.4
        pos, neg = s[lab], s[~lab]
        brute = ((pos[:, None] > neg[None]).sum() + 0.5 * (pos[:, None] == neg[None]).sum()) / (
            pos.size * neg.size)
        assert X.auc(s, lab) == pytest.approx(brute, abs=1e-12)


def test_the_plans_reading():
    r = {"v1_tp": [1.7, 1.31, 2.0]}
    assert X.reading(r) == "shows the excess"
    assert X.reading({"v1_tp": [1.0, 0.8, 1.29]}) == "free of it"
    assert X.reading({"v1_tp": [1.2, 1.0, 1.5]}) == "neither"


@pytest.mark.slow  # 2 000 bootstrap resamples per cell, about 20 s
def test_the_committed_tables_and_readme_regenerate_from_the_stores():
    """Both tables regenerate byte for byte from the committed stores (the pool is not read
    when every unit is stored), and README quotes their figures."""
    for extra, name in (([], "real_shadow_excess.md"),
                        (["--split-roles"], "real_shadow_excess_split_roles.md")):
        a = X.parser().parse_args(["--pool-dir", "/work/realpool3", "--subsets", "200", *extra])
        assert X.build(a) == (ROOT / "bench/results" / name).read_text()
    store = X.read_store(ROOT / "results/real_shadow_excess.jsonl")  # once, not per unit
    recs = [store[u] for u in range(200)]
    t = X.table(recs, X.VARIANTS, X.PLAN_FPC, X.DRAW_FROM, 41)["BN - none"]
    flat = " ".join((ROOT / "README.md").read_text().split())

    def cell(r, k="v1_tp"):
        return f"{r[k][0]:.2f} [{r[k][1]:.2f}, {r[k][2]:.2f}]"

    assert f"reads {cell(t['base'])} for the pipeline's figure, {cell(t['per_model'])} with" in flat
    assert f"medians; with fixed references (the targets alone vary) {cell(t['targets_only'])}" in flat
    assert f"(the references alone vary) {cell(t['refs_only'])}" in flat
    assert f"{cell(t['mean_loc'])} with means for the per-sample medians" in flat
    assert f"(V_1 − V_4) / T_p is {cell(t['base'], 'v1_v4_tp')}" in flat
    assert f"alone V_4 / T_p is {cell(t['refs_only'], 'v4_tp')}" in flat
    assert f"{t['per_model']['excess']:.2e} against {t['base']['excess']:.2e}" in flat
    assert all(X.reading(t[v]) == "shows the excess" for v in ("base", "per_model", "mean_loc"))
    assert X.reading(t["refs_only"]) == X.reading(t["targets_only"]) == "neither"
