"""params.yaml validation: typed, strict, one line naming the key."""
import dataclasses

import pytest
import yaml

from bnmem.core.config import Config, ConfigError, config_from_dict, load_config
from bnmem.core.recipes import arm_recipe
from conftest import ROOT


def test_repo_params_load():
    cfg = load_config("params.yaml")
    assert cfg.dataset == "fashion_mnist" and "batchnorm" in cfg.arms
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3  # type: ignore[misc]


@pytest.mark.parametrize("raw, key", [
    ({"noise_rate": 1.5}, "noise_rate"),
    ({"noise_rate": -0.1}, "noise_rate"),
    ({"noise_rate": 0.6, "ood_rate": 0.5}, "noise_rate + ood_rate"),
    ({"arch": "vgg"}, "arch"),
    ({"dataset": "imagenet"}, "dataset"),
    ({"arms": ["none", "weightnorm"]}, "arms"),
    ({"noise_rat": 0.1}, "noise_rat"),
    ({"train": {"epochs": "ten"}}, "train.epochs"),
    ({"shadow": {"track_at": "sometimes"}}, "shadow.track_at"),
    ({"train": {"epochs": 0}}, "train.epochs"),
    ({"train": {"lr": 0}}, "train.lr"),
    ({"train": {"lr": -1}}, "train.lr"),
    ({"train": {"batch_szie": 3}}, "train.batch_szie"),
    ({"grads": {"other_definition": "sometimes"}}, "grads.other_definition"),
    ({"grads": {"both_at_every_checkpoint": True}}, "grads.both_at_every_checkpoint"),
    ({"shadow": {"n_models": 7}}, "shadow.n_models"),
    ({"shadow": {"n_models": 2}}, "shadow.n_models"),
    ({"shadow": {"n_models": 16, "shards": 3, "shard_ids": [0, 1, 2]}}, "shadow.shards"),
    ({"shadow": {"shards": 2, "shard_ids": [0]}}, "shadow.shard_ids"),
    ({"shadow": {"queries": ["rotate"]}}, "shadow.queries"),
    ({"pool_size": 5}, "pool_size"),
    ({"seed": True}, "seed"),
])
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError) as err:
        config_from_dict(raw)
    msg = str(err.value)
    assert msg.startswith(key + ":"), msg
    assert "\n" not in msg


def test_ints_accepted_for_floats_and_defaults_fill():
    cfg = config_from_dict({"reg_strength": 1, "train": {"lr": 1}})
    assert cfg.reg_strength == 1.0 and isinstance(cfg.train.lr, float)
    assert cfg.train.epochs == Config().train.epochs


def test_recipe_isolates_reg_knobs(tmp_path):
    a = config_from_dict({"reg_strength": 0.1})
    b = config_from_dict({"reg_strength": 0.7})
    assert arm_recipe(a, "none") == arm_recipe(b, "none")
    assert arm_recipe(a, "batchnorm") == arm_recipe(b, "batchnorm")
    assert arm_recipe(a, "batchnorm_reg") != arm_recipe(b, "batchnorm_reg")
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(arm_recipe(b, "batchnorm_reg")))
    back = load_config(path)
    assert back.arms == ("batchnorm_reg",) and back.reg_strength == 0.7


@pytest.mark.parametrize("name", ["fullscale.yaml", "frontier.yaml", "dp.yaml", "memreg.yaml"])
def test_driver_configs_set_valid_params(name):
    """Every committed tools/fullscale.py config names existing params and gives a valid
    config (a typo would fail only after the worktree is built, in `configure`)."""
    from conftest import load_script
    fullscale = load_script("tools/fullscale.py")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    overrides = yaml.safe_load((ROOT / name).read_text())
    cfg = config_from_dict(fullscale.apply(params, overrides))
    assert cfg.pool_size == overrides.get("pool_size", cfg.pool_size)
    with pytest.raises(SystemExit, match="no_such_key"):
        fullscale.apply(yaml.safe_load((ROOT / "params.yaml").read_text()),
                        {"shadow.no_such_key": 1})
