"""Train K LeNet shadow models at once (bnmem.train.stacked_lenet): stacked parameters, one
optimizer; the shadow stage's `train_stack` and `predict_states`.

One SGD optimizer steps all K models (SGD is elementwise, so each slice follows its own
model's update). The gradients of a step come from one of two strategies, chosen once per
stack by bnmem.native.applies and both equal to the plain per-model loop (`pipeline.fit`)
step for step: same init, same batches, same schedule, same updates.

- C (CPU, norm none or BatchNorm, a C compiler): `bnmem.native.TrainStep` computes each
  model's gradients on its own batch with the batch's samples as SIMD lanes (speed:
  BENCHMARKS.md, bench/bench_train.py).
- Autograd (GPU, group/layer norm, no C compiler, BNMEM_NATIVE=0): backward through
  `StackedLeNet.forward` (bnmem.train.stacked_lenet).

Models whose subsets differ by one sample can have batches that differ by one at a step:
short batches are padded (with a repeated sample of weight 0 on the autograd path; the
kernel takes each model's count), and the norm statistics and the loss count only real
samples. Models with a different number of steps per epoch (ceil(n/B) differs) train in
separate stacks. Other archs fall back to the plain loop. `workers=<cores>` trains stacks
side by side on threads of one torch thread each (the kernel releases the GIL).
"""
from __future__ import annotations

import logging
import math
import time
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from bnmem import native
from bnmem.core.config import Config, TrainConfig, dp_arm
from bnmem.core.records import ModelSpec
from bnmem.models.spec import build
from bnmem.train.recipe import fit, regularizer
from bnmem.train.stacked_lenet import StackedLeNet, _Masked, pad32, unstack_states
from bnmem.train.loop import Regularizer, gamma_sigma_penalty
from bnmem.models.runtime import map_single_threaded, predict, resolve_device
from bnmem.core.schedule import batch_order, lr_at
from bnmem.train.sgd import make_sgd
from bnmem.train.views import augment

log = logging.getLogger(__name__)
retain_heap = native.retain_heap  # bench/bench_convs.py imports it from here
# (loss_k, penalty_k or None) of one step; gradients left in the parameters' .grad
Gradients = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, bool],
                     tuple[torch.Tensor, torch.Tensor | None]]


def _plan(sizes: list[int], cfg: TrainConfig, order_seeds: list[int]):
    """Padded batch plan: index [epochs, steps, K, Bmax] (into each model's subset) and
    weights w of the same shape (1 real, 0 padding). All models must share ceil(n/B)."""
    orders = [batch_order(n, cfg.batch_size, cfg.epochs, s) for n, s in zip(sizes, order_seeds)]
    steps = len(orders[0][0])
    bmax = max(len(b) for o in orders for e in o for b in e)
    idx = np.zeros((cfg.epochs, steps, len(sizes), bmax), dtype=np.int64)
    w = np.zeros(idx.shape, dtype=np.float32)
    for k, order in enumerate(orders):
        for e, batches in enumerate(order):
            for s, b in enumerate(batches):
                idx[e, s, k, :len(b)], idx[e, s, k, len(b):] = b, b[0]
                w[e, s, k, :len(b)] = 1.0
    return idx, w


def _c_gradients(net: StackedLeNet, x_pad: torch.Tensor | None, y: torch.Tensor,
                 reg: Regularizer | None) -> Gradients | None:
    """The C strategy for this stack, or None where bnmem.native.applies does not hold."""
    kernel = None if x_pad is None else native.TrainStep.create(
        net.params, net.state, net.norm, x_pad, y, tuple(net.eps.values()),
        tuple(net.bn_momentum.values()), reg.strength if reg else 0.0,
        reg.target if reg else 0.0)
    if kernel is None:
        return None

    def gradients(gi, wk, cnt, full):
        # rows gi[k, :cnt[k]] are model k's batch; the kernel needs no padding weights
        loss_k, pen_k = kernel(gi, cnt.to(torch.int64))
        for name in net.bn_momentum:  # as nn.BatchNorm counts its train-mode calls
            net.state[f"{name}.num_batches_tracked"] += 1
        return loss_k, pen_k
    return gradients


