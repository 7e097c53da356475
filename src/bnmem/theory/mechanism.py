"""theory: a numeric check of the paper's (gamma/sigma)^2 mechanism on one conv channel.

Model (float64): x [N,1,8,8] -> conv w (one 3x3 filter, padding 1, no bias) -> h [N,1,8,8]
-> norm -> flatten z [N,64] -> logits = z V^T (V [2,64], no bias). Margin of sample i:
m_i = logit_{y_i} - logit_{1-y_i}; loss l_i = softplus(-m_i) (two-class cross-entropy).
mu, s2 = mean and biased variance of h over batch and pixels; sigma = sqrt(s2 + eps).

Norms compared, all with the same w, V:
  bn        gamma (h - mu)/sigma + beta, mu and sigma held at their batch values during the
            step (F.batch_norm in eval mode fed the batch statistics): the premise of the
            paper's first-order analysis.
  none      h - mu: the same centring with gain 1, so at beta = 0 the two forwards differ
            only by the gain k = gamma/sigma on h (the no-BN model).
  bn_batch  real train-mode BN (F.batch_norm, training=True): mu, sigma recomputed and
            differentiated. Shown for contrast, not predicted exactly.

Derivation. One SGD step of size eta on the outlier's loss over theta = (w, V) (gamma, beta
held: the no-BN model has no counterpart) moves theta by eta*s*grad m, s = -dl/dm =
sigmoid(-m), so to first order dm = eta*s*||grad m||^2. With BN and beta = 0, z = k f with
f = conv(x; w) - mu, hence grad_w m = k J^T u and grad_V m = +-k f (J = df/dw,
u = V_y - V_other); without BN the same with k = 1. The quantity predicted is
  G := dm / (eta s)  (margin growth per unit step and unit loss slope),
  G_bn / G_none -> k^2 = (gamma/sigma)^2 as eta -> 0, i.e. exponent 2 in log-log.
Dividing by s removes the two models' different starting losses. The outlier starts
misclassified (the state memorization starts from), so s ~ 1 and no step underflows.
At finite eta, w and V move together, dm gains a (eta s)^2 term cubic in k, and the error
grows linearly in eta (fastest at large gamma/sigma, where the effective step is k^2 larger).
bn_batch: differentiating mu, sigma removes from grad_w m its parts along the mean patch and
along C w (BN's shift and scale invariance): a gamma-independent factor on the w part, so
the slope stays 2 and only the prefactor moves (most for the conv filter alone).
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from bnmem.core.io import significant

EPS = 1e-5  # nn.BatchNorm2d's default
THEORY_NORMS = ("bn", "none", "bn_batch")
Params = dict[str, torch.Tensor]


# ---------------------------------------------------------------- data and model

def make_data(rng: np.random.Generator,
              n: int = 64,
              amplitude: float = 3.0,
              outlier_distance: float = 20.0) -> dict[str, np.ndarray]:
    """Two classes x = +-amplitude*T + N(0, 1) on 1x8x8 (T a unit central blob), one outlier.

    The outlier replaces a class-1 sample: it sits on class 1's side of T but far along a
    direction U (a corner checkerboard, orthogonal to T) and carries label 0, so fitting
    it needs memorization. `x_clean`/`y_clean` hold the sample it replaced.
    """
    g = np.arange(8) - 3.5
    blob = np.exp(-(g[:, None] ** 2 + g[None, :] ** 2) / (2 * 1.5 ** 2))
    t = blob / np.linalg.norm(blob)
    u = np.zeros((8, 8))
    u[:3, :3] = (-1.0) ** np.add.outer(np.arange(3), np.arange(3))
    u -= (u * t).sum() * t
    u /= np.linalg.norm(u)
    y = np.arange(n) % 2  # balanced, 0/1
    x = (2 * y - 1)[:, None, None] * amplitude * t + rng.standard_normal((n, 8, 8))
    idx = int(rng.choice(np.flatnonzero(y == 1)))
    x_clean, y_clean = x.copy(), y.copy()
    x[idx] = amplitude * t + outlier_distance * u + rng.standard_normal((8, 8)) * 0.1
    y[idx] = 0
    return {"x": x[:, None], "y": y.astype(np.int64), "x_clean": x_clean[:, None],
            "y_clean": y_clean.astype(np.int64), "outlier": np.int64(idx)}


def init_params(gen: torch.Generator, gamma: float = 1.0) -> Params:
    """w ~ N(0, 2/9) (He), V ~ N(0, 1/64), beta = 0; float64 leaves."""
    kw = dict(dtype=torch.float64, generator=gen)
    return {"w": torch.randn(1, 1, 3, 3, **kw) * math.sqrt(2 / 9),
            "V": torch.randn(2, 64, **kw) / 8,
            "gamma": torch.tensor([float(gamma)], dtype=torch.float64),
            "beta": torch.zeros(1, dtype=torch.float64)}


def misclassify_outlier(p: Params, x: torch.Tensor, y: torch.Tensor, idx: int) -> Params:
    """Use -V instead of V if needed so the outlier starts misclassified (margin < 0).

    V's law is symmetric, so -V is an equally likely draw. A misclassified outlier is the
    state memorization starts from; at a large positive margin s = sigmoid(-m) underflows
    and the step's margin change is lost to rounding.
    """
    m = margins(logits(p, x, "bn_batch"), y)[idx]
    return dict(p, V=-p["V"]) if float(m) > 0 else p


def batch_stats(p: Params, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mu, biased var) of the conv channel over batch and pixels, detached, shape [1]."""
    h = F.conv2d(x, p["w"].detach(), padding=1)
    return h.mean().reshape(1), h.var(unbiased=False).reshape(1)


