"""Auditing your own model and data: model factories (with and without a norm argument),
the BatchNorm swap, your .npz and ImageFolder data, the offline attack on your own trained
model at null and with a signal, and every bad input as one line."""
import shutil
import sys
import textwrap

import numpy as np
import pytest
import torch
import yaml
from torch import nn

from bnmem.attack.signals import Signals
from bnmem.core.margin import log_prob_from_margin
from bnmem.core.config import DataConfig, ConfigError, config_from_dict
from bnmem.exposure.scores import (
    TargetSignals, calibration, exposure, membership_metrics, offline_rmia, read_members,
)
from bnmem.core.io import DataError, InputError
from bnmem.models.factory import swapped_layers
from bnmem.models.zoo import make_model
from bnmem.models.norms import _groups
from bnmem.attack.simulate import synthetic_phi
from bnmem.data.sources import load_image_folder, load_npz_images, load_user
from conftest import ROOT, run_main, run_stage

FACTORIES = '''
from torch import nn

def with_norm(num_classes, in_channels, norm_layer):
    # norm_layer for the conv features; a BatchNorm1d the factory adds by itself
    return nn.Sequential(nn.Conv2d(in_channels, 12, 3, padding=1), norm_layer(12), nn.ReLU(),
                         nn.Conv2d(12, 7, 3, padding=1), norm_layer(7), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(7, 30),
                         nn.BatchNorm1d(30), nn.ReLU(), nn.Linear(30, num_classes))

def without_norm(num_classes=10, in_channels=1):
    return nn.Sequential(nn.Conv2d(in_channels, 6, 3), nn.BatchNorm2d(6), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(96, 64),
                         nn.BatchNorm1d(64), nn.ReLU(), nn.Linear(64, num_classes))

def wrong_signature(classes):
    return nn.Linear(4, classes)

def wrong_output(num_classes, in_channels):
    return nn.Sequential(nn.Flatten(), nn.LazyLinear(num_classes + 1))

def not_a_module(num_classes, in_channels):
    return "model"

def raises(num_classes, in_channels):
    raise RuntimeError("boom")
'''


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    folder = tmp_path_factory.mktemp("userpkg")
    (folder / "userfactories.py").write_text(textwrap.dedent(FACTORIES))
    sys.path.insert(0, str(folder))
    yield "userfactories"
    sys.path.remove(str(folder))
    sys.modules.pop("userfactories", None)


NORM_TYPES = {"none": nn.Identity, "groupnorm": nn.GroupNorm, "layernorm": nn.GroupNorm}


@pytest.mark.parametrize("fn", ["with_norm", "without_norm"])
@pytest.mark.parametrize("norm", ["none", "batchnorm", "groupnorm", "layernorm"])
def test_factory_builds_every_norm_without_leftover_bn(factories, fn, norm):
    arch = f"{factories}:{fn}"
    model = make_model(arch, norm, 10, 1, image_size=16, seed=3)
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if norm == "batchnorm":
        assert bns  # BN arm keeps (or gets) BatchNorm
    else:
        assert not bns, f"BatchNorm left in the {norm} arm"
        assert any(isinstance(m, NORM_TYPES[norm]) for m in model.modules())
    for m in model.modules():
        if isinstance(m, nn.GroupNorm):
            assert m.num_channels % m.num_groups == 0
            assert m.num_groups == (1 if norm == "layernorm" else _groups(m.num_channels))
    model.train()
    out = model(torch.randn(4, 1, 16, 16))
    assert out.shape == (4, 10)
    out.sum().backward()  # trains: gradients reach the first layer
    assert next(model.parameters()).grad is not None


def test_swapped_layers_named_and_init_seeded(factories):
    assert swapped_layers(f"{factories}:without_norm", "none", 10, 1, 16) == ["1", "6"]
    assert swapped_layers(f"{factories}:without_norm", "batchnorm", 10, 1, 16) == []
    # with norm_layer only the layer the factory built itself is swapped
    assert swapped_layers(f"{factories}:with_norm", "groupnorm", 10, 1, 16) == ["9"]
    assert swapped_layers("lenet", "none", 10, 1, 28) == []
    a = make_model(f"{factories}:with_norm", "none", 10, 1, image_size=16, seed=5)
    b = make_model(f"{factories}:with_norm", "batchnorm", 10, 1, image_size=16, seed=5)
    c = make_model(f"{factories}:with_norm", "none", 10, 1, image_size=16, seed=6)
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert torch.equal(pa["0.weight"], pb["0.weight"])  # arms share conv/linear init
    assert not torch.equal(pa["0.weight"], dict(c.named_parameters())["0.weight"])


