"""The DP-SGD arms (bnmem.train.dp): Opacus' training against a hand-written DP-SGD
reference (Poisson sampling, per-sample clipping, Gaussian noise, the arm's SGD recipe),
the accountant, in-place activations and residuals, and the arms' config."""
from __future__ import annotations

import dataclasses
import math
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import yaml
from torch import nn

pytest.importorskip("opacus")

from bnmem.core.config import (  # noqa: E402
    ConfigError, arm_epsilon, arm_norm, config_from_dict, dp_arm,
)
from bnmem.core.recipes import arm_recipe  # noqa: E402
from bnmem.core.io import InputError  # noqa: E402
from bnmem.core.rng import SALT  # noqa: E402
from bnmem.core.schedule import lr_at  # noqa: E402
from bnmem.models.spec import build, model_spec  # noqa: E402
from bnmem.train.dp import (  # noqa: E402
    noise_multiplier, spent_epsilon, substitution_epsilon, train_dp,
)
from conftest import ROOT  # noqa: E402


def _cfg(**over):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(arms=["groupnorm_dp_eps4"], **over)
    params["train"].update(epochs=2, batch_size=8, checkpoints=[1])
    return config_from_dict(arm_recipe(config_from_dict(params), "groupnorm_dp_eps4"))


def _data(n: int = 24, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 1, 28, 28, generator=g), torch.randint(0, 10, (n,), generator=g)


def reference_dp_sgd(model: nn.Module, x, y, cfg, sigma: float, seed: int) -> None:
    """DP-SGD written out (Abadi et al. 2016) with Opacus' conventions: per-sample
    gradients one sample at a time, each clipped to C (factor C / (norm + 1e-6), at most 1),
    summed, noise N(0, (sigma C)^2) per coordinate from the run's generator in parameter
    order, divided by the expected batch size, then the arm's SGD step."""
    t, C = cfg.train, cfg.dp.max_grad_norm
    n = len(y)
    q, per_epoch = t.batch_size / n, math.ceil(n / t.batch_size)
    total = per_epoch * t.epochs
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    noise = torch.Generator().manual_seed(int(np.random.SeedSequence(
        [seed, SALT["dp_noise"], t.epochs]).generate_state(1)[0]))
    sampling = np.random.default_rng([seed, SALT["dp_sampling"]])
    model.train()
    for step in range(total):
        for group in opt.param_groups:
            group["lr"] = lr_at(t, step, total)
        idx = np.flatnonzero(sampling.random(n) < q)
        summed = [torch.zeros_like(p) for p in params]
        for i in idx:
            grads = torch.autograd.grad(F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]), params)
            norm = torch.sqrt(sum((g.double() ** 2).sum() for g in grads)).float()
            factor = (C / (norm + 1e-6)).clamp(max=1.0)
            summed = [s + factor * g for s, g in zip(summed, grads)]
        for p, s in zip(params, summed):
            z = torch.normal(mean=0, std=sigma * C, size=p.shape, generator=noise)
            p.grad = (s + z) / round(q * n)
        opt.step()


def test_opacus_training_is_the_reference_dp_sgd():
    cfg = _cfg()
    x, y = _data()
    spec = model_spec(cfg, "groupnorm_dp_eps4", 1, 28)
    model, ref = build(spec, seed=5), build(spec, seed=5)
    hist = train_dp(model, x, y, cfg.train, cfg.dp, 4.0, seed=11)
    reference_dp_sgd(ref, x, y, cfg, hist[-1]["noise_multiplier"], seed=11)
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values()):
        assert torch.allclose(a, b, atol=2e-5, rtol=1e-4), name
    # the check can fail: without the noise (or with another seed) the weights differ
    other = build(spec, seed=5)
    reference_dp_sgd(other, x, y, cfg, 0.0, seed=11)
    assert not all(torch.allclose(a, b, atol=2e-5) for a, b in
                   zip(model.state_dict().values(), other.state_dict().values()))


def test_a_run_depends_on_its_seeds_only_and_leaves_a_plain_module():
    cfg = _cfg()
    x, y = _data()
    spec = model_spec(cfg, "groupnorm_dp_eps4", 1, 28)
    runs = []
    for seed in (3, 3, 4):
        m = build(spec, seed=1)
        train_dp(m, x, y, cfg.train, cfg.dp, 4.0, seed)
        runs.append(m.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(runs[0].values(), runs[1].values()))
    assert not all(torch.equal(a, b) for a, b in zip(runs[0].values(), runs[2].values()))
    assert not any(hasattr(p, "grad_sample") and p.grad_sample is not None
                   for p in m.parameters())
    assert not m._forward_hooks and not m._backward_hooks


