"""Every arch x norm trains on the CPU; arms share identical initial weights."""
import pytest
import torch

from bnmem.models.zoo import make_model

ARCHS = ["lenet", "resnet", "densenet"]
NORMS = ["none", "batchnorm", "groupnorm", "layernorm"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("channels, size", [(1, 28), (3, 32)])
def test_forward_backward(arch, norm, channels, size):
    model = make_model(arch, norm, 10, channels, width=4, image_size=size, seed=0)
    x = torch.randn(4, channels, size, size)
    out = model(x)
    assert out.shape == (4, 10)
    out.logsumexp(1).mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


@pytest.mark.parametrize("arch", ARCHS)
def test_shared_layers_start_identical(arch):
    ref = dict(make_model(arch, "none", 10, 1, width=4, seed=5).named_parameters())
    for norm in NORMS[1:]:
        other = dict(make_model(arch, norm, 10, 1, width=4, seed=5).named_parameters())
        shared = set(ref) & set(other)
        assert len(shared) == len(ref)  # norm layers only add parameters
        for name in shared:
            torch.testing.assert_close(ref[name], other[name], rtol=0, atol=0)
    a = make_model(arch, "none", 10, 1, width=4, seed=6)
    assert not torch.equal(next(a.parameters()), ref[next(iter(ref))])


def test_state_dict_round_trip(tmp_path):
    model = make_model("lenet", "batchnorm", 10, 1, seed=0)
    model(torch.randn(8, 1, 28, 28))  # move running stats
    torch.save(model.state_dict(), tmp_path / "m.pt")
    back = make_model("lenet", "batchnorm", 10, 1)
    back.load_state_dict(torch.load(tmp_path / "m.pt", weights_only=True))
    x = torch.randn(3, 1, 28, 28)
    model.eval(), back.eval()
    torch.testing.assert_close(model(x), back(x))


def test_unknown_names_rejected():
    with pytest.raises(ValueError, match="arch"):
        make_model("vgg", "none", 10, 1)
    with pytest.raises(ValueError, match="norm"):
        make_model("lenet", "weightnorm", 10, 1)


def test_registries_agree_with_the_config_names():
    """config.py validates names without torch; models.py maps them to layers/builders."""
    from bnmem.core import config
    from bnmem.models import zoo as models
    from bnmem.models import norms

    assert set(models.ARCH_BUILDERS) == set(config.ARCHS)
    assert set(norms.NORM_LAYERS) == set(config.NORMS)
    assert {config.arm_norm(a) for a in config.ARMS} <= set(config.NORMS)


@pytest.mark.parametrize("norm", NORMS)
def test_zero_init_residual_starts_every_branch_at_zero(norm):
    from bnmem.models.zoo import BasicBlock

    model = make_model("resnet", norm, 10, 1, width=4, seed=0, zero_init_residual=True).eval()
    x = torch.randn(3, 1, 28, 28)
    outs = []
    for block in model.modules():
        if isinstance(block, BasicBlock):
            block.register_forward_hook(
                lambda m, args, out: outs.append(m.norm2(m.conv2(torch.relu(m.norm1(m.conv1(args[0])))))))
    model(x)
    assert len(outs) == 8 and all(float(o.detach().abs().max()) == 0.0 for o in outs)
    plain = make_model("resnet", norm, 10, 1, width=4, seed=0)
    assert torch.equal(dict(plain.named_parameters())["stem.weight"],
                       dict(model.named_parameters())["stem.weight"])  # only the branch ends differ


def test_kaiming_init_is_he_normal_with_zero_bias_and_shared_across_arms():
    a = make_model("resnet", "none", 10, 1, width=8, seed=1, init="kaiming")
    b = make_model("resnet", "groupnorm", 10, 1, width=8, seed=1, init="kaiming")
    w = dict(a.named_parameters())["blocks.7.conv1.weight"]  # 64 x 64 x 3 x 3
    assert abs(float(w.detach().var()) / (2.0 / w[0].numel()) - 1) < 0.05
    assert all(float(p.detach().abs().max()) == 0.0 for n, p in a.named_parameters() if n.endswith("bias"))
    assert torch.equal(w, dict(b.named_parameters())["blocks.7.conv1.weight"])
    assert not torch.equal(w, dict(make_model("resnet", "none", 10, 1, width=8, seed=1)
                                   .named_parameters())["blocks.7.conv1.weight"])
