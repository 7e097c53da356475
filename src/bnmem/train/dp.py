"""DP-SGD through Opacus: the training loop of the DP arms (groupnorm_dp, groupnorm_dp_eps<E>).

The recipe is the arm's train.* recipe (learning-rate schedule, momentum, weight decay,
epochs) with the three changes DP-SGD makes (Abadi et al. 2016), each done by Opacus:
- Poisson sampling: every step takes each training sample independently with
  probability q = train.batch_size / n (n = the model's training-set size), over
  ceil(n / batch_size) steps per epoch, as the non-DP recipe's steps;
- per-sample gradients (opacus.GradSampleModule) clipped to norm dp.max_grad_norm;
- Gaussian noise of std noise_multiplier x max_grad_norm added to their sum, divided by
  the expected batch size (opacus.optimizers.DPOptimizer).
The noise multiplier is what the accountant (dp.accountant) needs for the arm's ε at
dp.delta over the run's steps at rate q; every run (target, shadow, each budget) finds its
own for its own n and steps, by the same rule, so each is (ε, δ)-DP. Sampling and noise
come from generators seeded by the run's batch-order seed: a run's bits depend on its
seeds only (on one CPU kind; these are PyTorch's float32 kernels, not bnmem's C ones).

Every run also records its replace-one ε (`substitution_epsilon`, dp_accounting's PLD
accountant): the membership attack's in/out datasets differ by a substituted sample, so
that is the ε its empirical lower bound is audited against. The sampling rate and step
count come from the run's training-set size, which bnmem fixes by construction (half the
pool for every shadow, the pool for the target), not from the private data.

Opacus and dp-accounting are optional dependencies (`pip install 'bnmem[dp]'`); nothing
imports them until a DP arm trains.
"""
from __future__ import annotations

import functools
import logging
import math
import time
import warnings
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bnmem.core.config import DPConfig, TrainConfig
from bnmem.core.io import InputError
from bnmem.core.rng import SALT
from bnmem.core.schedule import lr_at

log = logging.getLogger(__name__)


def opacus():
    """The opacus package, or one line saying how to install it."""
    try:
        import opacus as mod
    except ImportError:
        raise InputError("arms: the DP arms (groupnorm_dp*) need Opacus; install it with "
                         "pip install 'bnmem[dp]' (opacus>=1.6)") from None
    return mod


@functools.lru_cache(maxsize=256)
def noise_multiplier(epsilon: float, delta: float, sample_rate: float, steps: int,
                     accountant: str) -> float:
    """The accountant's noise multiplier for (epsilon, delta) over `steps` steps at
    Poisson rate `sample_rate` (Opacus' get_noise_multiplier; cached: shadows of one size
    share it)."""
    from opacus.accountants.utils import get_noise_multiplier
    quiet()
    return float(get_noise_multiplier(target_epsilon=epsilon, target_delta=delta,
                                      sample_rate=sample_rate, steps=steps,
                                      accountant=accountant))


def spent_epsilon(sigma: float, sample_rate: float, steps: int, delta: float,
                  accountant: str) -> float:
    """The ε the accountant gives a run of `steps` steps at rate q with noise `sigma`."""
    from opacus.accountants import create_accountant
    acc = create_accountant(accountant)
    acc.history = [(sigma, sample_rate, steps)]
    quiet()
    return float(acc.get_epsilon(delta))


@functools.lru_cache(maxsize=None)
def substitution_epsilon(sigma: float, sample_rate: float, steps: int, delta: float) -> float:
    """The replace-one ε of the same run (dp_accounting's PLD accountant,
    NeighboringRelation.REPLACE_ONE): the in/out datasets of bnmem's membership attack have
    equal size and differ by one substituted sample (every shadow trains on exactly half
    the pool), so this, not the add/remove ε the noise is set for, is what the attack's
    empirical ε can be held to (roughly up to twice the add/remove ε)."""
    try:
        import dp_accounting as dpa
        from dp_accounting.pld.pld_privacy_accountant import PLDAccountant
    except ImportError:
        raise InputError("arms: the DP arms' audit needs dp-accounting; install it with "
                         "pip install 'bnmem[dp]'") from None
    acc = PLDAccountant(dpa.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-3)
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(
        sample_rate, dpa.GaussianDpEvent(sigma)), steps))
    return float(acc.get_epsilon(delta))


def quiet() -> None:
    """Opacus' two known, harmless warnings off (process-wide filters, re-added idempotently
    per run: not a catch_warnings context, which races between the shadow workers'
    threads): RDP's
    "optimal order is the largest alpha" (its bound is then looser, never wrong) and the
    full-backward-hook note on the first layer, whose input needs no gradient."""
    warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
    warnings.filterwarnings("ignore", message="Full backward hook is firing")


def check_model(model: nn.Module) -> None:
    """A model Opacus cannot train (BatchNorm, an unsupported layer) stops here with one
    line naming it; in-place activations are switched off by the spec
    (bnmem.models.spec.model_spec: `inplace_off`)."""
    from opacus.validators import ModuleValidator
    errors = ModuleValidator.validate(model, strict=False)
    if errors:
        raise InputError(f"arms: DP-SGD (Opacus) cannot train this model: {errors[0]}"
                         f"{f' (and {len(errors) - 1} more)' if len(errors) > 1 else ''}")