@pytest.mark.parametrize("groups_for", [1, 2, 3, 5, 6, 7, 12, 16, 30, 64, 120, 250])
def test_groupnorm_groups_divide_every_channel_count(groups_for):
    g = _groups(groups_for)
    assert groups_for % g == 0 and g in (1, 2, 4, 8)


@pytest.mark.parametrize("fn, words", [
    ("missing_module_xyz:make", "cannot import 'missing_module_xyz'"),
    ("{pkg}:nothing_here", "has no function 'nothing_here'"),
    ("{pkg}:wrong_signature", "must accept keyword arguments num_classes and in_channels"),
    ("{pkg}:wrong_output", "must be logits [2, num_classes=10]"),
    ("{pkg}:not_a_module", "not a torch.nn.Module"),
    ("{pkg}:raises", "failed (RuntimeError: boom)"),
])
def test_bad_factory_is_one_line_naming_arch(factories, fn, words):
    with pytest.raises(ConfigError) as exc:
        make_model(fn.format(pkg=factories), "none", 10, 1, image_size=8)
    msg = str(exc.value)
    assert msg.startswith("arch: ") and words in msg and "\n" not in msg


def test_config_accepts_factory_and_paths_and_rejects_inconsistent_keys():
    base = {"dataset": "my.npz", "arch": "pkg.mod:make", "pool_size": 0,
            "data": {"num_classes": 3}, "audit": {"model_file": "pkg/mod.py"}}
    cfg = config_from_dict(base)
    assert cfg.arch == "pkg.mod:make" and cfg.pool_size == 0
    bad = [({**base, "data": {}}, "data.num_classes"),
           ({**base, "audit": {}}, "audit.model_file"),
           ({**base, "arch": "pkg mod"}, "arch"),
           ({**base, "dataset": "fashion_mnist", "pool_size": 0, "data": {}}, "pool_size"),
           ({**base, "audit": {"model_file": "pkg/mod.py", "members": "m.npy"}}, "audit.members"),
           ({**base, "noise_rate": 0.05, "ood_rate": 0.0,
             "audit": {"model_file": "pkg/mod.py", "target_weights": "w.pt"}}, "noise_rate / ood_rate")]
    for raw, key in bad:
        with pytest.raises(ConfigError, match=f"^{key}: "):
            config_from_dict(raw)


# ---------------------------------------------------------------- your data

def _npz(path, **arrays):
    np.savez(path, **arrays)
    return path


@pytest.mark.parametrize("layout", ["nchw", "nhwc", "nhw", "float01", "float255"])
def test_npz_layouts_give_the_same_uint8_images(tmp_path, rng, layout):
    x = rng.integers(0, 256, (20, 1, 8, 8), dtype=np.uint8)
    stored = {"nchw": x, "nhwc": x.transpose(0, 2, 3, 1), "nhw": x[:, 0],
              "float01": x.astype(np.float32) / 255, "float255": x.astype(np.float64)}[layout]
    y = rng.integers(0, 4, 20)
    train, test = load_npz_images(_npz(tmp_path / "d.npz", x=stored, y=y), 4)
    assert test is None and train.x.dtype == np.uint8
    np.testing.assert_array_equal(train.x, x)
    np.testing.assert_array_equal(train.index, np.arange(20))


def test_npz_without_test_split_holds_out_and_keeps_source_rows(tmp_path, rng):
    x = rng.integers(0, 256, (50, 3, 6, 6), dtype=np.uint8)
    y = rng.integers(0, 3, 50)
    path = _npz(tmp_path / "d.npz", x=x, y=y)
    train, test = load_user(str(path), DataConfig(num_classes=3, test_size=10))
    assert len(train.y) == 40 and len(test.y) == 10
    np.testing.assert_array_equal(train.x, x[train.index])  # rows name the file's rows
    again = load_user(str(path), DataConfig(num_classes=3, test_size=10))[0]
    np.testing.assert_array_equal(again.index, train.index)  # a property of the file


