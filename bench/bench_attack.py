"""Benchmark of the attack stage's kernels on synthetic logits (default 64 models x 60 000
samples x 2 queries x 10 classes): signals, the four leave-one-out LiRA variants, RMIA,
and metrics with bootstrap CIs. Baselines, measured in the same run: a straightforward
per-target numpy/scipy implementation (np.delete + nanmedian + scipy.stats.norm; RMIA with
the full [N, population] likelihood-ratio matrix; signals through a float64 copy and
scipy logsumexp), timed on a few targets/models and scaled to all of them, and
per-resample sklearn AUCs for the bootstrap. Prints a markdown table and
writes it to --out.

    python bench/bench_attack.py [--models 64] [--samples 60000] [--out bench/results/attack.md]
"""
import argparse
import os
import resource
import time
import tracemalloc
from pathlib import Path

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm
from sklearn.metrics import roc_auc_score

from bnmem.attack.lira import LIRA_VARIANTS, loo_lira
from bnmem.attack.signals import signals
from bnmem.attack.rmia import loo_rmia
from bnmem.core.rng import SALT
from bnmem.attack.roc import bootstrap_weights, evaluate
from bnmem.core.keep import keep_matrix

Q, C = 2, 10


def measure(fn, *args):
    """(result, seconds, peak MB traced above what was live before the call)."""
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - t0, (tracemalloc.get_traced_memory()[1] - base) / 2 ** 20


def baseline_signals(logits, y):
    """float64 copy, mask the label with put_along_axis, scipy logsumexp over classes."""
    z = logits.astype(np.float64)
    lab = np.broadcast_to(y[None, :, None, None], z.shape[:-1] + (1,))
    z_y = np.take_along_axis(z, lab, -1)[..., 0]
    np.put_along_axis(z, lab, -np.inf, -1)
    phi = z_y - logsumexp(z, axis=-1)
    return phi, logsumexp(-np.logaddexp(0, -phi), axis=-1) - np.log(phi.shape[-1])


def baseline_lira(phi, keep, t):
    """Target t against np.delete'd shadows (it and its complement t ^ 1 left out):
    masked nanmedian / nanstd, scipy densities."""
    s, k = np.delete(phi, [t, t ^ 1], 0), np.delete(keep, [t, t ^ 1], 0)[..., None]
    out = {}
    stats = {}
    for name, mask in (("in", k), ("out", ~k)):
        v = np.where(mask, s, np.nan)
        mu, sd = np.nanmedian(v, 0), np.nanstd(v, 0, ddof=1)
        dev = np.nansum((v - np.nanmean(v, 0)) ** 2, 0).sum(0)
        pooled = np.sqrt(dev / (mask.sum(0)[..., 0] - 1).sum())
        glob = np.full(sd.shape, np.nanstd(v))  # every signal of the set, ddof 0
        stats[name] = {"sample": sd, "pooled": np.broadcast_to(pooled, sd.shape),
                       "global": glob, "mu": mu}
    x = phi[t]
    for variant, (online, variance) in LIRA_VARIANTS.items():
        mi, mo = stats["in"]["mu"], stats["out"]["mu"]
        sin, sout = stats["in"][variance], stats["out"][variance]
        if variance == "global":  # the reference code: IN std for both online, OUT offline
            sin = sout = stats["in"]["global"] if online else stats["out"]["global"]
        if online:
            sc = norm.logpdf(x, mi, sin) - norm.logpdf(x, mo, sout)
        else:
            sc = -norm.logsf(x, mo, sout)
        out[variant] = sc.mean(-1)
    return out


def baseline_rmia(logp, keep, t, pop, gamma):
    lp, k = np.delete(logp, [t, t ^ 1], 0), np.delete(keep, [t, t ^ 1], 0)
    p = np.exp(lp)
    px = ((p * k).sum(0) / k.sum(0) + (p * ~k).sum(0) / (~k).sum(0)) / 2
    ratio = np.exp(logp[t]) / px
    lr = ratio[:, None] / ratio[pop][None, :]  # [N, population]
    out = (lr >= gamma).sum(1) / pop.size
    out[pop] = np.nan  # the population is reference only
    return out


