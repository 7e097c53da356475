"""The (gamma/sigma)^2 mechanism check: exact identities, the prediction, the stage end to end."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from bnmem.theory.mechanism import (
    EPS, batch_stats, dloss_dgamma, fit_loglog, growth_table, init_params, logits, make_data,
    margins, misclassify_outlier, sigma_of, stack, step_growth, train_bn, unstack,
)

ROOT = Path(__file__).resolve().parents[1]





@pytest.fixture(scope="module")
def setup():
    data = make_data(np.random.default_rng([3, 1]))
    x, y, idx = torch.from_numpy(data["x"]), torch.from_numpy(data["y"]), int(data["outlier"])
    p = misclassify_outlier(init_params(torch.Generator().manual_seed(3)), x, y, idx)
    return p, x, y, idx


def with_gamma(p, gamma):
    return dict(p, gamma=torch.tensor([float(gamma)], dtype=torch.float64))


def test_data_outlier_is_planted():
    data = make_data(np.random.default_rng(0))
    i = int(data["outlier"])
    assert data["x"].shape == (64, 1, 8, 8) and data["x"].dtype == np.float64
    assert data["y"][i] == 0 and data["y_clean"][i] == 1  # wrong label on a class-1 look-alike
    norms = np.linalg.norm(data["x_clean"].reshape(64, -1), axis=1)
    assert np.linalg.norm(data["x"][i]) > 1.5 * norms.max()  # far away
    keep = np.arange(64) != i
    assert np.array_equal(data["x"][keep], data["x_clean"][keep])


def test_forwards_agree_where_they_should(setup):
    p, x, y, idx = setup
    stats = batch_stats(p, x)
    q = dict(with_gamma(p, 1.7), beta=torch.tensor([0.3], dtype=torch.float64))
    # held statistics = train-mode BN in value (only the gradient differs) = the formula
    h = F.conv2d(x, q["w"], padding=1)
    manual = ((q["gamma"] * (h - h.mean()) / torch.sqrt(h.var(unbiased=False) + EPS) + q["beta"])
              .flatten(1) @ q["V"].T)
    torch.testing.assert_close(logits(q, x, "bn", stats), manual)
    torch.testing.assert_close(logits(q, x, "bn_batch"), manual)
    # gain gamma/sigma = 1 and beta = 0: BN with held statistics is the no-BN model
    unit = with_gamma(p, sigma_of(p, x))
    torch.testing.assert_close(logits(unit, x, "bn", stats), logits(p, x, "none", stats))
    assert margins(logits(p, x, "bn_batch"), y)[idx] < 0  # outlier starts misclassified


def test_growth_at_small_eta_is_squared_grad_norm(setup):
    p, x, y, idx = setup
    q = {k: v.clone().requires_grad_(k in ("w", "V")) for k, v in with_gamma(p, 2.0).items()}
    m = margins(logits(q, x, "bn", batch_stats(p, x)), y)[idx]
    gw, gv = torch.autograd.grad(m, (q["w"], q["V"]))
    first_order = float((gw ** 2).sum() + (gv ** 2).sum())
    g = step_growth(with_gamma(p, 2.0), x, y, idx, "bn", np.array([1e-6]))[0]
    assert g == pytest.approx(first_order, rel=1e-4)


@pytest.mark.parametrize("gamma", [0.3, 1.0, 3.0, 8.0])
def test_ratio_matches_gamma_over_sigma_squared(setup, gamma):
    p, x, y, idx = setup
    etas = np.array([1e-5, 1e-3])
    t = growth_table(p, x, y, idx, np.array([gamma]), etas)
    predicted = t["gamma_over_sigma"][0] ** 2
    rel = t["growth_bn"][0] / t["growth_nobn"][0] / predicted
    assert rel[0] == pytest.approx(1, abs=1e-3)
    assert rel[1] == pytest.approx(1, abs=0.1)  # eta = 1e-3, the brief's "small"


def test_exponent_is_two(setup):
    p, x, y, idx = setup
    t = growth_table(p, x, y, idx, np.geomspace(0.25, 8, 6), np.array([1e-4]))
    k = t["gamma_over_sigma"]
    for norm in ("bn", "bn_batch"):
        ratio = t[f"growth_{norm}"][:, 0] / t["growth_nobn"][:, 0]
        a, _, r2 = fit_loglog(k, ratio)
        assert a == pytest.approx(2, abs=0.1) and r2 > 0.999
    # train-mode statistics change only the prefactor, the same at every gamma
    prefactor = t["growth_bn_batch"][:, 0] / t["growth_nobn"][:, 0] / k ** 2
    assert np.ptp(prefactor) < 0.01 * prefactor.mean()


def test_dloss_dgamma_formula(setup):
    """dl/dgamma = -s (m - beta*sum(u))/gamma, since BN's output is gamma*h_hat + beta."""
    p, x, y, idx = setup
    q = dict(with_gamma(p, 1.5), beta=torch.tensor([0.2], dtype=torch.float64))
    m = float(margins(logits(q, x, "bn_batch"), y)[idx])
    u = q["V"][int(y[idx])] - q["V"][1 - int(y[idx])]
    s = 1 / (1 + np.exp(m))
    expected = -s * (m - 0.2 * float(u.sum())) / 1.5
    assert dloss_dgamma(q, x, y, idx) == pytest.approx(expected, rel=1e-9)


