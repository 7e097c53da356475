"""Per-sample gradient norms: vmap vs a per-example autograd loop, batch-coupled rows vs the
batch gradient, chunking, and the grads stage end to end."""
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import yaml

from bnmem import native
from bnmem.core.config import config_from_dict
from bnmem.data.images import preprocess
from bnmem.grads.per_sample import (
    batch_grads, grad_norms, has_batchnorm, layer_groups, per_sample_grads,
)
from bnmem.grads.summary import histogram, summarize
from bnmem.models.zoo import make_model
from bnmem.core.records import TargetRecord
from bnmem.models.spec import build, model_spec
from bnmem.core.schedule import batch_order

ROOT = Path(__file__).resolve().parents[1]
ARCHS = ("lenet", "resnet", "densenet")
NORMS = ("none", "batchnorm", "groupnorm", "layernorm")
RTOL = 1e-5


def _model(arch: str, norm: str, seed: int = 0) -> torch.nn.Module:
    """float64 model with non-trivial BN running stats and norm affine parameters."""
    model = make_model(arch, norm, 10, 1, width=4, image_size=28, seed=seed).double()
    g = torch.Generator().manual_seed(seed + 1)

    def rand(t: torch.Tensor, scale: float, shift: float = 0.0, normal: bool = True
             ) -> torch.Tensor:
        r = torch.randn if normal else torch.rand
        return shift + scale * r(t.shape, generator=g, dtype=torch.float64)

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(rand(m.running_mean, 0.3))
                m.running_var.copy_(rand(m.running_var, 1.0, 0.5, normal=False))
            if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.GroupNorm)):
                m.weight.copy_(rand(m.weight, 0.3, 1.0))
                m.bias.copy_(rand(m.bias, 0.1))
    return model


def _inputs(arch: str, n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    size = 28 if arch == "lenet" else 8  # resnet / densenet pool adaptively: 8 px is enough
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 1, size, size, generator=g, dtype=torch.float64),
            torch.randint(0, 10, (n,), generator=g))


def _loop_norms(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """Reference: one eval-mode backward per sample; squared norms per layer [L, N]."""
    model.eval()
    groups = layer_groups(model)
    params = dict(model.named_parameters())
    out = np.zeros((len(groups), len(x)))
    for i in range(len(x)):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + 1]), y[i:i + 1]).backward()
        for li, names in enumerate(groups.values()):
            out[li, i] = sum(float(params[k].grad.pow(2).sum()) for k in names)
    return out


@pytest.mark.parametrize("method", ["vmap", "hooks"])
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("arch", ARCHS)
def test_vmap_matches_loop(arch: str, norm: str, method: str) -> None:
    model = _model(arch, norm)
    x, y = _inputs(arch, 4)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    res = grad_norms(model, x, y, "eval", chunk_size=3, method=method)
    ref = _loop_norms(model, x, y)
    np.testing.assert_allclose(res.norms, np.sqrt(ref.sum(0)), rtol=RTOL)
    np.testing.assert_allclose(res.layer_norms, np.sqrt(ref), rtol=RTOL, atol=1e-12)
    np.testing.assert_allclose(np.sqrt((res.layer_norms ** 2).sum(0)), res.norms, rtol=1e-12)
    assert res.layers == tuple(layer_groups(model))
    for k, v in model.state_dict().items():  # weights and running stats untouched
        assert torch.equal(v, state[k]), k


needs_cc = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None,
                              reason="no C compiler: bnmem.native is optional")


