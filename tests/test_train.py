"""Training recipe: batches, schedule, the gamma/sigma penalty, and that training learns."""
import dataclasses

import numpy as np
import pytest
import torch

from bnmem.core.config import TrainConfig
from bnmem.models.zoo import make_model
from bnmem.train.loop import BatchSigma, Regularizer, gamma_sigma_penalty, train_model
from bnmem.models.runtime import predict
from bnmem.core.schedule import batch_order, lr_at
from bnmem.train.target_metrics import gamma_sigma


def test_batch_order_covers_every_sample_each_epoch():
    order = batch_order(101, 16, 3, seed=4)
    for epoch in order:
        flat = np.concatenate(epoch)
        assert sorted(flat) == list(range(101))
        assert min(len(b) for b in epoch) >= 2
    assert [b.tolist() for b in batch_order(101, 16, 3, 4)[1]] == [b.tolist() for b in order[1]]
    assert not np.array_equal(order[0][0], order[1][0])


def test_cosine_schedule_ends_near_zero():
    cfg = TrainConfig(lr=0.1)
    assert lr_at(cfg, 0, 100) == pytest.approx(0.1)
    assert lr_at(cfg, 99, 100) < 1e-3
    assert lr_at(dataclasses.replace(cfg, schedule="step"), 80, 100) == pytest.approx(1e-3)


def test_penalty_zero_below_target():
    gammas = [torch.tensor([0.5, 0.9])]
    sigmas = [torch.tensor([1.0, 1.0])]
    assert gamma_sigma_penalty(gammas, sigmas, 1.0) == 0
    assert gamma_sigma_penalty(gammas, sigmas, 0.6) == pytest.approx(0.3 ** 2 / 2)


def test_penalty_gradient_matches_finite_differences():
    torch.manual_seed(0)
    model = make_model("lenet", "batchnorm", 10, 1, seed=1).double()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.weight.mul_(3.0)  # push some |gamma|/sigma_B above 1
    x = torch.randn(16, 1, 28, 28, dtype=torch.float64)
    capture = BatchSigma(model)

    def f():
        model.train()
        model(x)
        return gamma_sigma_penalty(*capture.pop(), 1.0)

    assert f() > 0
    model.zero_grad()
    f().backward()
    for p in [model.norm1.weight, model.conv1.weight]:  # through gamma and through sigma_B
        idx = (0,) * p.dim()
        eps = 1e-6
        with torch.no_grad():
            p[idx] += eps
            up = f().item()
            p[idx] -= 2 * eps
            down = f().item()
            p[idx] += eps
        assert p.grad[idx].item() == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-9)


def _toy(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    x = torch.randn(n, 1, 28, 28, generator=g) * 0.5
    x[torch.arange(n), 0, y, y] += 3.0  # learnable: a bright pixel per class
    return x, y


def test_training_learns_and_is_deterministic():
    x, y = _toy()
    cfg = TrainConfig(epochs=3, batch_size=32, lr=0.05)
    runs = []
    for _ in range(2):
        model = make_model("lenet", "batchnorm", 10, 1, seed=0)
        hist = train_model(model, x, y, cfg, seed=0)
        runs.append(predict(model, x))
    assert hist[-1]["loss"] < hist[0]["loss"]
    assert (runs[0].argmax(1) == y).float().mean() > 0.5
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0)


def test_regularizer_lowers_gamma_over_sigma():
    x, y = _toy(512)
    cfg = TrainConfig(epochs=4, batch_size=32, lr=0.05)
    ratios = {}
    for name, reg in [("plain", None), ("reg", Regularizer(strength=5.0, target=0.5))]:
        model = make_model("lenet", "batchnorm", 10, 1, seed=0)
        train_model(model, x, y, cfg, seed=0, reg=reg)
        ratios[name] = np.median([v["median_ratio"] for v in gamma_sigma(model).values()])
    assert ratios["reg"] < ratios["plain"]


def test_warmup_ramps_linearly_then_follows_the_schedule():
    from bnmem.core.config import TrainConfig
    from bnmem.core.schedule import lr_at

    base, warm = TrainConfig(epochs=4, lr=0.1), TrainConfig(epochs=4, lr=0.1, warmup_epochs=1)
    total = 40  # 10 steps per epoch: warm-up is steps 0..9
    assert [lr_at(warm, s, total) for s in range(10)] == pytest.approx(
        [lr_at(base, s, total) * (s + 1) / 10 for s in range(10)])
    assert all(lr_at(warm, s, total) == lr_at(base, s, total) for s in range(10, total))