def test_stacked_training_equals_one_model_at_a_time():
    """train_bn trains C models in one grouped conv; each must match training it alone."""
    rng = np.random.default_rng(5)
    data = [make_data(rng, n=16) for _ in range(3)]
    ps = [init_params(torch.Generator().manual_seed(i), gamma=1 + i) for i in range(3)]
    x = torch.from_numpy(np.stack([d["x"] for d in data]))
    y = torch.from_numpy(np.stack([d["y"] for d in data]))
    order = torch.from_numpy(np.argsort(rng.random((20, 3, 16)), axis=2)[:, :, :8])
    q = train_bn(stack(ps), x, y, order, lr=0.2)
    for i in range(3):
        alone = train_bn(stack([ps[i]]), x[i:i + 1], y[i:i + 1], order[:, i:i + 1], lr=0.2)
        for k, v in unstack(alone, 0).items():
            torch.testing.assert_close(unstack(q, i)[k], v)
        assert not torch.equal(unstack(q, i)["w"], ps[i]["w"])  # it did train


def test_stage_end_to_end(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text("seed: 1\n")
    out = {"metrics": tmp_path / "m" / "theory.json", "csv": tmp_path / "p" / "theory.csv",
           "png": tmp_path / "p" / "theory.png"}
    cmd = [sys.executable, str(ROOT / "stages" / "theory.py"), "--params", str(params)]
    for k, v in out.items():
        cmd += [f"--{k}", str(v)]
    subprocess.run(cmd, check=True, cwd=tmp_path, timeout=120)
    metrics = json.loads(out["metrics"].read_text())

    def keys(d):
        for k, v in d.items():
            yield k
            if isinstance(v, dict):
                yield from keys(v)

    assert not [k for k in keys(metrics) if "." in k]
    assert metrics["ratio_measured_over_predicted"] == pytest.approx(1, abs=0.1)
    assert metrics["fitted_exponent"] == pytest.approx(2, abs=0.1)
    assert metrics["dloss_dgamma_outlier_sign"] in (-1, 0, 1)
    for k in ("r2", "gamma_final_with_outlier", "gamma_final_without_outlier"):
        assert np.isfinite(metrics[k])
    table = pd.read_csv(out["csv"])
    assert {"gamma_over_sigma", "growth_bn", "growth_nobn", "ratio", "predicted"} <= set(table)
    assert out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