@needs_cc
@pytest.mark.parametrize("norm", ["none", "batchnorm"])
@pytest.mark.parametrize("shape", ["fashion", "cifar100", "ties"])
def test_native_kernel_matches_loop(norm: str, shape: str) -> None:
    if shape == "cifar100":  # 3 channels, 32 px (no padding), 100 classes
        model = make_model("lenet", norm, 100, 3, image_size=32, seed=0).double()
        g = torch.Generator().manual_seed(3)
        x = torch.randn(5, 3, 32, 32, generator=g, dtype=torch.float64)
        y = torch.randint(0, 100, (5,), generator=g)
    else:
        model = _model("lenet", norm)
        x, y = _inputs("lenet", 5)
        if shape == "ties":  # every 2x2 pooling window of conv1 ties, with different patches
            g = torch.Generator().manual_seed(4)  # small integers and dyadic weights: exact
            x = torch.randint(-3, 4, (5, 1, 14, 14), generator=g).double()  # arithmetic, exact ties
            x = x.repeat_interleave(2, 2).repeat_interleave(2, 3)
            with torch.no_grad():  # centre tap only: conv1 output = w * pixel + b
                model.conv1.weight.zero_()
                model.conv1.weight[:, 0, 2, 2] = torch.randint(-4, 5, (6,), generator=g) / 4
                model.conv1.bias.copy_(torch.randint(-4, 5, (6,), generator=g) / 8)
    assert native.supported(model)
    res = grad_norms(model, x, y, "eval", chunk_size=3, method="native")
    ref = _loop_norms(model, x, y)
    np.testing.assert_allclose(res.layer_norms, np.sqrt(ref), rtol=RTOL, atol=1e-12)
    assert res.layers == tuple(layer_groups(model))
    auto = grad_norms(model, x, y, "eval", chunk_size=3)  # auto picks the kernel
    np.testing.assert_array_equal(auto.layer_norms, res.layer_norms)


@needs_cc
def test_without_the_kernel_auto_falls_back_to_pytorch(monkeypatch) -> None:
    model = _model("lenet", "batchnorm")
    x, y = _inputs("lenet", 4)
    with_kernel = grad_norms(model, x, y, "eval")
    monkeypatch.setenv("BNMEM_NATIVE", "0")  # as on a machine without a C compiler
    assert not native.supported(model)
    without = grad_norms(model, x, y, "eval")
    np.testing.assert_allclose(without.layer_norms, with_kernel.layer_norms, rtol=1e-10)
    with pytest.raises(ValueError, match="method: 'native' needs"):
        grad_norms(model, x, y, "eval", method="native")


@needs_cc
def test_native_kernel_propagates_nan_like_pytorch() -> None:
    model = _model("lenet", "batchnorm")
    x, y = _inputs("lenet", 3)
    x[1, 0, 5, 5] = float("nan")  # one sample's input: only its norms are NaN
    res = grad_norms(model, x, y, "eval", method="native")
    ref = grad_norms(model, x, y, "eval", method="vmap")
    np.testing.assert_array_equal(np.isnan(res.norms), [False, True, False])
    np.testing.assert_array_equal(np.isnan(res.norms), np.isnan(ref.norms))
    with torch.no_grad():
        model.fc1.weight[0, 0] = float("nan")  # a weight: every sample
    assert np.isnan(grad_norms(model, x, y, "eval", method="native").norms).all()


@needs_cc
def test_native_kernel_rejects_bad_labels_and_models() -> None:
    model = _model("lenet", "none")
    x, y = _inputs("lenet", 2)
    with pytest.raises(ValueError, match=r"x: expected \[n, 1, H, W\] with one label"):
        grad_norms(model, x.expand(2, 3, 28, 28), y, "eval", method="native")
    with pytest.raises(ValueError, match="one label per sample"):
        grad_norms(model, x, y[:1], "eval", method="native")
    with pytest.raises(ValueError, match=r"y: labels must lie in \[0, classes\)"):
        grad_norms(model, x, torch.tensor([0, 10]), "eval", method="native")
    with pytest.raises(ValueError, match="method: 'native' needs a LeNet"):
        grad_norms(_model("lenet", "groupnorm"), x, y, "eval", method="native")