def test_accountant_reaches_the_target_epsilon():
    q, steps = 64 / 1000, 12 * 16
    sig = {e: noise_multiplier(e, 1e-5, q, steps, "prv") for e in (1.0, 8.0)}
    assert sig[1.0] > sig[8.0] > 0
    for e, s in sig.items():  # Opacus' search stops within 0.01 below the target
        assert e - 0.02 <= spent_epsilon(s, q, steps, 1e-5, "prv") <= e
    # a shorter run needs less noise for the same epsilon (each budget has its own)
    assert noise_multiplier(8.0, 1e-5, q, 4 * 16, "prv") < sig[8.0]
    cfg = _cfg()
    x, y = _data()
    hist = train_dp(build(model_spec(cfg, "groupnorm_dp_eps4", 1, 28), seed=0), x, y,
                    cfg.train, cfg.dp, 4.0, 0)
    assert hist[-1]["steps"] == 2 * 3 and hist[-1]["sample_rate"] == 8 / 24
    assert 3.98 <= hist[-1]["epsilon"] <= 4.0
    # replace-one (the attack's in/out relation) costs more than add/remove, at most about 2x
    assert 4.0 < hist[-1]["epsilon_substitution"] <= 2 * 4.0 + 0.1


def test_substitution_epsilon_matches_group_privacy_bounds():
    """Replace-one ε of a Poisson-sampled Gaussian lies between the add/remove ε and twice
    it (group privacy: a substitution is a removal plus an addition)."""
    q, steps = 64 / 1000, 12 * 16
    for target in (1.0, 8.0):
        sigma = noise_multiplier(target, 1e-5, q, steps, "prv")
        sub = substitution_epsilon(sigma, q, steps, 1e-5)
        assert target < sub < 2 * target + 0.1, (target, sub)


FACTORIES = '''
from torch import nn

def inplace_relu(num_classes, in_channels):
    return nn.Sequential(nn.Conv2d(in_channels, 4, 3), nn.GroupNorm(2, 4), nn.ReLU(inplace=True),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, num_classes))


class Residual(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        out = self.conv(x)
        out += x  # in place on a hooked output: Opacus cannot take it
        return out


def inplace_residual(num_classes, in_channels):
    return nn.Sequential(nn.Conv2d(in_channels, 4, 3), Residual(4), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, num_classes))
'''


@pytest.fixture()
def factories(tmp_path, monkeypatch):
    (tmp_path / "dpfactories.py").write_text(textwrap.dedent(FACTORIES))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path / "dpfactories.py"
    sys.modules.pop("dpfactories", None)


def _factory_cfg(fn: str, path):
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(arms=["groupnorm_dp"], arch=f"dpfactories:{fn}", dataset="fashion_mnist",
                  audit={"model_file": str(path)})
    params["train"].update(epochs=1, batch_size=8, checkpoints=[1])
    return config_from_dict(params)


def test_inplace_activations_are_switched_off_and_named(factories):
    cfg = _factory_cfg("inplace_relu", factories)
    spec = model_spec(cfg, "groupnorm_dp", 1, 28)
    assert spec.inplace_off == ("2",) and spec.to_json()["inplace_off"] == ["2"]
    model = build(spec, seed=0)
    assert model[2].inplace is False
    x, y = _data()
    train_dp(model, x, y, cfg.train, cfg.dp, 8.0, 0)  # trains: no in-place error
    # a non-DP arm keeps the factory's module as it is
    assert model_spec(cfg, "groupnorm", 1, 28).inplace_off is None


def test_an_inplace_residual_stops_with_one_line_naming_the_module(factories):
    cfg = _factory_cfg("inplace_residual", factories)
    model = build(model_spec(cfg, "groupnorm_dp", 1, 28), seed=0)
    x, y = _data()
    with pytest.raises(InputError, match=r"module '1' modifies a tensor in place") as err:
        train_dp(model, x, y, cfg.train, cfg.dp, 8.0, 0)
    assert "\n" not in str(err.value)


