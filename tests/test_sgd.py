"""bnmem.train.sgd.SGD against torch.optim.SGD (the reference it replaces on the CPU): the
same parameters, bit for bit, after steps with a changing learning rate, momentum, weight
decay and a parameter without a gradient; and the train stage's process never imports
torch._dynamo (what constructing a torch.optim optimizer costs)."""
import subprocess
import sys

import pytest
import torch

from bnmem.train.sgd import SGD, make_sgd


def _params(seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(6, 1, 5, 5, generator=g, requires_grad=True),
            torch.randn(120, generator=g, requires_grad=True),
            torch.randn(3, 4, generator=g, requires_grad=True)]


@pytest.mark.parametrize("momentum,wd", [(0.9, 5e-4), (0.0, 5e-4), (0.9, 0.0), (0.0, 0.0)])
def test_sgd_matches_torch_bit_for_bit(momentum, wd):
    ours, ref = _params(0), _params(0)
    opt_a = SGD(ours, lr=0.05, momentum=momentum, weight_decay=wd)
    opt_b = torch.optim.SGD(ref, lr=0.05, momentum=momentum, weight_decay=wd)
    g = torch.Generator().manual_seed(1)
    for step in range(7):
        lr = 0.05 * (1 + step) / 7  # the schedule writes the group's lr before each step
        grads = [torch.randn(p.shape, generator=g) for p in ours]
        for opt, ps in ((opt_a, ours), (opt_b, ref)):
            opt.param_groups[0]["lr"] = lr
            opt.zero_grad(set_to_none=True)
            for k, (p, d) in enumerate(zip(ps, grads)):
                if not (k == 2 and step % 3 == 1):  # a parameter without a gradient: skipped
                    p.grad = d.clone()
            opt.step()
        for a, b in zip(ours, ref):
            assert torch.equal(a, b), (momentum, wd, step)
    assert any(not torch.equal(a, b) for a, b in zip(ours, _params(0)))  # it did move


def test_make_sgd_chooses_ours_on_cpu():
    assert type(make_sgd(_params(0), "cpu", 0.1, 0.9, 0.0)) is SGD


def test_training_never_imports_the_compiler_stack():
    """A BN LeNet trained one epoch through bnmem.train.loop.train_model (the plain loop;
    the stacked loop makes its optimizer with the same make_sgd) leaves torch._dynamo
    unimported, so no train or shadow stage start pays its ~1.5 s; the same run with
    torch.optim.SGD does import it (the check can fail)."""
    code = ("import sys, bnmem, torch\n"
            "from bnmem.core.config import TrainConfig\n"
            "from bnmem.models.zoo import make_model\n"
            "from bnmem.train import loop\n"
            "if sys.argv[1] == 'torch':\n"
            "    loop.make_sgd = lambda ps, dev, **kw: torch.optim.SGD(ps, **kw)\n"
            "m = make_model('lenet', 'batchnorm', 10, 1, seed=0)\n"
            "x, y = torch.randn(16, 1, 28, 28), torch.arange(16) % 10\n"
            "loop.train_model(m, x, y, TrainConfig(epochs=1, batch_size=8, device='cpu'), 0)\n"
            "print('torch._dynamo' in sys.modules)")
    for which, imported in (("ours", "False"), ("torch", "True")):
        out = subprocess.run([sys.executable, "-c", code, which], capture_output=True,
                             text=True, check=True)
        assert out.stdout.strip() == imported, (which, out.stderr[-2000:])