def test_a_budget_run_keeps_its_warm_up_in_epochs():
    """A budget run keeps the recipe's warm-up length (at most half the budget), so the
    1-, 2- and 4-epoch runs of a 12-epoch recipe with 1 warm-up epoch warm up over 0.5, 1
    and 1 epochs (scaling and rounding gave all three none, and a no-norm ResNet
    diverged); a fractional warm-up ramps over floor(fraction x steps) steps."""
    import dataclasses
    from bnmem.core.config import Config, TrainConfig
    from bnmem.core.recipes import budget_recipe
    from bnmem.core.schedule import lr_at

    cfg = dataclasses.replace(Config(), train=TrainConfig(epochs=12, warmup_epochs=1))
    assert [budget_recipe(cfg, b).train.warmup_epochs for b in (1, 2, 4)] == [0.5, 1, 1]
    assert budget_recipe(Config(), 2).train.warmup_epochs == 0
    half, base = TrainConfig(epochs=1, lr=0.1, warmup_epochs=0.5), TrainConfig(epochs=1, lr=0.1)
    total = 15  # floor(0.5 x 15) = 7 warm-up steps
    assert [lr_at(half, s, total) for s in range(total)] == pytest.approx(
        [lr_at(base, s, total) * ((s + 1) / 7 if s < 7 else 1) for s in range(total)])


def test_lenet_targets_train_as_the_shadows_do(tmp_path, one_torch_thread):
    """A LeNet target model is the stacked trainer's model with keep all True and seeds
    (seed, seed), bit for bit, its per-epoch records measured with the C eval forward; a
    non-LeNet arch keeps the plain loop."""

    from bnmem.models.spec import model_spec
    from bnmem.data.pool import tensors
    from bnmem.train.stacked import predict_states, train_stack
    from bnmem.train.target import train_target
    from conftest import tiny_target
    n = 160
    cfg, pool, test = tiny_target(tmp_path, n, 40)
    model, history, target = train_target(cfg, "batchnorm", pool, test)
    meta = target.spec
    x, y = tensors(pool, cfg.dataset)
    states, hists, _ = train_stack(cfg, "batchnorm", x, y, np.ones((1, n), bool),
                                   model_spec(cfg, "batchnorm", 1, 28), [3], [3])
    for k, v in states[0].items():
        torch.testing.assert_close(model.state_dict()[k], v, rtol=0, atol=0)
    assert [h["loss"] for h in history] == [h["loss"] for h in hists[0]]
    pred = predict_states(meta, states, x)[0].argmax(1).numpy()
    assert history[-1]["clean_train_acc"] == float((pred == pool["y_train"]).mean())
    assert len(history) == 2 and {"test_acc", "flipped_mem_acc", "lr"} <= set(history[0])
    # measured on a second thread while the next epoch trains: in epoch order, each epoch's
    # own weights (epoch 1 is not the final model), and a measurement's error is raised
    assert [h["epoch"] for h in history] == [1, 2]
    assert history[0]["clean_train_acc"] != history[1]["clean_train_acc"] or \
        history[0]["test_acc"] != history[1]["test_acc"]
    seen = []

    def on_epoch(epoch, model, rec):
        seen.append(epoch)
        if epoch == 1:
            raise RuntimeError("checkpoint disk full")
    with pytest.raises(RuntimeError, match="disk full"):
        train_target(cfg, "batchnorm", pool, test, on_epoch)
    assert seen[0] == 1


def test_lower_median_is_torch_median_and_nan_propagates():
    from bnmem.train.target_metrics import lower_median
    v = [0.9, 0.2, 0.5, 0.7]
    assert lower_median(v) == float(torch.tensor(v, dtype=torch.float64).median())
    assert np.isnan(lower_median([0.1, float("nan"), 0.3]))
    assert np.isnan(float(torch.tensor([0.1, float("nan"), 0.3]).median()))


def test_gamma_push_in_chunks_equals_one_pass(tmp_path, one_torch_thread):
    """bnmem.train.target_metrics.gamma_push sums the mean loss's gamma gradient over chunks
    (bounded memory: bench/bench_gamma_push.py) and equals the one-pass reference up to
    float64 rounding, for chunks that split every group unevenly, a chunk larger than a
    group, and one sample a chunk; a group's sign is the push's, so flipped samples (which
    the model has not fit) differ from clean ones."""
    import math

    from bnmem.data.pool import tensors
    from bnmem.train.target import train_target
    from bnmem.train.target_metrics import gamma_push
    from conftest import tiny_target
    cfg, pool, test = tiny_target(tmp_path, 96, 32, flipped=12)
    model, _, _ = train_target(cfg, "batchnorm", pool, test)
    x, _ = tensors(pool, cfg.dataset)
    masks = {"clean": pool["kind"] == 0, "flipped": pool["kind"] == 1}
    ref = gamma_push(model, x, pool["y_train"], masks, chunk=None)
    assert set(ref) and all(set(v) == {"clean", "flipped"} for v in ref.values())
    for chunk in (7, 1000, 1):
        got = gamma_push(model, x, pool["y_train"], masks, chunk=chunk)
        for layer, groups in ref.items():
            for group, value in groups.items():
                assert math.isclose(got[layer][group], value, rel_tol=1e-6, abs_tol=1e-12), (chunk, layer, group)
    assert any(v["clean"] != v["flipped"] for v in ref.values())
