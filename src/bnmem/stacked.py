"""Train K LeNet shadow models at once: stacked parameters, one optimizer.

Model k's weights are slice k of tensors with a leading K axis, and one SGD optimizer steps
them all (SGD is elementwise, so each slice follows its own model's update). The gradients
of a step come from one of two paths, both equal to the plain per-model loop
(`pipeline.fit`) step for step: same init, same batches, same schedule, same updates.

- On the CPU, for norm none or BatchNorm: `bnmem.native.TrainStep`, a C kernel that
  computes each model's gradients on its own batch with the batch's samples as SIMD lanes
  (speed: BENCHMARKS.md, bench/bench_train.py).
- Elsewhere (GPU, group/layer norm, no C compiler, BNMEM_NATIVE=0): autograd on one stacked
  network. Convolutions run as one grouped convolution over K*C channels (groups=K) on
  channels-last activations [B, K*C, H, W], linear layers as batched matmuls over
  [K, B, F], and norm layers keep per-model statistics (BN over K*C channels is per model
  by construction). The summed objective sum_k (loss_k + lambda * penalty_k) gives each
  slice exactly its own model's gradient.

Models whose subsets differ by one sample can have batches that differ by one at a step:
short batches are padded (with a repeated sample of weight 0 on the autograd path; the
kernel takes each model's count), and the norm statistics and the loss count only real
samples. Models with a different number of steps per epoch (ceil(n/B) differs) train in
separate stacks. Other archs fall back to the plain loop. `workers=<cores>` trains stacks
side by side on threads of one torch thread each (the kernel releases the GIL).
"""
from __future__ import annotations

import ctypes
import logging
import math
import time
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

from bnmem import native
from bnmem.config import Config, TrainConfig
from bnmem.pipeline import build, fit, regularizer
from bnmem.train import (Regularizer, batch_order, lr_at, map_single_threaded, predict,
                         resolve_device)

log = logging.getLogger(__name__)

_NORMS = ("norm1", "norm2", "norm3", "norm4")


def stack_states(models: list[nn.Module]) -> dict[str, torch.Tensor]:
    """{state_dict key: tensor [K, *shape]} of K models with identical architecture."""
    states = [m.state_dict() for m in models]
    return {key: torch.stack([s[key] for s in states]) for key in states[0]}


