"""tools/grid.py: cells and replicates from grid.yaml, the fit-rule flag, replicates
combined with an interval that is calibrated (coverage in simulation), and the table a
partial grid gives."""
import json
import sys

import numpy as np
import pytest
import yaml

from bnmem.attack.intervals import across_replicates, pooled_spread
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import grid  # noqa: E402


def test_cells_and_replicates_cover_the_spec_with_per_arch_settings():
    spec = yaml.safe_load((ROOT / "grid.yaml").read_text())
    cells = dict(grid.cells(spec))
    assert len(cells) == len(spec["archs"]) * len(spec["datasets"]) * len(spec["noise_rates"]) == 12
    res = cells["resnet_cpu-mnist-noise0.05"]
    assert res["arch"] == "resnet_cpu" and res["dataset"] == "mnist" and res["noise_rate"] == 0.05
    assert res["model.init"] == "kaiming" and res["arms"] == spec["arms"]
    assert "model.init" not in cells["lenet-mnist-noise0.05"]
    units = grid.units(spec)
    assert len(units) == 12 * len(spec["seeds"]) and len(spec["seeds"]) >= 3
    assert [u[2] for u in units[:12]] == [spec["seeds"][0]] * 12  # every cell's first replicate first
    assert units[12][0] == "lenet-fashion_mnist-noise0.01-seed1" and units[12][3]["seed"] == 1
    # per_arch_dataset goes over per_arch for that arch on that dataset only
    for key, over in spec.get("per_arch_dataset", {}).items():
        arch, dataset = key.split("-")
        for name, params in cells.items():
            mine = params["arch"] == arch and params["dataset"] == dataset
            for k, v in over.items():
                assert (params.get(k) == v) if mine else (
                    params.get(k) == spec["per_arch"].get(params["arch"], {}).get(k)), (name, k)
    with pytest.raises(SystemExit, match="per_arch_dataset: 'densenet_cpu-cifar10' is not"):
        grid.cells({**spec, "per_arch_dataset": {"densenet_cpu-cifar10": {"train.lr": 0.1}}})
    # the stamp is the settings: the same unit keeps it whatever the code
    assert grid.stamp(units[0][3]) == grid.stamp(dict(units[0][3]))
    assert grid.stamp(units[0][3]) != grid.stamp({**units[0][3], "seed": 7})


@pytest.mark.parametrize("tau", [0.0, 1.0, 3.0])
def test_across_replicates_covers_95_percent_in_simulation(tau):
    """Three replicates, each with its own 95 % interval (se known up to a 100-draw
    estimate) and a between-replicate spread tau: the combined interval covers the truth
    in 93-97 % of 3 000 simulated cells (over-wide would fail too)."""
    rng = np.random.default_rng([7, int(10 * tau)])
    cover = []
    for _ in range(3000):
        se = rng.uniform(0.8, 1.2, 3)
        y = 2.0 + rng.normal(0, np.sqrt(se ** 2 + tau ** 2))
        half = 1.96 * se * np.sqrt(rng.chisquare(100, 3) / 100)
        c = across_replicates(y, y - half, y + half)
        cover.append(c["lo"] <= 2.0 <= c["hi"])
    assert 0.93 <= np.mean(cover) <= 0.97, np.mean(cover)


def test_across_replicates_needs_two_usable_replicates_and_states_power():
    one = across_replicates([0.1], [0.0], [0.2])
    assert one["value"] is None and one["replicates"] == 1
    c = across_replicates([0.10, 0.12, None], [0.05, 0.07, None], [0.15, 0.17, None])
    assert c["replicates"] == 2 and c["lo"] < 0.11 < c["hi"] and c["tau"] == 0.0
    tight = across_replicates([0.1] * 3, [0.09] * 3, [0.11] * 3)
    wide = across_replicates([0.1] * 3, [0.0] * 3, [0.2] * 3)
    assert 0 < tight["mde"] < wide["mde"]
    # replicates far closer together than their own intervals say: spread (Q / (k - 1)) << 1
    close = across_replicates([0.10, 0.101, 0.099], [0.0] * 3, [0.2] * 3)
    far = across_replicates([0.0, 0.3, -0.3], [-0.1, 0.2, -0.4], [0.1, 0.4, -0.2])
    assert close["spread"] < 0.01 < 1 < far["spread"]


def _delta(v, lo, hi):
    return {"value": v, "lo": lo, "hi": hi}


