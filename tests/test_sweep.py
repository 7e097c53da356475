"""tools/sweep.py: which experiments a sweep tabulates (the DVC run itself is tested in
test_pipeline.py::exp_run_and_sweep)."""
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import sweep  # noqa: E402


def _exp(name, params, auc=0.6):
    return {"name": name, "rev": name, "data": {
        "rev": name, "params": {"params.yaml": {"data": params}},
        "metrics": {"metrics/attack.json": {"data": {"none": {"auc_all": auc}}}}}}


def test_only_this_sweeps_experiments_are_tabulated():
    base = {"reg_strength": 1.0, "noise_rate": 0.05, "arms": ["none"]}
    other = _exp("grid-unit", {**base, "reg_strength": 0.1, "noise_rate": 0.01}, auc=0.9)
    mine = _exp("exp-a", {**base, "reg_strength": 0.1}, auc=0.7)
    workspace = _exp("workspace", {**base, "reg_strength": 0.1}, auc=0.8)
    head = {**_exp("abc123", base), "experiments": [{"revs": [other, mine]}]}
    shown = [workspace, head]
    assert sweep.baseline_params(shown) == base
    arms, _ = sweep.collect(sweep.experiments(shown), "reg_strength", [0.1],
                            sweep.baseline_params(shown))
    # not the workspace, not the experiment that also changed noise_rate (listed first)
    assert [(r["exp"], r["auc_all"]) for r in arms] == [("exp-a", 0.7)]
    # without a reference the first listed row wins: what the check above guards against
    arms, _ = sweep.collect(sweep.experiments(shown), "reg_strength", [0.1])
    assert arms[0]["exp"] == "grid-unit"