@pytest.mark.parametrize("arch", ARCHS)
def test_batch_rows_sum_to_batch_gradient(arch: str) -> None:
    model = _model(arch, "batchnorm")
    x, y = _inputs(arch, 5)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    model.eval()
    rows = batch_grads(model, x, y)
    assert not model.training  # the caller's flag is restored
    for k, v in model.state_dict().items():  # running stats not updated
        assert torch.equal(v, state[k]), k
    model.train()
    params = dict(model.named_parameters())
    losses = F.cross_entropy(model(x), y, reduction="none")  # one pass, shared batch stats
    full = torch.autograd.grad(losses.mean(), list(params.values()), retain_graph=True)
    for (k, p), g in zip(params.items(), full):
        torch.testing.assert_close(rows[k].sum(0) / len(x), g, rtol=RTOL, atol=1e-10)
    # Each row is grad l_i through the shared statistics (checked on the first two).
    for i in range(2):
        gi = torch.autograd.grad(losses[i], list(params.values()), retain_graph=True)
        for (k, _), g in zip(params.items(), gi):
            torch.testing.assert_close(rows[k][i], g, rtol=RTOL, atol=1e-10)


@pytest.mark.parametrize("norm", ("none", "groupnorm", "layernorm"))
def test_batch_equals_eval_without_bn(norm: str) -> None:
    model = _model("lenet", norm)
    x, y = _inputs("lenet", 6)
    rows, per = batch_grads(model, x, y), per_sample_grads(model, x, y)
    for k in per:
        torch.testing.assert_close(rows[k], per[k], rtol=1e-10, atol=1e-12)
    batches = batch_order(len(y), 3, 1, seed=0)[0]
    np.testing.assert_array_equal(grad_norms(model, x, y, "batch", batches=batches).norms,
                                  grad_norms(model, x, y, "eval").norms)


def test_batch_differs_for_bn_and_never_single_sample() -> None:
    model = _model("lenet", "batchnorm")
    x, y = _inputs("lenet", 6)
    batches = batch_order(len(y), 3, 1, seed=0)[0]
    assert not np.allclose(grad_norms(model, x, y, "batch", batches=batches).norms,
                           grad_norms(model, x, y, "eval").norms)
    with pytest.raises(ValueError, match="single-sample"):
        batch_grads(model, x[:1], y[:1])
    with pytest.raises(ValueError, match="exactly once"):
        grad_norms(model, x, y, "batch", batches=[np.arange(3), np.arange(3)])


@needs_cc  # a compiler that fails on the kernel is a failure, not a skip
def test_native_batch_rows_match_jacrev() -> None:
    """The C batch-coupled path (bnmem.native.lenet_batch_sq) against torch.func's jacrev
    (method vmap, the reference): batches of 2, 5 and 13 samples, float64 and a float32
    model (both computed in float64, rounded to float32's grid), weights and running
    statistics untouched; without BN coupling a wrong seed would still agree, so the
    coupling is checked to matter (batch != eval)."""
    model = _model("lenet", "batchnorm")
    assert native.batch_supported(model)
    x, y = _inputs("lenet", 20)
    batches = [np.arange(0, 2), np.arange(2, 7), np.arange(7, 20)[::-1].copy()]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fast = grad_norms(model, x, y, "batch", batches=batches, method="native")
    ref = grad_norms(model, x, y, "batch", batches=batches, method="vmap")
    np.testing.assert_allclose(fast.norms, ref.norms, rtol=1e-12)
    np.testing.assert_allclose(fast.layer_norms, ref.layer_norms, rtol=1e-12, atol=1e-15)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
    assert not np.allclose(fast.norms, grad_norms(model, x, y, "eval").norms, rtol=1e-3)
    m32, x32 = copy.deepcopy(model).float(), x.float()
    f32 = grad_norms(m32, x32, y, "batch", batches=batches, method="native")
    r32 = grad_norms(m32, x32, y, "batch", batches=batches, method="vmap")
    np.testing.assert_allclose(f32.norms, r32.norms, rtol=1e-6)  # float32's grid
    np.testing.assert_array_equal(f32.layer_norms, f32.layer_norms.astype(np.float32))
    with pytest.raises(ValueError, match="method: 'native' needs a BatchNorm LeNet"):
        grad_norms(_model("resnet", "batchnorm"), *_inputs("resnet", 4), "batch",
                   batches=[np.arange(4)], method="native")


