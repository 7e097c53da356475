"""train_stack against the plain per-model loop (pipeline.fit): same models, step for step."""
import dataclasses

import numpy as np
import pytest
import torch

from bnmem.config import Config
from bnmem.data import preprocess
from bnmem.pipeline import build, fit, model_meta
from bnmem.stacked import stack_states, train_stack, unstack_states

N, K = 101, 3  # odd pool: subsets of 50 and 51 samples, so batch sizes differ by one


def _setup(arm: str, n: int = N, image: tuple[int, int] = (1, 28), epochs: int = 2):
    rng = np.random.default_rng(0)
    dataset = "fashion_mnist" if image[0] == 1 else "cifar10"
    x = preprocess(rng.integers(0, 256, (n, image[0], image[1], image[1]), dtype=np.uint8), dataset)
    y = torch.as_tensor(rng.integers(0, 10, n))
    cfg = Config(dataset=dataset, arms=(arm,), reg_strength=0.5,
                 train=dataclasses.replace(Config().train, epochs=epochs, batch_size=16,
                                           device="cpu"))
    meta = model_meta(cfg, arm, image[0], image[1])
    keep = np.zeros((K, n), dtype=bool)
    keep[0, rng.permutation(n)[: n // 2]] = True  # 50
    keep[1] = ~keep[0]  # 51
    keep[2, rng.permutation(n)[: n // 2 + 1]] = True  # 51
    return cfg, meta, x, y, keep


def _check(arm: str, **kw) -> None:
    cfg, meta, x, y, keep = _setup(arm, **kw)
    init_seeds, order_seeds = [11, 12, 13], [21, 22, 23]
    states, hists = train_stack(cfg, arm, x, y, keep, meta, init_seeds, order_seeds)
    probe = x[:32]
    for j in range(K):
        ref, ref_hist = fit(cfg, arm, x[keep[j]], y[keep[j]], meta, init_seeds[j], order_seeds[j])
        ref_sd = ref.state_dict()
        assert list(states[j]) == list(ref_sd)
        assert all(states[j][n].shape == ref_sd[n].shape for n in ref_sd)
        model = build(meta)
        model.load_state_dict(states[j])
        model.eval(), ref.eval()
        with torch.no_grad():
            torch.testing.assert_close(model(probe), ref(probe), atol=1e-4, rtol=1e-4)
        for n in ref_sd:  # weights and BN running statistics / counters
            torch.testing.assert_close(states[j][n], ref_sd[n], atol=1e-4, rtol=1e-4)
        assert hists[j][-1]["loss"] == pytest.approx(ref_hist[-1]["loss"], abs=1e-4)
        assert hists[j][-1]["penalty"] == pytest.approx(ref_hist[-1]["penalty"], abs=1e-4)


@pytest.mark.parametrize("arm", ["none", "batchnorm", "batchnorm_reg"])
def test_matches_plain_loop(arm):
    _check(arm)


def test_penalty_is_active():
    cfg, meta, x, y, keep = _setup("batchnorm_reg", epochs=1)
    _, hists = train_stack(cfg, "batchnorm_reg", x, y, keep, meta, [1, 2, 3], [4, 5, 6])
    assert all(h[-1]["penalty"] > 0 for h in hists)


@pytest.mark.parametrize("arm", ["groupnorm", "layernorm"])
def test_matches_plain_loop_groupnorm(arm):
    _check(arm, epochs=1)


def test_colour_32px():
    _check("batchnorm", image=(3, 32), epochs=1)


def test_step_counts_differ():
    # 32 vs 33 samples with batch 16: 2 vs 3 steps per epoch -> two stacks, same results
    cfg, meta, x, y, _ = _setup("batchnorm", n=65, epochs=1)
    keep = np.zeros((2, 65), dtype=bool)
    keep[0, :32], keep[1, 32:] = True, True
    states, _ = train_stack(cfg, "batchnorm", x, y, keep, meta, [1, 2], [3, 4])
    for j in range(2):
        ref, _ = fit(cfg, "batchnorm", x[keep[j]], y[keep[j]], meta, [1, 2][j], [3, 4][j])
        for n, v in ref.state_dict().items():
            torch.testing.assert_close(states[j][n], v, atol=1e-4, rtol=1e-4)


def test_stack_roundtrip():
    models = [build(model_meta(Config(), "batchnorm", 1, 28), seed=s) for s in (1, 2)]
    back = unstack_states(stack_states(models))
    for m, sd in zip(models, back):
        for n, v in m.state_dict().items():
            assert torch.equal(sd[n], v)