def _rep(seed, shift, none_fit=0.85):
    train = {"none": {"clean_train_acc": none_fit, "test_acc": 0.7},
             "batchnorm": {"clean_train_acc": 0.95, "test_acc": 0.8}}
    deltas = {"batchnorm_minus_none": {
        "auc_identity_equal_epochs": _delta(0.10 + shift, 0.05 + shift, 0.15 + shift),
        "auc_all_matched_heldout": _delta(0.01 + shift, -0.02 + shift, 0.04 + shift)},
        "batchnorm_reg_minus_batchnorm": {}}
    membership = {"frontier": {"compare": {"batchnorm_minus_none": {"criteria": {"fit": {
        "figures": {"auc_all": {"at_common": _delta(0.02 + shift, -0.01 + shift, 0.05 + shift)}}}}}}}}
    summary = {"claims": [{"claim": "BN raises LiRA AUC by >= 3 points", "verdict": "reproduced"}]}
    row = grid.summarize(train, deltas, summary, {"min_clean_train_acc": 0.8}, membership)
    return {"cell": "c", "seed": seed, "params": {"noise_rate": 0.05, "ood_rate": 0.01, "seed": seed},
            "wall_s": 60.0, **row}


def test_fit_rule_flags_a_cell_and_the_table_says_so(tmp_path):
    reps = [_rep(0, 0.0), _rep(1, 0.01), _rep(2, -0.01)]
    assert list(reps[0]["deltas"]) == ["batchnorm_minus_none"]
    assert reps[0]["deltas"]["batchnorm_minus_none"]["auc_all_matched_fit"]["value"] == 0.02
    rule = {"min_clean_train_acc": 0.8}
    ok = grid.combine(reps, rule)
    bad = grid.combine([*reps[:2], _rep(2, -0.01, none_fit=0.75)], rule)
    bad["cell"] = "d"
    assert ok["flagged_arms"] == [] and bad["flagged_arms"] == ["none"]
    m = ok["deltas"]["batchnorm_minus_none"]["auc_all_matched_heldout"]
    assert m["replicates"] == 3 and m["value"] == pytest.approx(0.01) and m["lo"] < 0.01 < m["hi"]
    spec = yaml.safe_load((ROOT / "grid.yaml").read_text())
    grid.report([ok, bad], spec, tmp_path / "grid.md", tmp_path / "grid.png", 36)
    text = (tmp_path / "grid.md").read_text()
    assert "| c | batchnorm − none | 3 | +10.00 [" in text
    assert "| yes: `none` misses in 1 of 3 | 4 | not evidence (flagged) | not evidence (flagged) |" in text
    # matched intervals around +1 point, far below the 4-point threshold: not reproduced
    assert "| no | 4 | not reproduced | not reproduced |" in text
    assert "Replicates finished: 6 of 36 (2 of 12 cells); total wall time 6.0 min." in text
    assert (tmp_path / "grid.png").stat().st_size > 5000
    # --check's comparison: every number of a record, flat
    nums = grid.numbers(reps[0])
    assert nums["batchnorm_minus_none.auc_all_matched_fit.value"] == 0.02 and len(nums) > 10


def test_committed_replicates_are_complete_records():
    spec = yaml.safe_load((ROOT / "grid.yaml").read_text())
    names = {u[0] for u in grid.units(spec)}
    for f in sorted((ROOT / "results" / "grid").glob("*/seed_*.json")):
        rec = json.loads(f.read_text())
        assert rec["unit"] in names and f.parent.name == rec["cell"] and f.stem == f"seed_{rec['seed']}"
        assert rec["stamp"] == grid.stamp(rec["params"]) and rec["wall_s"] > 0
        assert set(rec["fit"]) == set(rec["params"]["arms"])
        for d in rec["deltas"].values():
            for point in d.values():
                assert point["lo"] is None or point["lo"] <= point["value"] <= point["hi"]


@pytest.mark.parametrize("inflate", [1.0, 2.0])
def test_pooled_spread_finds_intervals_that_are_too_wide(inflate):
    """Replicates whose own 95 % intervals are right give pooled Q / df in its chi2 band;
    intervals twice too wide give Q / df near 1/4 and a factor near 2."""
    rng = np.random.default_rng(7)
    spreads, dfs = [], []
    for _ in range(40):  # 40 cells x 3 replicates
        se = rng.uniform(0.005, 0.02, 3)
        y = 0.01 + se * rng.normal(size=3)
        half = 1.96 * se * inflate
        c = across_replicates(y, y - half, y + half)
        spreads.append(c["spread"])
        dfs.append(2)
    r = pooled_spread(spreads, dfs)
    lo, hi = r["band"]
    if inflate == 1.0:
        assert lo <= r["q_over_df"] <= hi and r["factor"] == pytest.approx(1, abs=0.2)
    else:
        assert r["q_over_df"] < lo and r["factor"] == pytest.approx(2, abs=0.4)