def test_batchnorm_is_refused_with_one_line():
    cfg = _cfg()
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(),
                          nn.Linear(4 * 26 * 26, 10))
    x, y = _data()
    with pytest.raises(InputError, match="cannot train this model"):
        train_dp(model, x, y, cfg.train, cfg.dp, 8.0, 0)


def test_missing_opacus_is_one_line(monkeypatch):
    from bnmem.train import dp
    monkeypatch.setitem(sys.modules, "opacus", None)  # import opacus raises ImportError
    with pytest.raises(InputError, match=r"pip install 'bnmem\[dp\]'"):
        dp.opacus()


def test_dp_arms_in_the_config():
    assert dp_arm("groupnorm_dp") and dp_arm("groupnorm_dp_eps8")
    assert not dp_arm("groupnorm") and not dp_arm("groupnorm_dp_eps0")
    assert arm_norm("groupnorm_dp_eps8") == "groupnorm"
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    for bad in ("groupnorm_dp_eps0", "groupnorm_dp_epsx", "batchnorm_dp"):
        with pytest.raises(ConfigError, match="^arms: "):
            config_from_dict({**params, "arms": ["none", bad]})
    for key, value in (("epsilon", 0), ("delta", 1.5), ("max_grad_norm", -1), ("accountant", "moments")):
        with pytest.raises(ConfigError, match=f"^dp.{key}: "):
            config_from_dict({**params, "dp": {key: value}})
    cfg = config_from_dict({**params, "arms": ["none", "groupnorm_dp", "groupnorm_dp_eps2"],
                            "dp": {"epsilon": 3.0}})
    assert arm_epsilon(cfg, "groupnorm_dp") == 3.0 and arm_epsilon(cfg, "groupnorm_dp_eps2") == 2.0
    assert arm_recipe(cfg, "groupnorm_dp_eps2")["dp"]["epsilon"] == 2.0
    # dp.* leaves every other arm's recipe as it is (DVC reruns only the DP arms)
    other = dataclasses.replace(cfg, dp=dataclasses.replace(cfg.dp, epsilon=5.0, delta=1e-6))
    assert arm_recipe(other, "none") == arm_recipe(cfg, "none")
    assert arm_recipe(other, "groupnorm_dp_eps2") != arm_recipe(cfg, "groupnorm_dp_eps2")


def test_dp_shadows_record_each_endpoints_accounting(tmp_path):
    """A DP arm's shadow chunk: every endpoint (budget runs, then the train.epochs run) a
    complete DP-SGD run with its own noise multiplier for the arm's epsilon, recorded per
    model; the attack stage reads them back (bnmem.attack.mitigation.accountant_summary)."""
    from bnmem.attack.mitigation import accountant_summary
    from bnmem.core.io import save_npz
    from bnmem.core.keep import keep_matrix
    from bnmem.train.shadow import train_chunk
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(arms=["groupnorm_dp_eps4"])
    params["train"].update(epochs=2, batch_size=8, checkpoints=[1])
    params["shadow"].update(n_models=6, budgets=[1], grad_models=0, track_epochs=False)
    cfg = config_from_dict(arm_recipe(config_from_dict(params), "groupnorm_dp_eps4"))
    x, y = _data(40)
    keep = keep_matrix(6, 40, 0)
    out = train_chunk(cfg, "groupnorm_dp_eps4", x, y, keep, [0, 1], workers=1)
    for model in out:
        a = model["arrays"]
        assert a["dp_epsilon"].shape == a["dp_noise_multiplier"].shape == (2,)
        assert np.all((a["dp_epsilon"] > 3.9) & (a["dp_epsilon"] <= 4.0))
        assert a["dp_noise_multiplier"][0] < a["dp_noise_multiplier"][1]  # 1 epoch: less noise
    again = train_chunk(cfg, "groupnorm_dp_eps4", x, y, keep, [1], workers=1)
    assert np.array_equal(again[0]["arrays"]["logits"], out[1]["arrays"]["logits"])
    shard = tmp_path / "shard_0.npz"
    save_npz(shard, model_ids=np.array([0, 1]), **{k: np.stack([m["arrays"][k] for m in out])
                                                   for k in ("dp_epsilon", "dp_noise_multiplier",
                                                             "dp_epsilon_substitution")})
    summ = accountant_summary([shard])
    assert len(summ["epsilon_max"]) == 2 and max(summ["epsilon_max"]) <= 4.0
    assert all(4.0 < e <= 8.1 for e in summ["epsilon_substitution_max"])
