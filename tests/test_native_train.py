"""bnmem.native.TrainStep (lenet_train.c) against autograd on plain LeNets, one step."""
import copy

import pytest
import torch
import torch.nn.functional as F

from bnmem import native
from bnmem.models.zoo import LeNet
from bnmem.train.stacked_lenet import StackedLeNet, pad32
from bnmem.train.loop import BatchSigma, gamma_sigma_penalty

pytestmark = pytest.mark.skipif(native._lib(torch.float64, "lenet_train") is None,
                                reason="no C compiler: the kernel is optional")
BEFORE_BN = {"conv1.bias", "conv2.bias", "fc1.bias", "fc2.bias"}  # exactly 0 under BN


def _models(norm: str, c: int, size: int, k: int, dyadic: bool = False) -> list[LeNet]:
    torch.manual_seed(0)
    models = [LeNet(norm, 10, c, size).double() for _ in range(k)]
    for m in models:
        with torch.no_grad():
            for name, p in m.named_parameters():
                p.add_(0.1 * torch.randn_like(p))
                if dyadic:  # exact sums: max-pool ties stay ties
                    p.copy_(torch.round(p * 8) / 8)
    return models


def _step(models, norm, x, y, rows, counts, lam=0.0, target=1.0):
    pad = (32 - x.shape[-1]) // 2
    net = StackedLeNet([copy.deepcopy(m) for m in models], norm, torch.device("cpu"))
    step = native.TrainStep.create(net.params, net.state, norm, F.pad(x, (pad,) * 4), y,
                                   (1e-5,), (0.1,), lam, target)
    assert step is not None
    loss, pen = step(rows, counts)
    return net, loss, pen


@pytest.mark.parametrize("norm,lam,c,size", [("none", 0.0, 1, 28), ("batchnorm", 0.0, 1, 28),
                                             ("batchnorm", 0.5, 1, 28), ("batchnorm", 0.5, 3, 32),
                                             ("none", 0.0, 3, 32)])
def test_gradients_match_autograd(norm, lam, c, size):
    n, b = 120, 13
    models = _models(norm, c, size, 3)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(n, c, size, size, dtype=torch.float64, generator=gen)
    y = torch.randint(0, 10, (n,), generator=gen)
    rows = torch.stack([torch.randperm(n, generator=gen)[:b] for _ in range(3)])
    counts = torch.tensor([b, b - 4, 2])  # short batches: padded lanes must not count
    net, loss, pen = _step(models, norm, x, y, rows, counts, lam)
    for k, m in enumerate(models):
        m.train()
        batch = rows[k, :counts[k]]
        capture = BatchSigma(m) if lam else None
        ce = F.cross_entropy(m(x[batch]), y[batch])
        objective = ce
        if capture is not None:
            penalty = gamma_sigma_penalty(*capture.pop(), target=1.0)
            objective = ce + lam * penalty
            assert float(pen[k]) == pytest.approx(penalty.item(), rel=1e-10)
        m.zero_grad()
        objective.backward()
        assert float(loss[k]) == pytest.approx(ce.item(), rel=1e-12)
        top = max(float(p.grad.abs().max()) for p in m.parameters())
        for name, p in m.named_parameters():
            got = net.params[name].grad[k]
            # biases right before BN have zero gradient: both sides are rounding noise there
            zero = name in BEFORE_BN and norm == "batchnorm"
            atol = 1e-10 * (top if zero else float(p.grad.abs().max()))
            torch.testing.assert_close(got, p.grad, atol=atol, rtol=0)
        for name, v in m.state_dict().items():  # running statistics
            if "running" in name:
                torch.testing.assert_close(net.state[name][k], v, atol=1e-12, rtol=1e-12)


def test_max_pool_ties_go_to_the_first_position():
    # binary images and dyadic weights: conv sums are exact, so windows hold exact ties;
    # PyTorch routes a tie's gradient to the first position (row-major), so must the kernel
    models = _models("none", 1, 28, 2, dyadic=True)
    gen = torch.Generator().manual_seed(2)
    x = torch.randint(0, 2, (40, 1, 28, 28), generator=gen).double()
    y = torch.randint(0, 10, (40,), generator=gen)
    rows, counts = torch.stack([torch.arange(16), torch.arange(16, 32)]), torch.tensor([16, 16])
    net, _, _ = _step(models, "none", x, y, rows, counts)
    ties = 0
    for k, m in enumerate(models):
        z = m.conv1(x[rows[k]])
        win = F.unfold(F.relu(z).flatten(0, 1)[:, None], 2, stride=2)  # (B*6, 4, 196)
        ties += int(((win == win.max(1, keepdim=True).values).sum(1) > 1)
                    .logical_and(win.max(1).values > 0).sum())
        m.zero_grad()
        F.cross_entropy(m(x[rows[k]]), y[rows[k]]).backward()
        for name, p in m.named_parameters():
            torch.testing.assert_close(net.params[name].grad[k], p.grad, atol=1e-12, rtol=1e-12)
    assert ties > 100  # the check above did meet positive ties