def _autograd_gradients(net: StackedLeNet, x_hwc: torch.Tensor, y: torch.Tensor,
                        reg: Regularizer | None, opt) -> Gradients:
    """The autograd strategy: backward through the stacked forward."""
    k, c_in = net.k, x_hwc.shape[-1]

    def gradients(gi, wk, cnt, full):
        bmax = gi.shape[1]
        xb = x_hwc[gi.reshape(-1)].view(k, bmax, *x_hwc.shape[1:3], c_in)
        # .contiguous(): with C == 1 reshape alone would return a strided view
        xb = xb.permute(1, 2, 3, 0, 4).contiguous().view(bmax, *x_hwc.shape[1:3], k * c_in)
        xb = xb.permute(0, 3, 1, 2)  # channels-last (B, K*C, H, W)
        yb = y[gi]
        mask = None if full else _Masked(wk)
        sigmas = [] if reg is not None else None
        logits = net.forward(xb, mask, sigmas)  # (K, B, classes)
        ce = F.cross_entropy(logits.reshape(k * bmax, -1), yb.reshape(-1), reduction="none")
        loss_k = (ce.view(k, bmax) * wk).sum(1) / cnt  # each model's mean batch loss
        objective, pen_k = loss_k.sum(), None
        if reg is not None:
            pen_k = gamma_sigma_penalty([g for g, _ in sigmas], [s for _, s in sigmas], reg.target)
            objective = objective + reg.strength * pen_k.sum()
            pen_k = pen_k.detach()
        opt.zero_grad(set_to_none=True)
        objective.backward()
        return loss_k.detach(), pen_k
    return gradients


def _train_group(cfg: TrainConfig, norm: str, reg: Regularizer | None, x_hwc: torch.Tensor,
                 y: torch.Tensor, subsets: list[np.ndarray], models: list[nn.Module],
                 order_seeds: list[int], device: torch.device,
                 track: Callable[[torch.Tensor], Any] | None = None,
                 x_pad: torch.Tensor | None = None,
                 on_epoch: Callable[[int, dict, list[dict]], None] | None = None,
                 track_at: frozenset[int] | None = None
                 ) -> tuple[dict, list[list[dict]], list[list]]:
    """Train one stack (models sharing the step count); returns stacked state, histories
    and, with `track`, per model the list of track(eval logits [N, classes]) per epoch
    (the epochs in `track_at` only, where given).

    `x_pad` (the pool as [N, C, 32, 32], zero-padded as conv1 pads), given where
    bnmem.native.applies: the C strategy and C eval forward, else autograd.
    """
    net = StackedLeNet(models, norm, device)
    k = len(models)
    idx, w = _plan([len(s) for s in subsets], cfg, order_seeds)
    # Map subset positions to pool rows once: gidx[e, s, k, b] indexes x_hwc / y directly.
    gidx = torch.as_tensor(np.stack([subsets[j][idx[:, :, j]] for j in range(k)], axis=2))
    width = w.sum(-1).max(-1)  # [epochs, steps]: largest batch of the step
    full = w.sum(-1).min(-1) == width  # no padding needed at that step
    gidx = gidx.to(device)
    w_t, n_k = torch.as_tensor(w).to(device), torch.tensor([len(s) for s in subsets], device=device)
    opt = make_sgd(net.parameters(), device, lr=cfg.lr, momentum=cfg.momentum,
                   weight_decay=cfg.weight_decay)
    if not (reg is not None and reg.strength > 0 and norm == "batchnorm"):
        reg = None  # no penalty to compute
    gradients = _c_gradients(net, x_pad, y, reg) or _autograd_gradients(net, x_hwc, y, reg, opt)
    total, step, hist = idx.shape[0] * idx.shape[1], 0, [[] for _ in range(k)]
    tracked: list[list] = [[] for _ in range(k)]
    for epoch in range(idx.shape[0]):
        t0 = time.perf_counter()
        loss_sum = torch.zeros(k, device=device)
        pen_sum = torch.zeros(k, device=device)
        for s in range(idx.shape[1]):
            lr = lr_at(cfg, step, total)
            for group in opt.param_groups:
                group["lr"] = lr
            bmax = int(width[epoch, s])  # this step's largest batch; pad only up to it
            gi, wk = gidx[epoch, s, :, :bmax], w_t[epoch, s, :, :bmax]  # (K, bmax)
            cnt = wk.sum(1)  # (K,)
            loss_k, pen_k = gradients(gi, wk, cnt, bool(full[epoch, s]))
            opt.step()
            loss_sum += loss_k.to(loss_sum.dtype) * cnt
            if reg is not None:
                pen_sum += pen_k.to(pen_sum.dtype) * cnt
            step += 1
        if track is not None and (track_at is None or epoch + 1 in track_at):
            logits_all = net.predict(x_hwc, x_pad=x_pad).cpu()  # (K, N, classes)
            for j in range(k):
                tracked[j].append(track(logits_all[j]))
        seconds = time.perf_counter() - t0
        loss_ep, pen_ep = (loss_sum / n_k).tolist(), (pen_sum / n_k).tolist()
        for j in range(k):
            hist[j].append({"epoch": epoch + 1, "loss": loss_ep[j], "penalty": pen_ep[j],
                            "lr": lr, "seconds": seconds / k})
        log.info("stack of %d epoch %d: mean loss %.4f (%.1f s)", k, epoch + 1,
                 sum(loss_ep) / k, seconds)
        if on_epoch is not None:  # the stacked state (not a copy: read it, do not keep it)
            on_epoch(epoch + 1, net.state, [h[-1] for h in hist])
    return net.state, hist, tracked