@pytest.mark.parametrize("definition", ("eval", "batch"))
def test_chunking_invariant(definition: str) -> None:
    model = _model("lenet", "batchnorm")
    x, y = _inputs("lenet", 10)
    batches = batch_order(len(y), 5, 1, seed=3)[0]
    one = grad_norms(model, x, y, definition, chunk_size=100, batches=batches)
    many = grad_norms(model, x, y, definition, chunk_size=3, batches=batches)
    np.testing.assert_allclose(many.norms, one.norms, rtol=1e-12)
    np.testing.assert_allclose(many.layer_norms, one.layer_norms, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("definition,method,workers", [
    ("batch", "auto", 2), ("eval", "auto", 2), ("eval", "hooks", 2), ("eval", "vmap", 2),
    ("eval", "auto", 9)])  # 9 workers > 4 chunks
def test_workers_give_the_same_norms(definition: str, method: str, workers: int) -> None:
    # threads of one torch thread each over disjoint batches / chunks, a model copy per
    # thread (hooks and functional_call touch the module)
    model = _model("lenet", "batchnorm")
    x, y = _inputs("lenet", 12)
    batches = batch_order(len(y), 4, 1, seed=5)[0]
    one = grad_norms(model, x, y, definition, chunk_size=3, batches=batches, method=method)
    threads = torch.get_num_threads()
    two = grad_norms(model, x, y, definition, chunk_size=3, batches=batches, method=method,
                     workers=workers)
    assert torch.get_num_threads() == threads  # restored
    # equal up to the summation order of a different intra-op thread count
    np.testing.assert_allclose(two.norms, one.norms, rtol=1e-10)
    np.testing.assert_allclose(two.layer_norms, one.layer_norms, rtol=1e-10, atol=1e-14)


def test_unknown_eval_method_is_rejected() -> None:
    model = _model("lenet", "none")
    x, y = _inputs("lenet", 2)
    for definition in ("eval", "batch"):
        with pytest.raises(ValueError, match="method: 'loop' is invalid; valid: auto"):
            grad_norms(model, x, y, definition, batches=[np.arange(2)], method="loop")


def test_auroc_is_the_exact_mann_whitney_count() -> None:
    """summary.auroc against a brute-force count over every (positive, negative) pair in
    exact fractions, ties included (one half each), and against sklearn's trapezoid within
    a few units in the last place; the result does not depend on the samples' order."""
    from fractions import Fraction

    from sklearn.metrics import roc_auc_score

    from bnmem.grads.summary import auroc
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(3, 400))
        pos = rng.random(n) < 0.3
        pos[:2] = True, False
        scores = rng.normal(size=n) + pos * rng.uniform(0, 2)
        if trial % 2:
            scores = np.round(scores, 1)  # many ties
        p, q = scores[pos], scores[~pos]
        exact = Fraction(2 * int((p[:, None] > q).sum()) + int((p[:, None] == q).sum()),
                         2 * p.size * q.size)
        got = auroc(pos, scores)
        assert got == float(exact)
        perm = rng.permutation(n)
        assert auroc(pos[perm], scores[perm]) == got
        assert abs(got - roc_auc_score(pos, scores)) <= 4 * np.spacing(got)
    assert auroc(np.array([True, False]), np.array([1.0, 1.0])) == 0.5
    with pytest.raises(ValueError, match="norms: NaN"):
        auroc(np.array([True, False]), np.array([np.nan, 1.0]))


def test_summarize_and_histogram() -> None:
    norms = np.array([1.0, 2.0, 3.0, 10.0, 20.0, 0.0])
    kind = np.array([0, 0, 0, 1, 1, 0], dtype=np.int8)
    m = summarize(norms, kind, "_early")
    assert m["median_norm_clean_early"] == 1.5 and m["median_norm_flipped_early"] == 15.0
    assert m["ratio_flipped_clean_early"] == 10.0 and m["auroc_corrupted_vs_clean_early"] == 1.0
    assert m["median_norm_ood_early"] is None and m["ratio_ood_clean_early"] is None
    assert not any("." in k for k in m)
    h = histogram(norms, kind, bins=5)
    assert set(h["kind"]) == {"clean", "flipped"}
    assert h["count"][h["kind"] == "clean"].sum() == 4  # the zero lands in the first bin
    assert np.allclose(h["bin_right"][:4], h["bin_left"][1:5])


