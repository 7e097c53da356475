"""Per-sample squared gradient norms without materializing per-sample gradients.

For the `eval` definition each sample's loss depends on its own input only, so one
backward pass of the *summed* loss gives, at every layer, the per-sample output gradient
delta_i. Per-sample parameter gradients are then closed-form in (input a_i, delta_i):
- Linear:     grad W_i = delta_i a_i^T, so ||grad W_i||^2 = ||delta_i||^2 ||a_i||^2 (no
              [n, out, in] tensor: this is what makes it fast for LeNet's fc layers);
- Conv2d:     grad W_i = delta_i unfold(a_i)^T ([out, in*k*k] per sample, small), all n
              at once as one grouped weight-gradient convolution (sample i = group i);
- BatchNorm (running statistics) / GroupNorm: grad gamma_i = sum over positions of
              delta_i * xhat_i, grad beta_i = sum of delta_i.
Biases: the (spatially summed) delta. Equal to the vmap path within float rounding
(tested for every arch x norm); unsupported layers make `hook_sq` return None.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bnmem.models.zoo import mode

_SUPPORTED = (nn.Linear, nn.Conv2d, nn.modules.batchnorm._BatchNorm, nn.GroupNorm)


def supported(model: nn.Module) -> bool:
    """True when every module owning trainable parameters has a closed form here."""
    for m in model.modules():
        if any(p.requires_grad for p in m.parameters(recurse=False)):
            if not isinstance(m, _SUPPORTED):
                return False
            if isinstance(m, nn.Conv2d) and (m.groups != 1 or m.padding_mode != "zeros"
                                             or isinstance(m.padding, str)):
                return False
    return True


def _xhat(m: nn.Module, a: torch.Tensor) -> torch.Tensor:
    if isinstance(m, nn.GroupNorm):
        return F.group_norm(a, m.num_groups, eps=m.eps)
    shape = (1, -1) + (1,) * (a.dim() - 2)
    return (a - m.running_mean.view(shape)) / torch.sqrt(m.running_var.view(shape) + m.eps)


def _module_sq(m: nn.Module, a: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """Squared norm of this module's per-sample parameter gradient, float64 [n]."""
    n = a.shape[0]
    if isinstance(m, nn.Linear):
        sq = d.pow(2).sum(1) * a.pow(2).sum(1)
        bias = d.pow(2).sum(1)
    elif isinstance(m, nn.Conv2d):
        sq = _conv_weight_sq(m, a, d)
        bias = d.flatten(2).sum(2).pow(2).sum(1)
    else:  # BN in eval mode, GroupNorm
        spatial = tuple(range(2, a.dim()))
        g = (d * _xhat(m, a)).sum(spatial) if spatial else d * _xhat(m, a)
        b = d.sum(spatial) if spatial else d
        sq, bias = g.pow(2).sum(1), b.pow(2).sum(1)
    if m.bias is None or not m.bias.requires_grad:
        bias = torch.zeros(n, dtype=sq.dtype, device=sq.device)
    return (sq.double() + bias.double()).view(n)


def _conv_weight_sq(m: nn.Conv2d, a: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """||grad W_i||^2 [n] of a Conv2d (groups=1): the n samples' weight gradients come
    from ONE grouped weight-gradient convolution, sample i as group i (input [1, n*in, H,
    W], output gradient [1, n*out, H', W']); faster on CPU than unfold + bmm
    (bench/bench_convs.py, BENCHMARKS.md)."""
    n, (out, cin) = a.shape[0], m.weight.shape[:2]
    # measured: channels-last wins for one input channel, plain layout otherwise
    cl = torch.channels_last if cin == 1 else torch.contiguous_format
    gw = torch.ops.aten.convolution_backward(
        d.reshape(1, n * out, *d.shape[2:]).contiguous(memory_format=cl),
        a.reshape(1, n * cin, *a.shape[2:]).contiguous(memory_format=cl),
        m.weight.new_empty(n * out, cin, *m.weight.shape[2:]), None, list(m.stride),
        list(m.padding), list(m.dilation), False, [0, 0], n, [False, True, False])[1]
    return gw.reshape(n, -1).pow(2).sum(1)


def hook_sq(model: nn.Module, x: torch.Tensor, y: torch.Tensor,
            groups: dict[str, list[str]]) -> torch.Tensor | None:
    """float64 [L, n]: per-layer squared per-sample gradient norms, eval mode; None when a
    layer type is unsupported (the caller then uses vmap). `groups` keys are module names."""
    if not supported(model):
        return None
    modules = dict(model.named_modules())
    inputs: dict[str, torch.Tensor] = {}
    outputs: dict[str, torch.Tensor] = {}
    handles = []

    def capture(name: str):
        def hook(module, args, out):
            inputs[name], outputs[name] = args[0].detach(), out
            return out
        return hook

    for name in groups:
        handles.append(modules[name].register_forward_hook(capture(name)))
    try:
        with mode(model, False), torch.enable_grad():
            loss = F.cross_entropy(model(x), y, reduction="sum")  # d(sum)/d out_i = d l_i / d out_i
            # Only the layer outputs' gradients: autograd then skips every weight gradient.
            deltas = torch.autograd.grad(loss, [outputs[n] for n in groups])
    finally:
        for h in handles:
            h.remove()
    return torch.stack([_module_sq(modules[n], inputs[n], d.detach())
                        for n, d in zip(groups, deltas)])