def test_the_floored_read_names_verdicts_that_rest_on_narrowing(tmp_path):
    """Hartung-Knapp scales with the replicates' spread, so replicates that agree more
    closely than their own intervals narrow it below them; the floored read (scale never
    below the replicates' pooled standard error) widens only those, and grid.md names the
    cells whose verdict moves under it."""
    close = across_replicates([0.010, 0.011, 0.009], [-0.02] * 3, [0.04] * 3)
    assert close["spread"] < 1
    assert close["lo_floor"] < close["lo"] < close["hi"] < close["hi_floor"]
    far = across_replicates([0.0, 0.3, -0.3], [-0.1, 0.2, -0.4], [0.1, 0.4, -0.2])
    assert far["spread"] > 1
    assert (far["lo_floor"], far["hi_floor"]) == pytest.approx((far["lo"], far["hi"]))
    rule = {"min_clean_train_acc": 0.8}
    narrow = grid.combine([_rep(0, 0.0), _rep(1, 0.001), _rep(2, -0.001)], rule)
    spread = grid.combine([_rep(0, 0.0), _rep(1, 0.04), _rep(2, -0.04)], rule)  # spread > 1
    spread["cell"] = "e"
    m = narrow["deltas"]["batchnorm_minus_none"]["auc_all_matched_heldout"]
    assert m["hi"] < 0.04 < m["hi_floor"]  # below the 4-point threshold only unfloored
    v, f = grid.auc_verdicts([narrow, spread]), grid.auc_verdicts([narrow, spread], floored=True)
    assert v[0][0] == "not reproduced" and f[0][0] != "not reproduced" and v[1] == f[1]
    spec = yaml.safe_load((ROOT / "grid.yaml").read_text())
    grid.report([narrow, spread], spec, tmp_path / "grid.md", tmp_path / "grid.png", 36)
    text = (tmp_path / "grid.md").read_text()
    assert "1 cell(s) move." in text
    assert f"| c | {grid._cell_text(grid._floored(m))} | not reproduced → {f[0][0]} |" in text
    assert "| e | " not in text.split("Verdicts that rest on")[1].split("checked on real runs")[0]


def test_zoo_reading_asks_bn_minus_groupnorm_directly():
    """BN's excess over none counts as BN's own only when BN − GroupNorm, taken over the
    replicates, lies above 0 too: GroupNorm − none's interval covering 0 is not enough."""
    def cell(bn, gn, flagged=()):
        def d(reps):
            m = float(np.mean(reps))
            return {"auc_all_matched_heldout": {"value": m, "lo": m - 0.005, "hi": m + 0.005,
                                                "per_replicate": list(reps)}}
        return {"flagged_arms": list(flagged), "deltas": {"batchnorm_minus_none": d(bn),
                                                          "groupnorm_minus_none": d(gn)}}
    assert grid.zoo_reading(cell([0.03, 0.031, 0.029], [0.0, 0.001, -0.001])) == grid.SPECIFIC
    # GroupNorm − none's own interval may cover 0 while BN − GroupNorm does too: not BN's own
    noisy = cell([0.010, 0.011, 0.009], [-0.02, 0.03, 0.0])
    assert grid.bn_minus_gn(noisy)["lo"] < 0 < grid.bn_minus_gn(noisy)["hi"]
    assert grid.zoo_reading(noisy) == grid.ALIKE
    assert grid.zoo_reading(cell([0.01, 0.011, 0.009], [0.03, 0.031, 0.029])) == grid.GN_LARGER
    bn = cell([-0.001, 0.0, 0.001], [0.02, 0.021, 0.019])
    bn["deltas"]["batchnorm_minus_none"]["auc_all_matched_heldout"]["lo"] = -0.004
    assert grid.zoo_reading(bn) == grid.NO_EXCESS  # GroupNorm's excess alone is not BN's
    assert grid.zoo_reading(cell([0.03] * 3, [0.0] * 3, ["none"])).startswith("not evidence")
    d = grid.bn_minus_gn(cell([0.03, 0.04, 0.05], [0.0, 0.0, 0.0]))  # t(2): 4.303 x 0.01 / sqrt 3
    assert d["value"] == pytest.approx(0.04) and d["hi"] - d["lo"] == pytest.approx(2 * 4.3027 * 0.01 / 3 ** 0.5, rel=1e-4)
    # the committed grid: no cell shows an excess that is BN's own
    spec = yaml.safe_load((ROOT / "grid.yaml").read_text())
    reps = grid.load(ROOT / "results" / "grid", spec)
    cells_ = [grid.combine([r for r in reps if r["cell"] == name], spec["fit_rule"])
              for name, _ in grid.cells(spec) if any(r["cell"] == name for r in reps)]
    readings = [grid.zoo_reading(c) for c in cells_]
    assert readings.count(grid.SPECIFIC) == 0 and readings.count(grid.ALIKE) == 3
    assert len(cells_) == 12 and not any(c["flagged_arms"] for c in cells_)  # every arm fits
    # README's count of each reading is the committed grid's
    text = " ".join((ROOT / "README.md").read_text().split())
    assert (f"{readings.count(grid.NO_EXCESS)} show no excess (BN − none's interval covers 0); "
            f"{readings.count(grid.ALIKE)} show one that is not told apart from GroupNorm's") in text