def logits(p: Params, x: torch.Tensor, norm: str,
           stats: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """[N, 2] logits; `stats` = (mu, var) held fixed for norms `bn` and `none`."""
    h = F.conv2d(x, p["w"], padding=1)  # [N, 1, 8, 8]
    if norm == "bn_batch":
        h = F.batch_norm(h, None, None, p["gamma"], p["beta"], training=True, eps=EPS)
    elif norm == "bn":
        h = F.batch_norm(h, stats[0], stats[1], p["gamma"], p["beta"], training=False, eps=EPS)
    elif norm == "none":
        h = h - stats[0]
    else:
        raise ValueError(f"norm: {norm!r} is invalid; valid: {' | '.join(THEORY_NORMS)}")
    return h.flatten(1) @ p["V"].T


def margins(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """logit of the label minus the other logit (two classes)."""
    return z.gather(1, y[:, None])[:, 0] - z.gather(1, (1 - y)[:, None])[:, 0]


def sigma_of(p: Params, x: torch.Tensor) -> float:
    """BN's sigma = sqrt(batch var + eps) of the conv channel."""
    return float(torch.sqrt(batch_stats(p, x)[1] + EPS))


# ---------------------------------------------------------------- one-step growth

def step_growth(p: Params, x: torch.Tensor, y: torch.Tensor, idx: int, norm: str,
                etas: np.ndarray, update: tuple[str, ...] = ("w", "V")) -> np.ndarray:
    """G(eta) = (m_after - m_before)/(eta s) on sample `idx` after one SGD step on its loss.

    The step updates `update` (default: w and V, the parameters both models share).
    Statistics for `bn`/`none` are the batch's at the current w and stay fixed;
    `bn_batch` differentiates them and recomputes them after the step.
    """
    stats = batch_stats(p, x)
    theta = {k: v.detach().clone().requires_grad_(k in update) for k, v in p.items()}

    def outlier_margin(q: Params) -> torch.Tensor:
        return margins(logits(q, x, norm, stats), y)[idx]

    m0 = outlier_margin(theta)
    loss = F.softplus(-m0)
    grads = dict(zip(update, torch.autograd.grad(loss, [theta[k] for k in update])))
    s = float(torch.sigmoid(-m0.detach()))  # -dl/dm
    out = np.empty(len(etas))
    with torch.no_grad():
        for j, eta in enumerate(etas):
            q = dict(theta, **{k: theta[k] - eta * g for k, g in grads.items()})
            out[j] = float(outlier_margin(q) - m0) / (eta * s)
    return out


def growth_table(p: Params, x: torch.Tensor, y: torch.Tensor, idx: int,
                 gammas: np.ndarray, etas: np.ndarray) -> dict[str, np.ndarray]:
    """Growth G per norm over gammas (rows) and etas (columns); w, V fixed, beta = 0."""
    sigma = sigma_of(p, x)
    out = {"gamma": np.asarray(gammas, float), "gamma_over_sigma": np.asarray(gammas) / sigma,
           "growth_nobn": np.tile(step_growth(p, x, y, idx, "none", etas), (len(gammas), 1))}
    for norm in ("bn", "bn_batch"):
        rows = [step_growth(dict(p, gamma=torch.tensor([float(g)], dtype=torch.float64)),
                            x, y, idx, norm, etas) for g in gammas]
        out["growth_" + norm] = np.stack(rows)
    return out


def fit_loglog(xs: np.ndarray, ys: np.ndarray) -> tuple[float, float, float]:
    """Least-squares line log y = a log x + b; returns (a, b, r2)."""
    lx, ly = np.log(xs), np.log(ys)
    a, b = np.polyfit(lx, ly, 1)
    resid = ly - (a * lx + b)
    r2 = 1 - float((resid ** 2).sum() / ((ly - ly.mean()) ** 2).sum())
    return float(a), float(b), r2


# ---------------------------------------------------------------- does the outlier push gamma up?

def dloss_dgamma(p: Params, x: torch.Tensor, y: torch.Tensor, idx: int) -> float:
    """d l_idx / d gamma with train-mode BN on the whole batch."""
    gamma = p["gamma"].detach().clone().requires_grad_(True)
    z = logits(dict(p, gamma=gamma), x, "bn_batch")
    (g,) = torch.autograd.grad(F.softplus(-margins(z, y)[idx]), gamma)
    return float(g)


def stack(ps: list[Params]) -> Params:
    """C single models -> one stacked model: w [C,1,3,3], V [C,2,64], gamma, beta [C]."""
    return {k: (torch.stack if k == "V" else torch.cat)([p[k] for p in ps]) for k in ps[0]}


def unstack(q: Params, c: int) -> Params:
    """Model c of a stacked model, in the single-model shapes."""
    return {k: v[c] if k == "V" else v[c:c + 1] for k, v in q.items()}


def train_bn(p: Params, x: torch.Tensor, y: torch.Tensor, order: torch.Tensor,
             lr: float) -> Params:
    """Plain SGD on C independent BN models at once (train mode, all parameters).

    Each model is one channel of a grouped conv and of one BatchNorm2d, whose statistics
    are per channel, so the models never mix. Shapes: p stacked (see `stack`),
    x [C, N, 1, 8, 8], y [C, N], order [steps, C, batch] sample indices per step and model.
    """
    q = {k: v.detach().clone().requires_grad_(True) for k, v in p.items()}
    c = torch.arange(x.shape[0])[:, None]
    for b in order:
        xb, yb = x[c, b][:, :, 0].transpose(0, 1), y[c, b].T  # [B, C, 8, 8], [B, C]
        h = F.conv2d(xb, q["w"], padding=1, groups=len(c))
        h = F.batch_norm(h, None, None, q["gamma"], q["beta"], training=True, eps=EPS)
        z = torch.einsum("bck,cjk->bcj", h.flatten(2), q["V"])
        # sum over models of each model's mean loss: every model gets its own gradient
        loss = F.cross_entropy(z.reshape(-1, 2), yb.reshape(-1)) * len(c)
        grads = torch.autograd.grad(loss, list(q.values()))
        with torch.no_grad():
            for v, g in zip(q.values(), grads):
                v -= lr * g
    return {k: v.detach() for k, v in q.items()}


# ---------------------------------------------------------------- the whole check

GAMMAS = tuple(np.geomspace(0.25, 8.0, 11))
ETAS = (1e-5, 1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)


def _eta_key(eta: float) -> str:
    return f"eta_{eta:.0e}"  # e.g. eta_1e-03: metric keys carry no dots


def _worst(v: np.ndarray) -> float:
    """The entry farthest from 1 (for measured/predicted ratios)."""
    return float(v[np.argmax(np.abs(v - 1))])


def _replicate(seed: int, r: int, steps: int = 0, batch_size: int = 1
               ) -> tuple[dict[str, np.ndarray], Params, np.ndarray]:
    """Replicate r of `seed`: data, initial parameters (outlier misclassified), batch order."""
    rng = np.random.default_rng([seed, 0x7E0, r])
    data = make_data(rng)
    x, y = torch.from_numpy(data["x"]), torch.from_numpy(data["y"])
    p = init_params(torch.Generator().manual_seed(int(rng.integers(2 ** 62))))
    p = misclassify_outlier(p, x, y, int(data["outlier"]))
    order = np.argsort(rng.random((steps, len(x))), axis=1)[:, :batch_size]
    return data, p, order


def gamma_experiment(seed: int, replicates: int = 8, steps: int = 300, lr: float = 0.1,
                     batch_size: int = 16) -> dict[str, float]:
    """Train the BN model with and without the outlier (same init, same batch order).

    Every replicate starts with the outlier misclassified. Since d(BN output)/d gamma = h_hat,
    dl_out/d gamma = -s (m - beta*sum(u))/gamma: at init (beta = 0, m < 0) the outlier pulls
    gamma down; once it is fit (m > beta*sum(u)) it pushes gamma up.
    """
    reps = [_replicate(seed, r, steps, batch_size) for r in range(replicates)]
    pairs = [(d[xk], d[yk]) for d, _, _ in reps for xk, yk in (("x", "y"), ("x_clean", "y_clean"))]
    q = train_bn(stack([p for _, p, _ in reps for _ in range(2)]),
                 torch.from_numpy(np.stack([xv for xv, _ in pairs])),
                 torch.from_numpy(np.stack([yv for _, yv in pairs])),
                 torch.from_numpy(np.stack([o for _, _, o in reps for _ in range(2)], axis=1)), lr)
    col: dict[str, list] = {k: [] for k in ("gamma_with", "gamma_without", "gos_with",
                                            "gos_without", "margin", "dldg_init", "dldg_final")}
    for r, (data, p0, _) in enumerate(reps):
        x, y, idx = torch.from_numpy(data["x"]), torch.from_numpy(data["y"]), int(data["outlier"])
        for j, (tag, xk) in enumerate((("with", "x"), ("without", "x_clean"))):
            qr = unstack(q, 2 * r + j)
            col[f"gamma_{tag}"].append(float(qr["gamma"]))
            col[f"gos_{tag}"].append(float(qr["gamma"]) / sigma_of(qr, torch.from_numpy(data[xk])))
        q_with = unstack(q, 2 * r)
        col["margin"].append(float(margins(logits(q_with, x, "bn_batch"), y)[idx]))
        col["dldg_init"].append(dloss_dgamma(p0, x, y, idx))
        col["dldg_final"].append(dloss_dgamma(q_with, x, y, idx))
    c = {k: np.array(v) for k, v in col.items()}
    return {
        "gamma_final_with_outlier": float(c["gamma_with"].mean()),
        "gamma_final_without_outlier": float(c["gamma_without"].mean()),
        "gamma_over_sigma_final_with_outlier": float(c["gos_with"].mean()),
        "gamma_over_sigma_final_without_outlier": float(c["gos_without"].mean()),
        "share_replicates_gamma_higher_with_outlier":
            float((c["gamma_with"] > c["gamma_without"]).mean()),
        "outlier_margin_final": float(c["margin"].mean()),
        "share_replicates_outlier_fit": float((c["margin"] > 0).mean()),
        "dloss_dgamma_outlier_sign": int(np.sign(c["dldg_init"][0])),
        "dloss_dgamma_outlier_init": float(c["dldg_init"][0]),
        "dloss_dgamma_outlier_sign_final": int(np.sign(c["dldg_final"][0])),
        "share_replicates_dloss_dgamma_negative_final": float((c["dldg_final"] < 0).mean()),
        "replicates": replicates, "train_steps": steps, "train_lr": lr,
        "train_batch_size": batch_size,
    }


def _eta_summary(etas: np.ndarray, k: np.ndarray, ratio: np.ndarray, rel: np.ndarray,
                 ref: int) -> dict:
    """Per step size: worst and gamma~1 measured/predicted, exponent (null if a ratio <= 0)."""
    out = {}
    for j, eta in enumerate(etas):
        ok = bool((ratio[:, j] > 0).all())
        out[_eta_key(float(eta))] = {
            "ratio_over_predicted_worst": _worst(rel[:, j]),
            "ratio_over_predicted": float(rel[ref, j]),
            "fitted_exponent": fit_loglog(k, ratio[:, j])[0] if ok else None}
    return out


def run_theory(seed: int, gammas: tuple[float, ...] = GAMMAS, etas: tuple[float, ...] = ETAS,
               replicates: int = 8, steps: int = 300) -> tuple[dict, dict[str, np.ndarray], dict]:
    """The growth check (replicate 0 of `seed`) and the gamma experiment.

    Returns (metrics, table at the smallest eta, growth_table output plus etas and rel).
    """
    data, p, _ = _replicate(seed, 0)
    x, y, idx = torch.from_numpy(data["x"]), torch.from_numpy(data["y"]), int(data["outlier"])
    etas_a = np.asarray(etas, float)
    grid = growth_table(p, x, y, idx, np.asarray(gammas, float), etas_a)
    k, predicted = grid["gamma_over_sigma"], grid["gamma_over_sigma"] ** 2
    ratio = grid["growth_bn"] / grid["growth_nobn"]  # [gammas, etas]
    ratio_batch = grid["growth_bn_batch"] / grid["growth_nobn"]
    rel, rel_batch = ratio / predicted[:, None], ratio_batch / predicted[:, None]
    ref = int(np.argmin(np.abs(np.log(grid["gamma"]))))  # gamma closest to 1 (BN's init)
    a, b, r2 = fit_loglog(k, ratio[:, 0])
    a_batch, b_batch, r2_batch = fit_loglog(k, ratio_batch[:, 0])
    # conv filter alone, gamma as drawn (1): where train-mode statistics bite hardest
    conv = [step_growth(p, x, y, idx, norm, etas_a[:1], ("w",))[0] for norm in ("bn_batch", "none")]
    sigma = sigma_of(p, x)
    metrics = {
        "sigma": sigma, "eta_smallest": float(etas_a[0]),
        "ratio_measured_over_predicted": float(rel[ref, 0]),
        "ratio_measured_over_predicted_worst": _worst(rel[:, 0]),
        "fitted_exponent": a, "fitted_prefactor": float(np.exp(b)), "r2": r2,
        "ratio_batch_stats_over_predicted": float(rel_batch[ref, 0]),
        "ratio_batch_stats_conv_only_over_predicted": conv[0] / conv[1] * sigma ** 2,
        "fitted_exponent_batch_stats": a_batch,
        "fitted_prefactor_batch_stats": float(np.exp(b_batch)), "r2_batch_stats": r2_batch,
        "eta_dependence": _eta_summary(etas_a, k, ratio, rel, ref),
    }
    metrics.update(gamma_experiment(seed, replicates, steps))
    table = {"gamma": grid["gamma"], "gamma_over_sigma": k,
             "growth_bn": grid["growth_bn"][:, 0], "growth_nobn": grid["growth_nobn"][:, 0],
             "ratio": ratio[:, 0], "predicted": predicted, "ratio_over_predicted": rel[:, 0],
             "growth_bn_batch": grid["growth_bn_batch"][:, 0],
             "ratio_batch_stats": ratio_batch[:, 0]}
    return significant(metrics), significant(table), significant(dict(grid, etas=etas_a, rel=rel))