def _tiny_arm(tmp_path: Path, arm: str, other: str = "every") -> dict:
    n = 24
    tmp_path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    kind = np.zeros(n, dtype=np.int8)
    kind[:3], kind[3:5] = 1, 2
    pool = tmp_path / "pool.npz"
    np.savez(pool, x=rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8),
             y_train=rng.integers(0, 10, n), y_clean=rng.integers(0, 10, n), kind=kind)
    raw = {"arms": [arm], "pool_size": n, "grads": {"chunk_size": 10, "other_definition": other},
           "train": {"epochs": 2, "batch_size": 8, "checkpoints": [1], "device": "cpu",
                     "threads": 1}}
    cfg = config_from_dict(raw)
    recipe = tmp_path / f"{arm}.yaml"
    recipe.write_text(yaml.safe_dump(raw))
    spec = model_spec(cfg, arm, 1, 28)
    (tmp_path / "ckpt").mkdir()
    torch.save(build(spec, seed=1).state_dict(), tmp_path / "ckpt" / "epoch_1.pt")
    torch.save(build(spec, seed=2).state_dict(), tmp_path / f"{arm}.pt")
    TargetRecord(spec, {}, [1, 2], {}).save(tmp_path / f"{arm}.json")
    return {"--recipe": recipe, "--pool": pool, "--model": tmp_path / f"{arm}.pt",
            "--checkpoints": tmp_path / "ckpt", "--out": tmp_path / "out" / f"{arm}.npz",
            "--metrics": tmp_path / "out" / f"{arm}.json",
            "--hist": tmp_path / "out" / f"{arm}.csv"}


