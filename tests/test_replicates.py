"""Across-seed aggregation: per-seed deltas, t-intervals, absent kinds."""
import math

import numpy as np
import pytest
from scipy import stats

from bnmem.report.replicates import across_seeds, arm_record, seed_deltas


def _record(flipped: list[float], clean: list[float], auc: float, ratio: float, curve_auc=None):
    history = [{"epoch": e + 1, "clean_train_acc": c, "flipped_mem_acc": f, "ood_mem_acc": math.nan,
                "test_acc": 0.8} for e, (f, c) in enumerate(zip(flipped, clean))]
    shadow = None if curve_auc is None else {"fit": clean, "auc_all": curve_auc}
    lira = {s: {"auc": auc, "tpr_at_fpr_1e-3": 0.01} for s in ("all", "clean", "flipped", "ood")}
    return arm_record(history, {"ratio_flipped_clean": ratio}, lira, shadow, None)


def test_seed_deltas_and_matched_fit():
    bn = _record([0.1, 0.3, 0.5], [0.7, 0.9, 0.99], 0.75, 15.0, [0.52, 0.6, 0.75])
    none = _record([0.0, 0.02, 0.03], [0.6, 0.8, 0.86], 0.57, 8.0, [0.5, 0.55, 0.58])
    d = seed_deltas({"batchnorm": bn, "none": none}, "batchnorm", "none")
    assert d["flipped_mem_acc"] == pytest.approx(0.47)
    assert d["auc_all"] == pytest.approx(0.18)
    assert d["grad_ratio_flipped_clean_ratio"] == pytest.approx(15 / 8)
    # common fit 0.86: BN passes it between epochs 1 (0.7) and 2 (0.9), at 0.8 of the way;
    # none reaches it at its last epoch
    assert d["matched_flipped_mem_acc"] == pytest.approx(0.1 + 0.8 * 0.2 - 0.03)
    assert d["matched_auc_all"] == pytest.approx(0.52 + 0.8 * 0.08 - 0.58)
    assert d["ood_mem_acc"] is None  # absent kind (NaN in the curves CSV) stays None


def test_across_seeds_t_interval():
    vals = [0.15, 0.17, 0.16]
    out = across_seeds({s: {"x": v, "y": None} for s, v in zip((0, 1, 2), vals)})
    half = stats.t.ppf(0.975, 2) * np.std(vals, ddof=1) / math.sqrt(3)
    assert out["x"]["mean"] == pytest.approx(0.16)
    assert out["x"]["lo"] == pytest.approx(0.16 - half) and out["x"]["hi"] == pytest.approx(0.16 + half)
    assert out["x"]["values"] == {"seed_0": 0.15, "seed_1": 0.17, "seed_2": 0.16}
    assert out["y"]["mean"] is None
    one = across_seeds({0: {"x": 0.2}})
    assert one["x"]["mean"] == 0.2 and one["x"]["lo"] is None and one["x"]["n"] == 1


def test_across_seeds_ratio_on_the_log_scale():
    """A ratio key's interval is a t-interval of the log ratios, exponentiated (symmetric on
    the scale verdict.p_values(log=True) reads it on); a plain key's stays linear."""
    vals = [1.2, 1.5, 2.4]
    out = across_seeds({s: {"g_ratio": v, "d": v} for s, v in enumerate(vals)})
    lg = np.log(vals)
    half = stats.t.ppf(0.975, 2) * np.std(lg, ddof=1) / math.sqrt(3)
    r = out["g_ratio"]
    assert r["mean"] == pytest.approx(np.exp(lg.mean())) and r["scale"] == "log"
    assert r["lo"] == pytest.approx(np.exp(lg.mean() - half))
    assert r["hi"] == pytest.approx(np.exp(lg.mean() + half))
    assert math.log(r["hi"]) - math.log(r["mean"]) == pytest.approx(math.log(r["mean"]) - math.log(r["lo"]))
    assert out["d"]["mean"] == pytest.approx(np.mean(vals)) and "scale" not in out["d"]
    bad = across_seeds({0: {"g_ratio": 1.1}, 1: {"g_ratio": -0.5}})["g_ratio"]
    assert bad["mean"] is None and bad["lo"] is None and bad["hi"] is None


def test_across_seeds_ratio_interval_covers_the_geometric_mean_in_simulation():
    """Where the truth is known (log-normal ratios over three seeds, true geometric mean
    1.5), the log-scale t-interval covers it in 93-97 % of 2 000 simulated runs (exact t on
    the log scale: 0.952 here). Its shape, symmetric in log rather than linear, is pinned by
    the test above; with three seeds a linear interval would cover about as often, being
    wide, so coverage alone cannot tell the two apart."""
    rng = np.random.default_rng(7)
    truth, hits = 1.5, 0
    for _ in range(2000):
        r = np.exp(np.log(truth) + 0.4 * rng.standard_normal(3))
        out = across_seeds({s: {"g_ratio": float(v)} for s, v in enumerate(r)})["g_ratio"]
        hits += out["lo"] <= truth <= out["hi"]
    assert 0.93 <= hits / 2000 <= 0.97