def test_bad_input_one_line_errors():
    models = _models("batchnorm", 1, 28, 1)
    x = torch.randn(20, 1, 28, 28, dtype=torch.float64)
    y = torch.randint(0, 10, (20,))
    with pytest.raises(ValueError, match="train.batch_size"):
        _step(models, "batchnorm", x, y, torch.arange(4)[None], torch.tensor([1]))
    y_bad = y.clone()
    y_bad[3] = 10
    with pytest.raises(ValueError, match=r"y: labels must lie in \[0, classes\)"):
        _step(models, "batchnorm", x, y_bad, torch.arange(4)[None], torch.tensor([4]))


@pytest.mark.parametrize("norm", ["none", "batchnorm"])
def test_nan_propagates_as_in_pytorch(norm):
    # a NaN input makes PyTorch's loss and gradients NaN (max-pool and relu pass NaN on);
    # the kernel must not turn it into a finite loss
    models = _models(norm, 1, 28, 1)
    x = torch.randn(20, 1, 28, 28, dtype=torch.float64)
    x[2, 0, 10, 10] = float("nan")
    y = torch.randint(0, 10, (20,))
    net, loss, _ = _step(models, norm, x, y, torch.arange(8)[None], torch.tensor([8]))
    m = models[0]
    m.train()
    ref = F.cross_entropy(m(x[:8]), y[:8])
    ref.backward()
    assert torch.isnan(ref) and torch.isnan(loss[0])
    for name, p in m.named_parameters():
        assert torch.isnan(net.params[name].grad[0]).any() == torch.isnan(p.grad).any(), name


def test_rows_out_of_range():
    models = _models("none", 1, 28, 1)
    x = torch.randn(20, 1, 28, 28, dtype=torch.float64)
    with pytest.raises(ValueError, match="rows: expected"):
        _step(models, "none", x, torch.zeros(20, dtype=torch.int64), torch.tensor([[3, 20]]),
              torch.tensor([2]))


def test_not_applicable_returns_none():
    models = _models("groupnorm", 1, 28, 1)
    net = StackedLeNet(models, "groupnorm", torch.device("cpu"))
    x = torch.zeros(4, 1, 32, 32, dtype=torch.float64)
    assert native.TrainStep.create(net.params, net.state, "groupnorm", x, torch.zeros(4),
                                   (1e-5,), (0.1,), 0.0, 0.0) is None


@pytest.mark.parametrize("norm,c,size", [("none", 1, 28), ("batchnorm", 1, 28),
                                         ("batchnorm", 3, 32)])
def test_forward_matches_eval_models(norm, c, size):
    models = _models(norm, c, size, 3)
    gen = torch.Generator().manual_seed(3)
    for m in models:  # non-trivial running statistics
        m.train()
        m(torch.randn(32, c, size, size, dtype=torch.float64, generator=gen))
        m.eval()
    x = torch.randn(70, c, size, size, dtype=torch.float64, generator=gen)  # 70: a short chunk
    x[5, 0, 3, 3] = float("nan")
    net = StackedLeNet(models, norm, torch.device("cpu"))
    x_hwc = x.permute(0, 2, 3, 1).contiguous()
    calls = []
    real = native.lenet_forward
    native.lenet_forward = lambda *a: calls.append(1) or real(*a)
    try:
        got = net.predict(x_hwc, x_pad=pad32(x))
    finally:
        native.lenet_forward = real
    assert calls and got is not None  # the C forward ran (not the PyTorch fallback)
    with torch.no_grad():
        want = torch.stack([m(x) for m in models])
    assert torch.isnan(got[:, 5]).all() and torch.isnan(want[:, 5]).all()
    keep = torch.arange(70) != 5
    torch.testing.assert_close(got[:, keep], want[:, keep], atol=1e-10, rtol=1e-10)
    torch.testing.assert_close(got[:, keep], net.predict(x_hwc)[:, keep], atol=1e-10, rtol=1e-10)
    with torch.no_grad():  # a non-finite weight spoils its model's logits as in PyTorch
        net.params["fc2.weight"][1, 0, 0] = float("inf")
        models[1].fc2.weight[0, 0] = float("inf")
        want_bad = models[1](x)
    bad = net.predict(x_hwc, x_pad=pad32(x))
    assert torch.equal(torch.isnan(bad[1]), torch.isnan(want_bad))
    assert torch.equal(torch.isinf(bad[1]), torch.isinf(want_bad))
    assert not torch.isfinite(bad[1]).all() and torch.isfinite(bad[0, keep]).all()