@pytest.mark.parametrize("arrays, words", [
    ({"y": np.zeros(4, int)}, "missing arrays ['x']"),
    ({"x": np.zeros((4, 1, 5, 5), np.uint8)}, "missing arrays ['y']"),
    ({"x": np.zeros((4, 1, 5, 5), np.uint8), "y": np.array([0, 1, 2, 3])}, "labels must lie in [0, data.num_classes=3)"),
    ({"x": np.zeros((4, 1, 5, 5), np.uint8), "y": np.array([0, 1, -1, 2])}, "labels must lie in"),
    ({"x": np.zeros((4, 1, 5, 5), np.uint8), "y": np.zeros(3, int)}, "one label per image"),
    ({"x": np.zeros((4, 1, 5, 5), np.uint8), "y": np.zeros(4)}, "expected integer class labels"),
    ({"x": np.zeros((4, 1, 5, 5), np.uint8), "y": np.zeros(4, int),
      "test_x": np.zeros((2, 1, 6, 6), np.uint8), "test_y": np.zeros(2, int)}, "same [C, H, W]"),
    ({"x": np.zeros((4, 1, 5, 5), np.uint8), "y": np.zeros(4, int), "test_x": np.zeros((2, 1, 5, 5))},
     "only one of `test_x` / `test_y`"),
    ({"x": np.zeros((4, 1, 5, 7), np.uint8), "y": np.zeros(4, int)}, "square images"),
    ({"x": np.zeros((4, 5, 5, 5), np.uint8), "y": np.zeros(4, int)}, "1 or 3 channels"),
    ({"x": np.full((4, 1, 5, 5), 300.0), "y": np.zeros(4, int)}, "spans [300, 300]"),
])
def test_bad_npz_is_one_line(tmp_path, arrays, words):
    with pytest.raises(DataError) as exc:
        load_npz_images(_npz(tmp_path / "d.npz", **arrays), 3)
    assert words in str(exc.value) and "\n" not in str(exc.value)


def _image_folder(root, rng, classes=("cat", "dog", "eel"), per=4, size=(10, 12)):
    from PIL import Image

    pixels = {}
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(per):
            a = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
            Image.fromarray(a).save(root / c / f"{i}.png")
            pixels[(c, i)] = a
    return pixels