def _run(paths: dict) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "stages" / "grads.py")]
    for k, v in paths.items():
        cmd += [k, str(v)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_stage_end_to_end(tmp_path: Path) -> None:
    paths = _tiny_arm(tmp_path, "batchnorm")
    proc = _run(paths)
    assert proc.returncode == 0, proc.stderr
    if native.arrays.lib(np.float32) is not None:  # a LeNet on the CPU: arrays, no torch
        assert "torch not imported" in proc.stderr, proc.stderr
    with np.load(paths["--out"], allow_pickle=False) as z:
        out = {k: z[k] for k in z.files}
    assert out["norms"].dtype == np.float64 and out["norms"].shape == (24,)
    assert out["norms_epoch"].shape == (2, 24) and list(out["epochs"]) == [1, 2]
    np.testing.assert_array_equal(out["norms_epoch"][-1], out["norms"])
    assert out["norms_batch"].shape == (24,) and out["norms_batch_epoch"].shape == (2, 24)
    assert out["layer_norms"].shape == (len(out["layers"]), 24) and "norm1" in out["layers"]
    assert str(out["definition"]) == "eval" and bool(out["batch_coupled"])
    # The final row is the --model weights under the eval definition.
    meta = TargetRecord.load(Path(paths["--model"]).with_suffix(".json")).spec
    model = build(meta)
    model.load_state_dict(torch.load(paths["--model"], weights_only=True))
    assert has_batchnorm(model)
    x = preprocess(np.load(paths["--pool"])["x"], "fashion_mnist")
    y = torch.as_tensor(np.load(paths["--pool"])["y_train"])
    np.testing.assert_allclose(grad_norms(model, x, y).norms, out["norms"], rtol=1e-5)
    metrics = json.loads(paths["--metrics"].read_text())
    for key in ("median_norm_clean", "median_norm_flipped", "median_norm_ood",
                "ratio_flipped_clean", "auroc_corrupted_vs_clean", "median_norm_flipped_early",
                "ratio_flipped_clean_batch", "auroc_corrupted_vs_clean_batch_early"):
        assert isinstance(metrics[key], float), key
    assert not any("." in k for k in metrics)
    hist = pd.read_csv(paths["--hist"])
    assert list(hist.columns) == ["kind", "bin_left", "bin_right", "count", "density"]
    assert hist.groupby("kind")["count"].sum().to_dict() == {"clean": 19, "flipped": 3, "ood": 2}


@needs_cc
@pytest.mark.parametrize("norm", ["none", "batchnorm"])
def test_arrays_path_equals_the_torch_path(norm: str, monkeypatch) -> None:
    """The grads stage's torch-free path (bnmem.grads.checkpoints on numpy arrays and the C
    kernels: what a LeNet on the CPU runs) gives the torch path's arrays, summary and
    histogram bit for bit, under both definitions, at two checkpoints with non-trivial BN
    statistics: the same kernels, so any difference is in how the inputs were prepared
    (preprocessing, padding, BN folding, float64 copies, float32 rounding)."""
    from bnmem.grads import checkpoints
    n, rng = 40, np.random.default_rng(3)
    kind = np.zeros(n, dtype=np.int8)
    kind[:4], kind[4:6] = 1, 2
    pool = {"x": rng.integers(0, 256, (n, 1, 28, 28), dtype=np.uint8),
            "y_train": rng.integers(0, 10, n), "kind": kind}
    arm = "batchnorm" if norm == "batchnorm" else "none"
    cfg = config_from_dict({"arms": [arm], "pool_size": n, "train": {"batch_size": 8, "device": "cpu"},
                            "grads": {"chunk_size": 7, "other_definition": "every", "workers": 2}})
    spec = model_spec(cfg, arm, 1, 28)
    states = [_model("lenet", norm, seed).float().state_dict() for seed in (1, 2)]
    assert checkpoints.native_norm(cfg, spec) == norm
    got = checkpoints.grads_for_arm(cfg, pool, spec, [1, 2], states, progress=False)
    monkeypatch.setattr(checkpoints, "native_norm", lambda cfg, spec: None)
    ref = checkpoints.grads_for_arm(cfg, pool, spec, [1, 2], states, progress=False)
    assert got[0].keys() == ref[0].keys() and got[1] == ref[1]
    for k in ref[0]:
        np.testing.assert_array_equal(got[0][k], ref[0][k], err_msg=k)
    for k in ref[2]:
        np.testing.assert_array_equal(got[2][k], ref[2][k], err_msg=k)
    assert np.isfinite(got[0]["norms_batch_epoch"]).all()
    if norm == "batchnorm":  # the batch-coupled rows differ from eval: both were computed
        assert not np.allclose(got[0]["norms_batch"], got[0]["norms"])


def test_array_path_only_where_the_torch_path_would_run_on_the_cpu(monkeypatch) -> None:
    """The grads stage takes the array path for a LeNet on the CPU only: not with
    train.device cuda, not under auto where a GPU driver is visible (torch resolves that),
    not for another arch; BNMEM_NATIVE=0 (no kernels) sends it to torch too."""
    from bnmem.grads import checkpoints
    from bnmem.native import arrays
    base = {"arms": ["batchnorm"], "pool_size": 40}
    spec = model_spec(config_from_dict(base), "batchnorm", 1, 28)
    if arrays.lib(np.float32) is None:
        pytest.skip("no C compiler: the kernels never build here")
    monkeypatch.setattr(checkpoints, "_gpu_present", lambda: False)
    assert checkpoints.native_norm(config_from_dict({**base, "train": {"device": "auto"}}), spec) == "batchnorm"
    assert checkpoints.native_norm(config_from_dict({**base, "train": {"device": "cuda"}}), spec) is None
    monkeypatch.setattr(checkpoints, "_gpu_present", lambda: True)
    assert checkpoints.native_norm(config_from_dict({**base, "train": {"device": "auto"}}), spec) is None
    assert checkpoints.native_norm(config_from_dict({**base, "train": {"device": "cpu"}}), spec) == "batchnorm"
    resnet = model_spec(config_from_dict({**base, "arch": "resnet"}), "batchnorm", 1, 28)
    assert checkpoints.native_norm(config_from_dict(base), resnet) is None
    monkeypatch.setenv("BNMEM_NATIVE", "0")
    assert checkpoints.native_norm(config_from_dict({**base, "train": {"device": "cpu"}}), spec) is None


def test_lenet_keys_and_eps_are_the_modules() -> None:
    """bnmem.native.arrays' LeNet state_dict keys, shapes and BN eps are those of the module."""
    from bnmem.native import arrays
    for norm, classes, channels, size in (("none", 10, 1, 28), ("batchnorm", 7, 3, 32)):
        model = make_model("lenet", norm, classes, channels, image_size=size)
        assert arrays.lenet_keys(norm) == list(model.state_dict())
        assert arrays.lenet_shapes(norm, channels, classes) == {
            k: tuple(v.shape) for k, v in model.state_dict().items()}
        assert all(m.eps == arrays.BN_EPS for m in model.modules()
                   if isinstance(m, torch.nn.modules.batchnorm._BatchNorm))


def test_stage_other_definition_never_skips_the_batch_coupled_norms(tmp_path: Path) -> None:
    """grads.other_definition=never (full scale): the configured definition's norms are those
    of a run that also computes the other one; the other's rows are NaN, its keys absent."""
    runs = {}
    for other in ("every", "never"):
        paths = _tiny_arm(tmp_path / other, "batchnorm", other)
        proc = _run(paths)
        assert proc.returncode == 0, proc.stderr
        with np.load(paths["--out"], allow_pickle=False) as z:
            runs[other] = ({k: z[k] for k in z.files}, json.loads(paths["--metrics"].read_text()))
    (every, m_every), (never, m_never) = runs["every"], runs["never"]
    np.testing.assert_array_equal(never["norms_epoch"], every["norms_epoch"])
    assert np.isfinite(every["norms_batch_epoch"]).all() and np.isnan(never["norms_batch_epoch"]).all()
    assert not any(k.endswith(("_batch", "_batch_early")) for k in m_never)
    assert {k: v for k, v in m_every.items() if "_batch" not in k} == m_never


@pytest.mark.parametrize("damage", ["classes", "truncated", "keys", "crafted"])
def test_stage_refuses_a_wrong_checkpoint_in_one_line(tmp_path: Path, damage: str) -> None:
    """A checkpoint with LeNet's keys but other shapes (another class count, an array cut
    short: the C kernels would read past it), other keys, or a crafted pickle: exit 2, one
    line naming the file, nothing written."""
    import pickle
    import zipfile
    paths = _tiny_arm(tmp_path, "batchnorm")
    ckpt = tmp_path / "ckpt" / "epoch_1.pt"
    state = torch.load(ckpt, weights_only=True)
    if damage == "classes":
        state["fc3.weight"], state["fc3.bias"] = torch.zeros(12, 84), torch.zeros(12)
    elif damage == "truncated":
        state["fc1.weight"] = state["fc1.weight"][:, :10].contiguous()
    elif damage == "keys":
        state["extra.weight"] = torch.zeros(3)
    if damage == "crafted":
        with zipfile.ZipFile(ckpt, "w") as z:
            z.writestr("archive/data.pkl", pickle.dumps({"conv1.weight": [1, 2]}, protocol=2))
    else:
        torch.save(state, ckpt)
    proc = _run(paths)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "epoch_1.pt" in last and ("fc" in last or "keys" in last or "weights file" in last), last
    assert not paths["--out"].exists()


def test_stage_missing_checkpoint_is_one_line(tmp_path: Path) -> None:
    paths = _tiny_arm(tmp_path, "none")
    (tmp_path / "ckpt" / "epoch_1.pt").unlink()
    proc = _run(paths)
    assert proc.returncode == 2
    assert "epoch_1.pt: file not found" in proc.stderr.strip().splitlines()[-1]
    assert not paths["--out"].exists()