def main() -> None:
    global C
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", type=int, default=64)
    p.add_argument("--samples", type=int, default=60000)
    p.add_argument("--baseline-targets", type=int, default=4)
    p.add_argument("--classes", type=int, default=C, help="e.g. 100 for the CIFAR-100 memory bound")
    p.add_argument("--out", default=str(Path(__file__).parent / "results" / "attack.md"))
    args = p.parse_args()
    C = args.classes
    m, n, k = args.models, args.samples, args.baseline_targets
    rss_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rng = np.random.default_rng(0)
    keep = keep_matrix(m, n, 0)  # complementary pairs, as the shadow stage trains them
    y = rng.integers(0, C, n)
    logits = rng.standard_normal((m, n, Q, C), dtype=np.float32)
    boost = (2.0 * keep + rng.normal(0, 1, n)).astype(np.float32)  # member + per-sample offset
    logits[:, np.arange(n), :, y] += boost.T[..., None]
    tracemalloc.start()
    rows = []
    (phi, logp, _), t_sig, m_sig = measure(signals, logits, y)
    t0 = time.perf_counter()
    phi_b, logp_b = baseline_signals(logits[:k], y)
    t_sig_b = (time.perf_counter() - t0) * m / k
    err_s = max(np.abs(phi_b - phi[:k]).max(), np.abs(logp_b - logp[:k]).max())
    del phi_b, logp_b
    rows.append(("signals (phi, log p) from logits", t_sig, t_sig_b, m_sig))
    del logits
    lira, t_lira, m_lira = measure(loo_lira, phi, keep, np.arange(m))
    t0 = time.perf_counter()
    base = [baseline_lira(phi, keep, t) for t in range(k)]
    t_base = (time.perf_counter() - t0) * m / k
    err = max(np.abs(base[t][v] - lira[v][t]).max() for t in range(k) for v in LIRA_VARIANTS)
    rows.append(("LiRA, 4 variants, balanced leave-one-out", t_lira, t_base, m_lira))
    rmia, t_rmia, m_rmia = measure(loo_rmia, logp, keep, np.arange(m), 2.0, 0.3, 500, 0,
                                   np.arange(m) ^ 1)
    t0 = time.perf_counter()
    pops = [np.random.default_rng([0, SALT["rmia_population"], t]).choice(np.flatnonzero(~keep[t]), 500,
                                                          replace=False) for t in range(k)]
    base_r = [baseline_rmia(logp, keep, t, pops[t], 2.0) for t in range(k)]
    t_base_r = (time.perf_counter() - t0) * m / k
    err_r = max(np.nanmax(np.abs(base_r[t] - rmia["rmia"][t])) for t in range(k))
    rows.append(("RMIA online + offline, balanced leave-one-out", t_rmia, t_base_r, m_rmia))
    # metrics at the pipeline's real scale: 16 models x 2000 samples, 200 resamples
    ms, ns, b = 16, 2000, 200
    kind = np.repeat([0, 1, 2], [1880, 100, 20]).astype(np.int8)
    scores, lab = lira["lira_online"][:ms, :ns], keep[:ms, :ns]
    w = bootstrap_weights(kind, b, np.random.default_rng(1))
    _, t_eval, m_eval = measure(evaluate, scores, lab, kind, w)
    t0 = time.perf_counter()
    for name, code in (("all", None), ("clean", 0), ("flipped", 1), ("ood", 2)):
        cols = np.arange(ns) if code is None else np.flatnonzero(kind == code)
        for r in range(b):
            roc_auc_score(lab[:, cols].ravel(), scores[:, cols].ravel(),
                          sample_weight=np.broadcast_to(w[r, cols], (ms, cols.size)).ravel())
    rows.append((f"metrics + {b}-resample CIs, 4 subsets, {ms} x {ns}", t_eval,
                 time.perf_counter() - t0, m_eval))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = [f"## attack: {m} models x {n} samples x {Q} queries x {C} classes "
             f"(logits {m * n * Q * C * 4 / 2 ** 20:.0f} MiB float32)", "",
             "| step | ours (s) | baseline (s) | speed-up | peak traced memory (MiB) |",
             "|---|---|---|---|---|"]
    for name, t, tb, mem in rows:
        lines.append(f"| {name} | {t:.2f} | {'-' if tb is None else f'{tb:.2f}'} | "
                     f"{'-' if tb is None else f'{tb / t:.1f}x'} | {mem:.0f} |")
    lines += ["", f"Peak RSS of the whole run: {peak:.0f} MiB (after imports: "
              f"{rss_imports:.0f} MiB; the peak includes the float32 logits and the baselines).",
              f"Baselines timed on {k} targets and scaled x{m / k:.0f}; max |ours - baseline| "
              f"on those targets: signals {err_s:.1e}, LiRA {err:.1e}, RMIA {err_r:.1e}. "
              "LiRA target: <= 5 s total.",
              f"Machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end "
              "(other jobs share the cores; absolute times are upper bounds)."]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