class Running:
    """The modules whose forward is running (pre- and post-forward hooks): names the one
    where an in-place operation on a hooked tensor failed."""

    def __init__(self, model: nn.Module):
        self.stack: list[str] = []
        self.handles = []
        for name, m in model.named_modules():
            self.handles.append(m.register_forward_pre_hook(self._enter(name or "(the model)")))
            self.handles.append(m.register_forward_hook(self._leave))

    def _enter(self, name: str):
        def hook(module, inputs) -> None:  # None: the inputs stay as they are
            self.stack.append(name)
        return hook

    def _leave(self, module, inputs, output) -> None:  # None: the output stays
        self.stack.pop()

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


def _inplace_error(exc: RuntimeError, where: str) -> InputError:
    return InputError(f"arms: DP-SGD (Opacus) cannot train this model: module {where!r} "
                      "modifies a tensor in place (e.g. out += identity in a residual "
                      "block; Opacus issue #828); make it out-of-place (out = out + "
                      f"identity) ({str(exc).splitlines()[0][:120]})")


def train_dp(model: nn.Module, x: torch.Tensor, y: torch.Tensor, cfg: TrainConfig, dp: DPConfig,
             epsilon: float, seed: int,
             on_epoch: Callable[[int, nn.Module, dict], None] | None = None) -> list[dict]:
    """Train `model` in place with DP-SGD on (x, y) (bnmem.train.loop.train_model's contract:
    one record per epoch, `on_epoch(epoch, model, record)` after each). Every record
    carries the run's DP accounting: noise_multiplier, sample_rate, steps, epsilon (the
    accountant's, at dp.delta)."""
    opacus()
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer
    check_model(model)  # before the accountant's seconds: a refused model fails at once
    n, device = len(y), next(model.parameters()).device
    q = min(1.0, cfg.batch_size / n)
    per_epoch = math.ceil(n / cfg.batch_size)
    total = per_epoch * cfg.epochs
    sigma = noise_multiplier(epsilon, dp.delta, q, total, dp.accountant)
    spent = spent_epsilon(sigma, q, total, dp.delta, dp.accountant)
    accounting = {"noise_multiplier": sigma, "sample_rate": q, "steps": total,
                  "epsilon": spent, "delta": dp.delta, "max_grad_norm": dp.max_grad_norm,
                  "epsilon_substitution": substitution_epsilon(sigma, q, total, dp.delta)}
    quiet()
    gsm = GradSampleModule(model, loss_reduction="mean")
    # seeded for reproducibility, per budget (two endpoints of one model never share a
    # noise draw): DP against anyone without the seed; models meant for release need
    # Opacus' secure_mode instead
    noise = torch.Generator(device=device).manual_seed(int(np.random.SeedSequence(
        [seed, SALT["dp_noise"], cfg.epochs]).generate_state(1)[0]))
    sampling = np.random.default_rng([seed, SALT["dp_sampling"]])
    opt = DPOptimizer(torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum,
                                      weight_decay=cfg.weight_decay),
                      noise_multiplier=sigma, max_grad_norm=dp.max_grad_norm,
                      expected_batch_size=round(q * n), loss_reduction="mean",
                      generator=noise)
    history, step = [], 0
    try:
        for epoch in range(1, cfg.epochs + 1):
            t0, loss_sum, seen = time.perf_counter(), 0.0, 0
            model.train()
            for _ in range(per_epoch):
                lr = lr_at(cfg, step, total)
                for group in opt.param_groups:
                    group["lr"] = lr
                idx = torch.as_tensor(np.flatnonzero(sampling.random(n) < q))
                opt.zero_grad(set_to_none=True)
                if idx.numel():
                    xb, yb = x[idx].to(device), y[idx].to(device)
                    running = Running(model) if step == 0 else None
                    try:
                        loss = F.cross_entropy(gsm(xb), yb)
                    except RuntimeError as exc:  # an in-place op Opacus' hooks cannot take
                        if "inplace" not in str(exc) or running is None:
                            raise
                        raise _inplace_error(exc, running.stack[-1] if running.stack
                                             else "(unknown)") from None
                    finally:
                        if running is not None:
                            running.remove()
                    loss.backward()
                    loss_sum, seen = loss_sum + loss.item() * idx.numel(), seen + idx.numel()
                else:  # an empty Poisson batch is still a step: noise only
                    for p in model.parameters():
                        p.grad_sample = torch.zeros((0, *p.shape), device=device)
                opt.step()
                step += 1
            record = {"epoch": epoch, "loss": loss_sum / max(seen, 1), "penalty": 0.0,
                      "lr": lr, "seconds": time.perf_counter() - t0, **accounting}
            if on_epoch is not None:
                on_epoch(epoch, model, record)
            history.append(record)
    finally:
        gsm.to_standard_module()  # hooks and grad samples off: a plain module again
    return history
