"""Shadow shards: balanced keep masks, per-model seeds, and resume after SIGKILL."""
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import yaml

from bnmem.core.keep import keep_matrix
from bnmem.train.shadow import model_seeds, shard_ids
from bnmem.train.views import augment
from conftest import ROOT, run_stage


@pytest.mark.parametrize("n_models, n", [(4, 10), (16, 2001), (8, 7), (64, 1000)])
def test_keep_matrix_balanced(n_models, n):
    keep = keep_matrix(n_models, n, seed=3)
    assert keep.shape == (n_models, n) and keep.dtype == bool
    assert np.all(keep.sum(0) == n_models // 2)          # every sample IN for exactly half
    assert set(keep.sum(1)) <= {n // 2, n - n // 2}        # every model trains on half
    assert len({row.tobytes() for row in keep}) == n_models
    np.testing.assert_array_equal(keep, keep_matrix(n_models, n, seed=3))


def test_shards_partition_ids_and_seeds_differ():
    ids = np.concatenate([shard_ids(16, 4, k) for k in range(4)])
    np.testing.assert_array_equal(ids, np.arange(16))
    assert len({model_seeds(0, j) for j in range(16)}) == 16


def test_augment_views():
    x = torch.arange(2 * 1 * 4 * 4, dtype=torch.float32).view(2, 1, 4, 4)
    torch.testing.assert_close(augment(x, "hflip"), x.flip(-1))
    shifted = augment(x, "shift_1_0")
    torch.testing.assert_close(shifted[..., 1:], x[..., :-1])
    assert torch.all(shifted[..., 0] == 0)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("shadow")
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(pool_size=400, arms=["batchnorm"])
    params["data"]["test_size"] = 20
    params["train"].update(epochs=4, batch_size=16, checkpoints=[1])
    params["shadow"].update(n_models=6, chunk=2, workers=1)  # parts land 2 at a time
    (d / "params.yaml").write_text(yaml.safe_dump(params))
    recipe = dict(params)
    (d / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    res = run_stage("prepare.py", "--params", str(d / "params.yaml"), "--pool", str(d / "pool.npz"),
                    "--test", str(d / "test.npz"))
    assert res.returncode == 0, res.stderr
    return d


def shadow_cmd(d, out):
    return [sys.executable, str(ROOT / "stages/shadow.py"), "--recipe", str(d / "recipe.yaml"),
            "--pool", str(d / "pool.npz"), "--shard", "0", "--out", str(out)]


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted(tiny):
    t0 = time.perf_counter()
    full = subprocess.run(shadow_cmd(tiny, tiny / "a.npz"), capture_output=True, text=True)
    t_full = time.perf_counter() - t0
    assert full.returncode == 0, full.stderr
    parts = tiny / "b.partial"
    proc = subprocess.Popen(shadow_cmd(tiny, tiny / "b.npz"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and len(list(parts.glob("model_*.npz"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the real thing: no cleanup, no atexit
    proc.wait()
    done = len(list(parts.glob("model_*.npz")))
    assert 2 <= done < 6 and not (tiny / "b.npz").exists()
    t0 = time.perf_counter()
    resumed = subprocess.run(shadow_cmd(tiny, tiny / "b.npz"), capture_output=True, text=True)
    t_resume = time.perf_counter() - t0
    assert resumed.returncode == 0, resumed.stderr
    assert f"6 models, {done} resumed" in resumed.stderr, resumed.stderr[-2000:]
    a, b = (np.load(tiny / f, allow_pickle=False) for f in ("a.npz", "b.npz"))
    for key in ("logits", "keep", "model_ids"):
        np.testing.assert_array_equal(a[key], b[key])
    assert not parts.exists()
    print(f"\nshadow shard: uninterrupted {t_full:.1f} s, resume after kill at {done}/6 "
          f"models {t_resume:.1f} s")


def test_stale_parts_are_not_reused(tiny):
    """A part stamped by another recipe (e.g. other seed) is retrained, not reused."""
    from bnmem.train.shadow import fingerprint, load_part, save_part
    path = tiny / "stale" / "model_0.npz"
    arrays = {"logits": np.ones((3, 2, 10), np.float32), "epoch_phi": np.ones((2, 3), np.float32)}
    save_part(path, arrays, fingerprint("other recipe", "0"))
    assert load_part(path, fingerprint("this recipe", "0")) is None
    back = load_part(path, fingerprint("other recipe", "0"))
    assert set(back) == set(arrays) and all((back[k] == arrays[k]).all() for k in arrays)
    path.write_bytes(b"garbage")
    assert load_part(path, fingerprint("other recipe", "0")) is None


@pytest.mark.slow
def test_two_shards_concurrently_equal_sequential(tiny):
    """Shards are independent: run side by side in one workspace (as on two machines or
    `dvc queue start -j 2`) they write the same files as run one after the other."""
    recipe = yaml.safe_load((tiny / "recipe.yaml").read_text())
    recipe["shadow"].update(shards=2, shard_ids=[0, 1])
    (tiny / "recipe2.yaml").write_text(yaml.safe_dump(recipe))

    def cmd(shard, out):
        return [sys.executable, str(ROOT / "stages/shadow.py"), "--recipe", str(tiny / "recipe2.yaml"),
                "--pool", str(tiny / "pool.npz"), "--shard", str(shard), "--out", str(out)]

    procs = [subprocess.Popen(cmd(k, tiny / f"par_{k}.npz"), stderr=subprocess.PIPE) for k in (0, 1)]
    assert all(p.wait() == 0 for p in procs)
    for k in (0, 1):
        assert subprocess.run(cmd(k, tiny / f"seq_{k}.npz"), capture_output=True).returncode == 0
    for k in (0, 1):
        a, b = (np.load(tiny / f"{m}_{k}.npz", allow_pickle=False) for m in ("par", "seq"))
        for key in ("logits", "keep", "model_ids"):
            np.testing.assert_array_equal(a[key], b[key])
    ids = [np.load(tiny / f"seq_{k}.npz")["model_ids"] for k in (0, 1)]
    np.testing.assert_array_equal(np.concatenate(ids), np.arange(6))


@pytest.mark.parametrize("norm, arch", [("batchnorm", "lenet"), ("none", "lenet"),
                                        ("groupnorm", "lenet"), ("batchnorm", "resnet")])
def test_query_states_equals_querying_each_model(norm, arch):
    """The stacked eval pass (BN folded into the weights) gives each model's own logits."""
    from bnmem.core.records import ModelSpec
    from bnmem.models.spec import build
    from bnmem.train.shadow import query_states
    from bnmem.train.views import query
    torch.manual_seed(0)
    meta = ModelSpec(arch=arch, norm=norm, arm=norm, num_classes=10, in_channels=1, width=4,
                     image_size=28, dataset="fashion_mnist")
    states = []
    for seed in range(3):
        model = build(meta, seed=seed)
        for m in model.modules():  # non-trivial running statistics and affine parameters
            if isinstance(m, torch.nn.BatchNorm2d | torch.nn.BatchNorm1d):
                m.running_mean.uniform_(-1, 1), m.running_var.uniform_(0.5, 2)
                m.weight.data.uniform_(0.5, 2)
        states.append(model.state_dict())
    x = torch.randn(37, 1, 28, 28)
    got = query_states(meta, states, x, ("identity", "hflip"))
    assert got.shape == (3, 37, 2, 10) and got.dtype == np.float32
    for j, state in enumerate(states):
        model = build(meta)
        model.load_state_dict(state)
        np.testing.assert_allclose(got[j], query(model, x, ("identity", "hflip")), atol=1e-4, rtol=1e-4)
    # side by side on threads (the shadow stage's workers): the same bits, in model order
    for workers in (2, 5):
        np.testing.assert_array_equal(query_states(meta, states, x, ("identity", "hflip"),
                                                   workers=workers), got)
    np.testing.assert_array_equal(query_states(meta, states[::-1], x, ("identity",), workers=2),
                                  got[::-1, :, :1])


def test_budget_endpoints_are_complete_runs(tiny, one_torch_thread):
    """Each annealed endpoint (shadow.budgets) is bit for bit the model a recipe of that
    many epochs trains (its own schedule, annealed at its end), not an epoch of the longer
    run: same seeds and keep mask, nothing else changed."""
    from dataclasses import replace

    from bnmem.core.config import load_config
    from bnmem.core.recipes import budget_epochs, budget_recipe
    from bnmem.core.keep import keep_matrix
    from bnmem.data.pool import load_pool, tensors
    from bnmem.train.shadow import train_chunk
    cfg = load_config(tiny / "recipe.yaml")
    assert budget_epochs(cfg) == (1, 2)  # default [1, 2, 4] at train.epochs=4
    x, y = tensors(load_pool(tiny / "pool.npz"), cfg.dataset)
    keep = keep_matrix(cfg.shadow.n_models, len(y), cfg.seed)
    long = train_chunk(cfg, "batchnorm", x, y, keep, [0, 3], workers=1)
    short_cfg = budget_recipe(cfg, 2)
    short_cfg = replace(short_cfg, shadow=replace(short_cfg.shadow, budgets=(), track_epochs=False))
    short = train_chunk(short_cfg, "batchnorm", x, y, keep, [0, 3], workers=1)
    for a, b in zip(long, short):
        assert a["arrays"]["budget_logits"].shape == (2, *a["arrays"]["logits"].shape)
        np.testing.assert_array_equal(a["arrays"]["budget_logits"][1], b["arrays"]["logits"])
        assert "budget_logits" not in b["arrays"]
        # and differs from the 4-epoch run's logits: a different, annealed model
        assert not np.array_equal(a["arrays"]["budget_logits"][1], a["arrays"]["logits"])


def test_tracking_at_checkpoints_is_the_every_epoch_runs_rows(tiny, one_torch_thread):
    """shadow.track_at: checkpoints records the identity view after train.checkpoints and
    the final epoch only, and those rows are bit for bit the every-epoch run's (tracking
    never changes training); the models' logits are the same either way."""
    from dataclasses import replace

    from bnmem.core.config import load_config
    from bnmem.core.recipes import tracked_epochs
    from bnmem.core.keep import keep_matrix
    from bnmem.data.pool import load_pool, tensors
    from bnmem.train.shadow import train_chunk
    cfg = load_config(tiny / "recipe.yaml")
    cfg = replace(cfg, shadow=replace(cfg.shadow, budgets=(1,)))
    every = replace(cfg, shadow=replace(cfg.shadow, track_at="every"))
    assert cfg.shadow.track_at == "checkpoints" and tracked_epochs(cfg) == (1, 4)
    assert tracked_epochs(every) == (1, 2, 3, 4)
    assert tracked_epochs(replace(cfg, shadow=replace(cfg.shadow, track_epochs=False))) == ()
    # epoch 1 always (the low end of the fit range); every epoch without annealed endpoints,
    # where the within-run curve is the judged matched criterion
    later = replace(cfg, train=replace(cfg.train, checkpoints=(2,)),
                    shadow=replace(cfg.shadow, budgets=(1,)))
    assert tracked_epochs(later) == (1, 2, 4)
    assert tracked_epochs(replace(later, shadow=replace(later.shadow, budgets=(4, 8)))) == (1, 2, 3, 4)
    x, y = tensors(load_pool(tiny / "pool.npz"), cfg.dataset)
    keep = keep_matrix(cfg.shadow.n_models, len(y), cfg.seed)
    at = train_chunk(cfg, "batchnorm", x, y, keep, [1, 2], workers=1)
    full = train_chunk(every, "batchnorm", x, y, keep, [1, 2], workers=1)
    for a, b in zip(at, full):
        assert a["arrays"]["epoch_phi"].shape[0] == 2 and b["arrays"]["epoch_phi"].shape[0] == 4
        for key in ("epoch_phi", "epoch_correct"):
            np.testing.assert_array_equal(a["arrays"][key], b["arrays"][key][[0, 3]])
        np.testing.assert_array_equal(a["arrays"]["logits"], b["arrays"]["logits"])
        assert not np.array_equal(b["arrays"]["epoch_phi"][0], b["arrays"]["epoch_phi"][3])