def unstack_states(stacked: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
    """Inverse of stack_states: K plain state_dicts (CPU, contiguous copies)."""
    k = len(next(iter(stacked.values())))
    return [{key: v[i].detach().cpu().clone() for key, v in stacked.items()} for i in range(k)]


class _Masked:
    """Which padded rows are real: w [K, B] (1 real, 0 padding) and counts [K]."""

    def __init__(self, w: torch.Tensor):
        self.w, self.count = w, w.sum(1)


def _norm_stats(h: torch.Tensor, k: int, dims2d: bool, mask: _Masked | None):
    """Per-(model, channel) batch mean and biased variance, [K, C], differentiable.

    h is [B, K*C, H, W] (2-d) or [K, B, C] (1-d); with `mask`, padded rows are left out.
    """
    if dims2d:
        b, kc, hh, ww = h.shape
        s1 = h.sum((2, 3)).view(b, k, -1)  # (B, K, C)
        wt = mask.w.t()[:, :, None] if mask is not None else None
        n = (mask.count[:, None] if mask is not None else b) * hh * ww
        mean = ((s1 * wt).sum(0) if wt is not None else s1.sum(0)) / n  # (K, C)
        dev = (h - mean.reshape(1, kc, 1, 1)).pow(2).sum((2, 3)).view(b, k, -1)
        var = ((dev * wt).sum(0) if wt is not None else dev.sum(0)) / n
        return mean, var, n
    wt = mask.w[:, :, None] if mask is not None else None
    n = mask.count[:, None] if mask is not None else h.shape[1]
    mean = ((h * wt).sum(1) if wt is not None else h.sum(1)) / n  # (K, C)
    dev = (h - mean[:, None]).pow(2)
    var = ((dev * wt).sum(1) if wt is not None else dev.sum(1)) / n
    return mean, var, n


class _BatchNormSigma(torch.autograd.Function):
    """Native train-mode BN that also returns sigma_B = sqrt(Var_batch + eps) per channel,
    differentiable (d sigma / d h = (h - mean) / (n sigma)). The penalty needs sigma_B;
    recomputing it with h.var costs two more passes over the activations each way."""

    @staticmethod
    def forward(ctx, h, weight, bias, running_mean, running_var, momentum, eps):
        out, mean, invstd = torch.native_batch_norm(h, weight, bias, running_mean, running_var,
                                                    True, momentum, eps)
        ctx.save_for_backward(h, weight, running_mean, running_var, mean, invstd)
        ctx.eps = eps
        return out, 1.0 / invstd

    @staticmethod
    def backward(ctx, g_out, g_sigma):
        h, weight, rm, rv, mean, invstd = ctx.saved_tensors
        cl = h.is_contiguous(memory_format=torch.channels_last)
        g_out = g_out.contiguous(
            memory_format=torch.channels_last if cl else torch.contiguous_format)
        g_h, g_w, g_b = torch.ops.aten.native_batch_norm_backward(
            g_out, h, weight, rm, rv, mean, invstd, True, ctx.eps, [True, True, True])
        if g_sigma is not None:
            coef = (g_sigma * invstd / (h.numel() // h.shape[1])).view(1, -1, 1, 1)
            g_h = g_h + (h - mean.view(1, -1, 1, 1)) * coef
        return g_h, g_w, g_b, None, None, None, None


class StackedLeNet:
    """K LeNets (models.LeNet) as stacked leaf tensors; forward gives logits [K, B, classes]."""

    def __init__(self, models: list[nn.Module], norm: str, device: torch.device):
        self.k, self.norm = len(models), norm
        self.state = {key: v.to(device) for key, v in stack_states(models).items()}
        self.params = {n: self.state[n].requires_grad_() for n, _ in models[0].named_parameters()}
        m0 = models[0]
        self.padding = m0.conv1.padding
        self.groups = {n: getattr(m0, n).num_groups for n in _NORMS
                       if isinstance(getattr(m0, n), nn.GroupNorm)}
        self.eps = {n: getattr(m0, n).eps for n in _NORMS if hasattr(getattr(m0, n), "eps")}
        self.bn_momentum = {n: getattr(m0, n).momentum for n in _NORMS
                            if isinstance(getattr(m0, n), nn.modules.batchnorm._BatchNorm)}

    def parameters(self) -> list[torch.Tensor]:
        return list(self.params.values())

    def _norm(self, name: str, h: torch.Tensor, mask: _Masked | None,
              sigmas: list | None) -> torch.Tensor:
        """Apply norm layer `name` to 2-d [B, K*C, H, W] or 1-d [K, B, C] activations."""
        if self.norm == "none":
            return h
        p, k, eps, dims2d = self.params, self.k, self.eps[name], h.dim() == 4
        gamma, beta = p[f"{name}.weight"], p[f"{name}.bias"]  # (K, C)
        if self.norm in ("groupnorm", "layernorm"):
            g = self.groups[name]
            if dims2d:  # per sample, so padded rows cannot leak into real ones
                return F.group_norm(h, k * g, gamma.reshape(-1), beta.reshape(-1), eps)
            kk, b, c = h.shape
            hg = h.view(kk, b, g, c // g)
            var, mean = torch.var_mean(hg, -1, unbiased=False, keepdim=True)
            hn = ((hg - mean) * torch.rsqrt(var + eps)).view(kk, b, c)
            return hn * gamma[:, None] + beta[:, None]
        rm, rv = self.state[f"{name}.running_mean"], self.state[f"{name}.running_var"]
        self.state[f"{name}.num_batches_tracked"] += 1
        if dims2d and mask is None:  # fast path: native fused BN
            if sigmas is None:
                return F.batch_norm(h, rm.view(-1), rv.view(-1), gamma.reshape(-1),
                                    beta.reshape(-1), True, self.bn_momentum[name], eps)
            out, sigma = _BatchNormSigma.apply(h, gamma.reshape(-1), beta.reshape(-1), rm.view(-1),
                                               rv.view(-1), self.bn_momentum[name], eps)
            sigmas.append((gamma, sigma.view(k, -1)))
            return out
        mean, var, n = _norm_stats(h, k, dims2d, mask)
        with torch.no_grad():  # running statistics as nn.BatchNorm: unbiased batch variance
            mom = self.bn_momentum[name]
            rm.mul_(1 - mom).add_(mom * mean)
            rv.mul_(1 - mom).add_(mom * var * n / (n - 1))
        inv = torch.rsqrt(var + eps)
        if sigmas is not None:
            sigmas.append((gamma, torch.sqrt(var + eps)))
        scale, shift = gamma * inv, beta - mean * gamma * inv  # (K, C)
        if dims2d:
            return h * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)
        return h * scale[:, None] + shift[:, None]

    def forward(self, xb: torch.Tensor, mask: _Masked | None = None,
                sigmas: list | None = None) -> torch.Tensor:
        """xb: channels-last [B, K*C_in, H, W]; returns logits [K, B, classes].

        With `sigmas` (a list), BN layers append (gamma, sigma_B), both [K, C].
        """
        p, k = self.params, self.k

        def conv(name: str, h: torch.Tensor, **kw) -> torch.Tensor:
            # channels-last weights make oneDNN keep activations channels-last even when
            # K*C_in == 1 (where the input's layout is ambiguous)
            w = p[f"{name}.weight"].reshape(-1, *p[f"{name}.weight"].shape[2:])
            return F.conv2d(h, w.contiguous(memory_format=torch.channels_last),
                            p[f"{name}.bias"].reshape(-1), groups=k, **kw)

        def linear(name: str, h: torch.Tensor) -> torch.Tensor:
            return torch.baddbmm(p[f"{name}.bias"][:, None], h, p[f"{name}.weight"].transpose(1, 2))

        # relu(max_pool(.)) == max_pool(relu(.)) with the same gradients (relu is monotone,
        # and a window whose max is <= 0 gets zero gradient either way), on 4x fewer values.
        h = self._norm("norm1", conv("conv1", xb, padding=self.padding), mask, sigmas)
        h = F.relu(F.max_pool2d(h, 2))  # (B, K*6, 14, 14)
        h = self._norm("norm2", conv("conv2", h), mask, sigmas)
        h = F.relu(F.max_pool2d(h, 2))  # (B, K*16, 5, 5)
        b = h.shape[0]
        # per model, flatten in (C, H, W) order as LeNet does: (K, B, 400)
        h = h.reshape(b, k, -1, *h.shape[2:]).permute(1, 0, 2, 3, 4).reshape(k, b, -1)
        h = F.relu(self._norm("norm3", linear("fc1", h), mask, sigmas))
        h = F.relu(self._norm("norm4", linear("fc2", h), mask, sigmas))
        return linear("fc3", h)

    @torch.no_grad()
    def predict(self, x_hwc: torch.Tensor, batch_size: int = 500,
                x_pad: torch.Tensor | None = None) -> torch.Tensor:
        """Eval-mode logits [K, N, classes] of every model on the same inputs [N, H, W, C].

        Without norm layers or with BN, eval mode is affine, so BN is folded into the
        preceding layer's weights; with `x_pad` (the same inputs as [N, C, 32, 32], padded
        as conv1 pads) the C forward kernel (bnmem.native.lenet_forward) then runs them
        where it applies; otherwise the first convolution, whose input every model shares,
        is one dense convolution with K*6 output channels. Group/layer norm use per-sample
        statistics only (the same in train and eval mode): plain `forward`.
        """
        k, out = self.k, []
        if self.norm not in ("none", "batchnorm"):
            for i in range(0, len(x_hwc), batch_size):
                xb = x_hwc[i:i + batch_size]
                b, hh, ww, c = xb.shape
                xb = xb[:, :, :, None].expand(b, hh, ww, k, c).reshape(b, hh, ww, k * c)
                out.append(self.forward(xb.permute(0, 3, 1, 2)))
            return torch.cat(out, dim=1)
        w1, b1 = self._folded("conv1", "norm1")
        w2, b2 = self._folded("conv2", "norm2")
        fc = [self._folded(f"fc{i}", f"norm{i + 2}") for i in (1, 2)] + [self._folded("fc3", None)]
        if x_pad is not None:
            out = native.lenet_forward([w1, b1, w2, b2, *[t for wb in fc for t in wb]], x_pad)
            if out is not None:
                return out
        w1 = w1.reshape(-1, *w1.shape[2:]).contiguous(memory_format=torch.channels_last)
        w2 = w2.reshape(-1, *w2.shape[2:]).contiguous(memory_format=torch.channels_last)
        for i in range(0, len(x_hwc), batch_size):
            xb = x_hwc[i:i + batch_size].permute(0, 3, 1, 2)  # channels-last view
            h = _pool_relu(F.conv2d(xb, w1, b1.reshape(-1), padding=self.padding))
            h = _pool_relu(F.conv2d(h, w2, b2.reshape(-1), groups=k))
            bsz = h.shape[0]
            h = h.reshape(bsz, k, -1, *h.shape[2:]).permute(1, 0, 2, 3, 4).reshape(k, bsz, -1)
            for j, (w, bias) in enumerate(fc):
                h = torch.baddbmm(bias[:, None], h, w.transpose(1, 2))
                if j < 2:
                    h = F.relu(h)
            out.append(h)
        return torch.cat(out, dim=1)

    def _folded(self, layer: str, norm: str | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(weight [K, out, ...], bias [K, out]) of `layer` with eval-mode BN `norm` folded in."""
        w, b = self.params[f"{layer}.weight"].detach(), self.params[f"{layer}.bias"].detach()
        if self.norm != "batchnorm" or norm is None:
            return w, b
        rm, rv = self.state[f"{norm}.running_mean"], self.state[f"{norm}.running_var"]
        scale = self.params[f"{norm}.weight"].detach() * torch.rsqrt(rv + self.eps[norm])
        shift = self.params[f"{norm}.bias"].detach() - rm * scale
        return w * scale.reshape(*scale.shape, *[1] * (w.dim() - 2)), b * scale + shift


def _pool_relu(h: torch.Tensor) -> torch.Tensor:
    """relu(max_pool2d(h, 2)) as the max of four strided views: 1.2-4x faster than
    PyTorch's CPU pooling here (which is slowest on the contiguous layout)."""
    if h.shape[-1] % 2 or h.shape[-2] % 2:
        return F.relu(F.max_pool2d(h, 2))
    top = torch.maximum(h[:, :, 0::2, 0::2], h[:, :, 0::2, 1::2])
    bottom = torch.maximum(h[:, :, 1::2, 0::2], h[:, :, 1::2, 1::2])
    return torch.maximum(top, bottom).clamp_min_(0)


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


def _kernel(net: StackedLeNet, x_pad: torch.Tensor, y: torch.Tensor,
            reg: Regularizer | None) -> native.TrainStep | None:
    """The C training step for this stack, or None where it does not apply."""
    eps, mom = set(net.eps.values()) or {1e-5}, set(net.bn_momentum.values()) or {0.1}
    if len(eps) > 1 or len(mom) > 1:  # one eps and momentum for all four BN layers
        return None
    return native.TrainStep.create(net.params, net.state, net.norm, x_pad, y, eps.pop(),
                                   mom.pop(), reg.strength if reg else 0.0,
                                   reg.target if reg else 0.0)


def _penalty(sigmas: list, target: float) -> torch.Tensor:
    """Per model: mean over its BN channels of relu(|gamma|/sigma_B - target)^2; [K]."""
    ratio = torch.cat([g.abs() / s for g, s in sigmas], dim=1)  # (K, sum C)
    return F.relu(ratio - target).pow(2).mean(1)


def _train_group(cfg: TrainConfig, norm: str, reg: Regularizer | None, x_hwc: torch.Tensor,
                 y: torch.Tensor, subsets: list[np.ndarray], models: list[nn.Module],
                 order_seeds: list[int], device: torch.device,
                 track: Callable[[torch.Tensor], Any] | None = None,
                 x_pad: torch.Tensor | None = None
                 ) -> tuple[dict, list[list[dict]], list[list]]:
    """Train one stack (models sharing the step count); returns stacked state, histories
    and, with `track`, per model the list of track(eval logits [N, classes]) per epoch.

    With `x_pad` (the pool as [N, C, 32, 32], zero-padded as conv1 pads) the gradients
    come from the C kernel (bnmem.native.TrainStep) where it applies, else from autograd.
    """
    net = StackedLeNet(models, norm, device)
    k, c_in = len(models), x_hwc.shape[-1]
    idx, w = _plan([len(s) for s in subsets], cfg, order_seeds)
    # Map subset positions to pool rows once: gidx[e, s, k, b] indexes x_hwc / y directly.
    gidx = torch.as_tensor(np.stack([subsets[j][idx[:, :, j]] for j in range(k)], axis=2))
    width = w.sum(-1).max(-1)  # [epochs, steps]: largest batch of the step
    full = w.sum(-1).min(-1) == width  # no padding needed at that step
    gidx = gidx.to(device)
    w_t, n_k = torch.as_tensor(w).to(device), torch.tensor([len(s) for s in subsets], device=device)
    opt = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                          weight_decay=cfg.weight_decay)
    use_pen = reg is not None and reg.strength > 0 and norm == "batchnorm"
    kernel = _kernel(net, x_pad, y, reg if use_pen else None) if x_pad is not None else None
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
            if kernel is not None:  # gradients in C; rows gi[k, :cnt[k]] are model k's batch
                loss_k, pen_k = kernel(gi, cnt.to(torch.int64))
                for name in net.bn_momentum:
                    net.state[f"{name}.num_batches_tracked"] += 1
                opt.step()
                loss_sum += loss_k.to(loss_sum.dtype) * cnt
                if use_pen:
                    pen_sum += pen_k.to(pen_sum.dtype) * cnt
                step += 1
                continue
            xb = x_hwc[gi.reshape(-1)].view(k, bmax, *x_hwc.shape[1:3], c_in)
            # .contiguous(): with C == 1 reshape alone would return a strided view
            xb = xb.permute(1, 2, 3, 0, 4).contiguous().view(bmax, *x_hwc.shape[1:3], k * c_in)
            xb = xb.permute(0, 3, 1, 2)  # channels-last (B, K*C, H, W)
            yb = y[gi]
            mask = None if full[epoch, s] else _Masked(wk)
            sigmas = [] if use_pen else None
            logits = net.forward(xb, mask, sigmas)  # (K, B, classes)
            ce = F.cross_entropy(logits.reshape(k * bmax, -1), yb.reshape(-1), reduction="none")
            loss_k = (ce.view(k, bmax) * wk).sum(1) / cnt  # each model's mean batch loss
            objective = loss_k.sum()
            if use_pen:
                pen_k = _penalty(sigmas, reg.target)
                objective = objective + reg.strength * pen_k.sum()
                pen_sum += pen_k.detach() * cnt
            opt.zero_grad(set_to_none=True)
            objective.backward()
            opt.step()
            loss_sum += loss_k.detach() * cnt
            step += 1
        if track is not None:
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
    return net.state, hist, tracked


def retain_heap() -> bool:
    """glibc only: keep freed memory in the heap instead of returning it to the OS.

    A stack's activations are tens of MB per tensor; with glibc's defaults the freed top
    of the heap is trimmed after every step and re-faulted (zeroed by the kernel) in the
    next, which costs ~15% of a LeNet stack's time. Process-wide; RSS stays at its peak.
    Returns False where glibc's mallopt is not available.
    """
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 << 20)  # glibc's maximum
                    and libc.mallopt(m_trim_threshold, 1 << 30))
    except (OSError, AttributeError):
        return False


def _jobs(steps: list[int], size: int, workers: int) -> list[list[int]]:
    """Model ids per stack: same steps per epoch, at most `size` models, and at least
    `workers` stacks (when there are that many models) so every worker has one."""
    jobs = []
    for n_steps in sorted(set(steps)):
        ids = [j for j, s in enumerate(steps) if s == n_steps]
        parts = max(math.ceil(len(ids) / size), min(workers, len(ids)))
        jobs += [[int(j) for j in p] for p in np.array_split(ids, parts)]
    return jobs


def predict_states(meta: dict, states: list[dict], x: torch.Tensor,
                   device: torch.device | str = "cpu") -> torch.Tensor:
    """Eval-mode logits [K, N, classes] of K trained models (state dicts) on x [N, C, H, W]:
    LeNets as one stacked network (BN folded, see StackedLeNet.predict), others one by one."""
    models = []
    for state in states:
        model = build(meta)
        model.load_state_dict(state)
        models.append(model)
    if meta["arch"] != "lenet":
        return torch.stack([predict(m.to(device), x) for m in models])
    net = StackedLeNet(models, meta["norm"], torch.device(device))
    x_pad = None
    if torch.device(device).type == "cpu" and meta["norm"] in ("none", "batchnorm"):
        x_pad = _pad32(x)
    return net.predict(x.permute(0, 2, 3, 1).contiguous().to(device), x_pad=x_pad).cpu()


def _pad32(x: torch.Tensor) -> torch.Tensor:
    """x [N, C, H, W] zero-padded to 32 x 32 as LeNet's conv1 pads (28 px: 2 each side)."""
    pad = (32 - x.shape[-1]) // 2
    return F.pad(x, (pad,) * 4).contiguous() if pad else x.contiguous()


def train_stack(cfg: Config, arm: str, x: torch.Tensor, y: torch.Tensor, keep: np.ndarray,
                meta: dict, init_seeds: list[int], order_seeds: list[int],
                max_stack: int = 0, workers: int = 1,
                track: Callable[[torch.Tensor], Any] | None = None
                ) -> tuple[list[dict], list[list[dict]], list[list]]:
    """Train K models of one arm at once; model k as pipeline.fit(cfg, arm, x[keep[k]], ...).

    Args:
        cfg, arm, meta: as for pipeline.fit (the arm's recipe and model_meta).
        x: preprocessed pool [N, C, H, W]; y: labels [N].
        keep: bool [K, N], model k trains on x[keep[k]].
        init_seeds, order_seeds: per-model seeds, as fit's init_seed / order_seed.
        max_stack: most models per stack (0 = all); bounds memory.
        workers: on CPU, stacks trained side by side by this many threads, each running
            torch single-threaded (torch's thread count is restored afterwards).
        track: called after every epoch with each model's eval-mode logits on the whole
            pool x ([N, classes], CPU); its results are returned per model and epoch.
    Returns:
        (state_dicts, histories, tracked): per model, a CPU state_dict loadable into
        pipeline.build(meta), fit's per-epoch records (loss, penalty, lr, seconds), and
        the list of track(...) results per epoch (empty lists without `track`).
    """
    keep = np.asarray(keep, dtype=bool)
    if meta["arch"] != "lenet":  # only LeNet has a stacked form; others run the plain loop
        states, hists, tracked = [], [], []
        for j in range(len(keep)):
            seen: list = []
            hook = (lambda e, m, rec, seen=seen: seen.append(track(predict(m, x)))) if track else None
            model, hist = fit(cfg, arm, x[torch.as_tensor(keep[j])], y[torch.as_tensor(keep[j])],
                              meta, init_seeds[j], order_seeds[j], on_epoch=hook)
            states.append({n: v.detach().cpu() for n, v in model.state_dict().items()})
            hists.append(hist)
            tracked.append(seen)
        return states, hists, tracked
    device = resolve_device(cfg.train.device)
    workers = workers if device.type == "cpu" else 1
    if device.type == "cpu":
        retain_heap()
    x_hwc = x.permute(0, 2, 3, 1).contiguous().to(device)  # gathers rows of [H, W, C]
    x_pad = None
    if device.type == "cpu" and meta["norm"] in ("none", "batchnorm"):  # the C kernels' input
        x_pad = _pad32(x)
    y = y.to(device)
    subsets = [np.flatnonzero(row) for row in keep]
    steps = [math.ceil(len(s) / cfg.train.batch_size) for s in subsets]
    jobs = _jobs(steps, max_stack or len(keep), workers)

    def run(part: list[int]) -> tuple[dict, list[list[dict]], list[list]]:
        models = [build(meta, seed=init_seeds[j]) for j in part]
        return _train_group(cfg.train, meta["norm"], regularizer(cfg, arm), x_hwc, y,
                            [subsets[j] for j in part], models, [order_seeds[j] for j in part],
                            device, track, x_pad)

    results = map_single_threaded(run, jobs, workers)
    states: list[dict | None] = [None] * len(keep)
    hists: list[list[dict] | None] = [None] * len(keep)
    tracked: list[list | None] = [None] * len(keep)
    for part, (stacked, hist, tr) in zip(jobs, results):
        for j, sd, h, t in zip(part, unstack_states(stacked), hist, tr):
            states[j], hists[j], tracked[j] = sd, h, t
    return states, hists, tracked