def _jobs(steps: list[int], size: int, workers: int) -> list[list[int]]:
    """Model ids per stack: same steps per epoch, at most `size` models, and at least
    `workers` stacks (when there are that many models) so every worker has one."""
    jobs = []
    for n_steps in sorted(set(steps)):
        ids = [j for j, s in enumerate(steps) if s == n_steps]
        parts = max(math.ceil(len(ids) / size), min(workers, len(ids)))
        jobs += [[int(j) for j in p] for p in np.array_split(ids, parts)]
    return jobs


def predict_states(spec: ModelSpec, states: list[dict], x: torch.Tensor,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """Eval-mode logits [K, N, classes] of K trained models (state dicts) on x [N, C, H, W]:
    LeNets where the C eval forward applies as one stacked network (BN folded, see
    StackedLeNet.predict), every other model one by one through PyTorch, so that a model's
    logits never depend on which models share its stack (a batched float32 forward over
    K models rounds differently for each K)."""
    x_pad = _pool_for_kernels(spec, x, device) if spec.arch == "lenet" else None
    if x_pad is not None:  # one model for the architecture; the weights are the states'
        template = build(spec)
        template.load_state_dict(states[0])  # the keys and shapes checked as a model would
        net = StackedLeNet([template], spec.norm, torch.device(device), states=states)
        return net.predict(x.permute(0, 2, 3, 1).contiguous().to(device), x_pad=x_pad).cpu()
    models = []
    for state in states:
        model = build(spec)
        model.load_state_dict(state)
        models.append(model)
    return torch.stack([predict(m.to(device), x) for m in models])


def eval_logits(model: nn.Module, spec: ModelSpec | None, x: torch.Tensor,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """One trained model's eval-mode logits [N, classes]: a LeNet (per its `spec`)
    through the C eval forward, as the shadows are queried (the same bits on every CPU
    vendor); any other model, or no spec, through PyTorch's forward."""
    if spec is not None and spec.arch == "lenet":
        return predict_states(spec, [model.state_dict()], x, device)[0]
    return predict(model, x)


def query_logits(model: nn.Module, x: torch.Tensor, queries: tuple[str, ...],
                 spec: ModelSpec | None = None) -> np.ndarray:
    """float32 [N, Q, C]: one trained model's eval logits on x under each query view
    (bnmem.train.views), as the shadows are queried (eval_logits). The train stage saves
    them for the target models (data/models/<arm>_eval.npz), so the exposure stage runs no
    model for them."""
    return torch.stack([eval_logits(model, spec, augment(x, q)) for q in queries],
                       dim=1).numpy()


def _pool_for_kernels(spec: ModelSpec, x: torch.Tensor, device: torch.device | str
                      ) -> torch.Tensor | None:
    """x padded for the C kernels (bnmem.train.stacked_lenet.pad32) where they apply, else None."""
    if native.applies(spec.norm, device, x.dtype, x.shape[1], spec.num_classes):
        return pad32(x)
    return None


def train_stack(cfg: Config, arm: str, x: torch.Tensor, y: torch.Tensor, keep: np.ndarray,
                spec: ModelSpec, init_seeds: list[int], order_seeds: list[int],
                max_stack: int = 0, workers: int = 1,
                track: Callable[[torch.Tensor], Any] | None = None,
                on_epoch: Callable[[int, list[dict], list[dict]], None] | None = None,
                track_at: tuple[int, ...] | None = None
                ) -> tuple[list[dict], list[list[dict]], list[list]]:
    """Train K models of one arm at once; model k as pipeline.fit(cfg, arm, x[keep[k]], ...).

    Args:
        cfg, arm, spec: as for bnmem.train.recipe.fit (the arm's recipe and model spec).
        x: preprocessed pool [N, C, H, W]; y: labels [N].
        keep: bool [K, N], model k trains on x[keep[k]].
        init_seeds, order_seeds: per-model seeds, as fit's init_seed / order_seed.
        max_stack: most models per stack (0 = all); bounds memory.
        workers: on CPU, stacks trained side by side by this many threads, each running
            torch single-threaded (torch's thread count is restored afterwards).
        track: called after every epoch (those in `track_at`, where given) with each
            model's eval-mode logits on the whole pool x ([N, classes], CPU); its results
            are returned per model and epoch.
        on_epoch: LeNet, one stack only: called after every epoch with (epoch, each
            model's CPU state_dict, each model's record of the epoch) (the target model's
            per-epoch measurements and checkpoints, bnmem.train.target.train_target).
    Returns:
        (state_dicts, histories, tracked): per model, a CPU state_dict loadable into
        bnmem.models.spec.build(spec), fit's per-epoch records (loss, penalty, lr, seconds), and
        the list of track(...) results per epoch (empty lists without `track`).
    """
    keep = np.asarray(keep, dtype=bool)
    device = resolve_device(cfg.train.device)
    if spec.arch != "lenet" or dp_arm(arm):  # only LeNet has a stacked form, not under
        # DP-SGD (per-sample clipping): others run the plain loop,
        def one(j: int) -> tuple[dict, list[dict], list]:  # models side by side on the CPU
            seen: list = []
            hook = (lambda e, m, rec: seen.append(track(predict(m, x)))
                    if track_at is None or e in track_at else None) if track else None
            model, hist = fit(cfg, arm, x[torch.as_tensor(keep[j])], y[torch.as_tensor(keep[j])],
                              spec, init_seeds[j], order_seeds[j], on_epoch=hook)
            return {n: v.detach().cpu() for n, v in model.state_dict().items()}, hist, seen

        done = map_single_threaded(one, list(range(len(keep))),
                                   workers if device.type == "cpu" else 1)
        return [d[0] for d in done], [d[1] for d in done], [d[2] for d in done]
    workers = workers if device.type == "cpu" else 1
    if device.type == "cpu":
        native.setup_process()  # the allocator; threads: `workers` below
    x_hwc = x.permute(0, 2, 3, 1).contiguous().to(device)  # gathers rows of [H, W, C]
    x_pad = _pool_for_kernels(spec, x, device)
    y = y.to(device)
    subsets = [np.flatnonzero(row) for row in keep]
    steps = [math.ceil(len(s) / cfg.train.batch_size) for s in subsets]
    jobs = _jobs(steps, max_stack or len(keep), workers)
    if on_epoch is not None and len(jobs) > 1:
        raise ValueError("train_stack: on_epoch needs all models in one stack")
    hook = None if on_epoch is None else (
        lambda epoch, state, recs: on_epoch(epoch, unstack_states(state), recs))

    def run(part: list[int]) -> tuple[dict, list[list[dict]], list[list]]:
        models = [build(spec, seed=init_seeds[j]) for j in part]
        return _train_group(cfg.train, spec.norm, regularizer(cfg, arm), x_hwc, y,
                            [subsets[j] for j in part], models, [order_seeds[j] for j in part],
                            device, track, x_pad, hook,
                            None if track_at is None else frozenset(track_at))

    results = map_single_threaded(run, jobs, workers)
    states: list[dict | None] = [None] * len(keep)
    hists: list[list[dict] | None] = [None] * len(keep)
    tracked: list[list | None] = [None] * len(keep)
    for part, (stacked, hist, tr) in zip(jobs, results):
        for j, sd, h, t in zip(part, unstack_states(stacked), hist, tr):
            states[j], hists[j], tracked[j] = sd, h, t
    return states, hists, tracked
