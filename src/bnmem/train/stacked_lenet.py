"""K LeNets (bnmem.models.zoo.LeNet) as one network: stacked parameters, a stacked forward
for training and a stacked eval-mode predict; bnmem.train.stacked trains them.

Model k's weights are slice k of tensors with a leading K axis. Convolutions run as one
grouped convolution over K*C channels (groups=K) on channels-last activations
[B, K*C, H, W], linear layers as batched matmuls over [K, B, F], and norm layers keep
per-model statistics (BN over K*C channels is per model by construction), so autograd on
the summed objective sum_k (loss_k + lambda * penalty_k) gives each slice exactly its own
model's gradient. Short batches are padded; a `_Masked` tells the norm statistics which
rows are real.
"""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

from bnmem import native

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

    def __init__(self, models: list[nn.Module], norm: str, device: torch.device,
                 states: list[dict[str, torch.Tensor]] | None = None):
        """`models`: the K models; or, with `states` (their K state dicts), one model of
        the architecture whose weights are not read (predict_states: no K models built
        only to be overwritten)."""
        ref = models[0].state_dict()  # dtypes as load_state_dict would give them
        stacked = (stack_states(models) if states is None else
                   {key: torch.stack([s[key].to(ref[key].dtype) for s in states]) for key in ref})
        self.k, self.norm = len(models) if states is None else len(states), norm
        self.state = {key: v.to(device) for key, v in stacked.items()}
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
        as conv1 pads; pass it only where bnmem.native.applies) the C forward kernel
        (bnmem.native.lenet_forward) then runs them; otherwise the first convolution, whose input every model shares,
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
        if x_pad is not None:  # the caller checked native.applies
            return native.lenet_forward([w1, b1, w2, b2, *[t for wb in fc for t in wb]], x_pad)
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
    """relu(max_pool2d(h, 2)) as the max of four strided views: faster than PyTorch's CPU
    pooling here, which is slowest on the contiguous layout (BENCHMARKS.md, "How shadow
    training reached ...")."""
    if h.shape[-1] % 2 or h.shape[-2] % 2:
        return F.relu(F.max_pool2d(h, 2))
    top = torch.maximum(h[:, :, 0::2, 0::2], h[:, :, 0::2, 1::2])
    bottom = torch.maximum(h[:, :, 1::2, 0::2], h[:, :, 1::2, 1::2])
    return torch.maximum(top, bottom).clamp_min_(0)


def pad32(x: torch.Tensor) -> torch.Tensor:
    """x [N, C, H, W] zero-padded to 32 x 32 as LeNet's conv1 pads (28 px: 2 each side):
    the C kernels' input layout."""
    pad = (32 - x.shape[-1]) // 2
    return F.pad(x, (pad,) * 4).contiguous() if pad else x.contiguous()