def test_image_folder_resizes_converts_and_labels_in_sorted_order(tmp_path, rng):
    from PIL import Image

    pixels = _image_folder(tmp_path / "imgs", rng)
    train, test = load_image_folder(tmp_path / "imgs", DataConfig(num_classes=3, image_size=8, channels=1))
    assert test is None and train.x.shape == (12, 1, 8, 8) and train.x.dtype == np.uint8
    np.testing.assert_array_equal(train.y, np.repeat([0, 1, 2], 4))
    ref = np.asarray(Image.fromarray(pixels[("dog", 2)]).convert("L").resize((8, 8), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(train.x[6, 0], ref)
    rgb = load_image_folder(tmp_path / "imgs", DataConfig(num_classes=3, image_size=8))[0]
    assert rgb.x.shape == (12, 3, 8, 8)


def test_image_folder_train_test_split_and_errors(tmp_path, rng):
    _image_folder(tmp_path / "split" / "train", rng)
    _image_folder(tmp_path / "split" / "test", rng, per=2)
    train, test = load_user(str(tmp_path / "split"), DataConfig(num_classes=3, image_size=6))
    assert len(train.y) == 12 and len(test.y) == 6
    with pytest.raises(DataError, match="^data.num_classes: 4, but .* has 3 class folders"):
        load_image_folder(tmp_path / "split" / "train", DataConfig(num_classes=4, image_size=6))
    with pytest.raises(DataError, match="^data.image_size: required"):
        load_image_folder(tmp_path / "split" / "train", DataConfig(num_classes=3))
    (tmp_path / "split" / "train" / "cat" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match="broken.png: not a readable image"):
        load_image_folder(tmp_path / "split" / "train", DataConfig(num_classes=3, image_size=6))


# ---------------------------------------------------------------- your trained model

def _target_and_shadows(effect: float, seed: int, n: int = 3000):
    """Model 0 as 'your model' (members: its keep row); models 2.. as shadows."""
    phi, keep = synthetic_phi(18, n, 2, effect, seed)
    phi = phi[0]
    logp = np.logaddexp.reduce(log_prob_from_margin(phi), axis=2) - np.log(2)
    target = TargetSignals(phi[0], logp[0], np.ones(n, bool))
    sh = slice(2, None)
    shadows = Signals(phi[sh], logp[sh], np.ones_like(keep[sh]), keep[sh], np.arange(16))
    return target, shadows, keep[0]


def test_own_model_attack_is_calibrated_at_null_and_sees_a_signal():
    cfg = config_from_dict({"attack": {"rmia_population": 300}})
    null_lira, null_rmia, med = [], [], []
    for seed in range(4):
        target, shadows, member = _target_and_shadows(0.0, seed)
        e = exposure(target, shadows, cfg)
        null_lira.append(membership_metrics(e, member)["auc"])
        null_rmia.append(membership_metrics(offline_rmia(target, shadows, cfg), member)["auc"])
        med.append(np.median(e))
    assert abs(np.mean(null_lira) - 0.5) < 0.015 and abs(np.mean(null_rmia) - 0.5) < 0.015
    # a non-member's p-value is uniform: median exposure log10(2) = 0.30
    assert 0.22 < np.mean(med) < 0.38
    target, shadows, member = _target_and_shadows(1.0, 9)
    e = exposure(target, shadows, cfg)
    m = membership_metrics(e, member)
    assert m["auc"] > 0.65
    assert m["n_members"] == member.sum() and m["n_nonmembers"] == (~member).sum()
    # the model's non-members are OUT samples like the shadows': a calibrated reference
    c = calibration(e[~member])
    assert abs(c["nonmember_median"] - c["expected_median"]) < 0.06
    assert 0.0 < c["nonmember_share_at_least_2"] < 0.03


def test_read_members(tmp_path):
    index = np.array([0, 2, 3, 5, 8])
    np.save(tmp_path / "m.npy", np.array([2, 8, 11]))
    member, listed = read_members(tmp_path / "m.npy", index)
    np.testing.assert_array_equal(member, [0, 1, 0, 0, 1])
    assert listed == 3  # row 11 is not in the pool
    (tmp_path / "m.txt").write_text("3\n5\n")
    np.testing.assert_array_equal(read_members(tmp_path / "m.txt", index)[0], [0, 0, 1, 1, 0])
    for bad, words in ((np.array([1, 1]), "repeated"), (np.array([-1]), "negative index"),
                       (np.array([0.5]), "integer array"), (np.array([1, 4]), "none of its 2")):
        np.save(tmp_path / "b.npy", bad)
        with pytest.raises(InputError, match=words):
            read_members(tmp_path / "b.npy", index)


def test_generated_example_dvc_yaml_is_up_to_date():
    from bnmem.audit_project import init
    ok, said = init(ROOT / "examples" / "audit", check=True)
    assert ok, said


def test_packaged_pipeline_is_the_checkouts_dvc_yaml():
    """`bnmem audit init` writes an audit's dvc.yaml from the package's copy of dvc.yaml (a
    wheel has no checkout): after editing dvc.yaml, `cp dvc.yaml src/bnmem/stages/pipeline.yaml`."""
    from bnmem.audit_project import PIPELINE
    assert PIPELINE.read_text() == (ROOT / "dvc.yaml").read_text()


def test_old_tool_path_still_checks_the_example():
    res = run_stage("../tools/audit_project.py", "examples/audit", "--check")
    assert res.returncode == 0, res.stdout + res.stderr


def test_prepare_your_npz_with_ood_from_another_npz(tmp_path, rng):
    """prepare on your own data: pool_size 0 keeps file order; OOD images come from your
    second .npz (other size and channels: converted); labels stay in range."""
    x = rng.integers(0, 256, (120, 12, 12, 1), dtype=np.uint8)
    np.savez(tmp_path / "mine.npz", x=x, y=rng.integers(0, 4, 120),
             test_x=rng.integers(0, 256, (30, 12, 12, 1), dtype=np.uint8), test_y=rng.integers(0, 4, 30))
    np.savez(tmp_path / "foreign.npz", x=rng.integers(0, 256, (40, 3, 20, 20), dtype=np.uint8),
             y=np.zeros(40, np.int64))
    params = {"dataset": str(tmp_path / "mine.npz"), "pool_size": 0, "noise_rate": 0.05,
              "ood_rate": 0.05, "data": {"num_classes": 4, "test_size": 30,
                                         "ood_source": str(tmp_path / "foreign.npz")}}
    (tmp_path / "p.yaml").write_text(__import__("yaml").safe_dump(params))
    args = ("--params", str(tmp_path / "p.yaml"), "--pool", str(tmp_path / "pool.npz"),
            "--test", str(tmp_path / "test.npz"))
    res = run_main("prepare", *args)  # a file of yours that dvc.yaml does not track
    assert res.returncode == 2 and "data.ood_source: " in res.stderr and "--ood-source" in res.stderr
    res = run_main("prepare", *args, "--ood-source", str(tmp_path / "foreign.npz"))
    assert res.returncode == 0, res.stderr
    pool = np.load(tmp_path / "pool.npz")
    assert pool["x"].shape == (120, 1, 12, 12) and (pool["kind"] == 2).sum() == 6
    assert (pool["kind"] == 1).sum() == 6 and pool["y_train"].max() < 4
    np.testing.assert_array_equal(pool["index"], np.arange(120))
    clean = pool["kind"] == 0
    np.testing.assert_array_equal(pool["x"][clean], x.transpose(0, 3, 1, 2)[clean])
    params["data"]["ood_source"] = None
    (tmp_path / "p.yaml").write_text(__import__("yaml").safe_dump(params))
    res = run_main("prepare", "--params", str(tmp_path / "p.yaml"), "--pool",
                    str(tmp_path / "pool2.npz"), "--test", str(tmp_path / "test2.npz"))
    assert res.returncode == 2 and "data.ood_source: needed for ood_rate > 0" in res.stderr
    assert not (tmp_path / "pool2.npz").exists()


def test_split_keeps_source_rows_so_members_map_through_a_sampled_pool(rng):
    from bnmem.data.corrupt import split
    from bnmem.data.images import Images

    x = np.arange(60, dtype=np.uint8).reshape(60, 1, 1, 1).repeat(4, 2).repeat(4, 3)
    # source rows 10..59 are training images (rows 0..9 were held out), pixel value = row
    train = Images(x[10:], np.zeros(50, np.int64), np.arange(10, 60))
    pool, _ = split(train, Images(x[:10], np.zeros(10, np.int64)), 20, 5, rng)
    assert len(set(pool.index.tolist())) == 20 and not np.array_equal(pool.index, np.arange(10, 30))
    np.testing.assert_array_equal(pool.x[:, 0, 0, 0], pool.index)  # each image is its row
    member = np.isin(pool.index, pool.index[::2])
    assert member.sum() == 10


def test_prepare_reads_an_image_folder(tmp_path, rng):
    _image_folder(tmp_path / "imgs", rng, per=10)
    params = {"dataset": str(tmp_path / "imgs"), "pool_size": 0, "noise_rate": 0.0,
              "ood_rate": 0.0, "data": {"num_classes": 3, "test_size": 10, "image_size": 10,
                                        "channels": 1}}
    (tmp_path / "p.yaml").write_text(__import__("yaml").safe_dump(params))
    res = run_main("prepare", "--params", str(tmp_path / "p.yaml"), "--pool",
                    str(tmp_path / "pool.npz"), "--test", str(tmp_path / "test.npz"))
    assert res.returncode == 0, res.stderr
    pool, test = np.load(tmp_path / "pool.npz"), np.load(tmp_path / "test.npz")
    assert pool["x"].shape == (20, 1, 10, 10) and test["x"].shape == (10, 1, 10, 10)
    assert list(pool["index"]) == sorted(pool["index"]) and pool["index"].max() < 30


def test_audit_init_never_replaces_a_dvc_yaml_it_did_not_write(tmp_path):
    from bnmem.audit_project import init
    from bnmem.core.io import InputError
    shutil.copy(ROOT / "examples" / "audit" / "params.yaml", tmp_path)
    (tmp_path / "dvc.yaml").write_text("stages:\n  mine:\n    cmd: echo mine\n")
    with pytest.raises(InputError, match="not written by `bnmem audit init`"):
        init(tmp_path)
    assert "echo mine" in (tmp_path / "dvc.yaml").read_text()
    ok, _ = init(tmp_path, force=True)
    assert ok and "bnmem.stages.prepare" in (tmp_path / "dvc.yaml").read_text()
    ok, _ = init(tmp_path)  # its own file: rewritten without --force
    assert ok


def test_audit_of_a_builtin_dataset_has_no_dataset_file_dependency(tmp_path):
    from bnmem.audit_project import project_yaml
    (tmp_path / "params.yaml").write_text("dataset: fashion_mnist\n")
    spec = yaml.safe_load(project_yaml(tmp_path))
    assert "${dataset}" not in spec["stages"]["prepare"]["deps"]
