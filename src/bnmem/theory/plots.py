"""The theory stage's figure (plots/theory.png): the outlier-margin growth ratio against
gamma/sigma with its slope-2 prediction, and the first-order prediction's error against the
step size (bnmem.theory.mechanism computes both)."""
from __future__ import annotations

import numpy as np


def plot_theory(table: dict[str, np.ndarray], grid: dict, path: str) -> None:
    """Left: growth ratio vs gamma/sigma, log-log, with the slope-2 prediction.
    Right: |measured/predicted - 1| vs eta for a few gamma/sigma."""
    from matplotlib.figure import Figure  # Agg canvas, no global backend state
    from matplotlib.ticker import NullFormatter

    fig = Figure(figsize=(11, 4.5))
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.12, top=0.92, wspace=0.25)
    ax1, ax2 = fig.subplots(1, 2)
    k, eta0 = table["gamma_over_sigma"], grid["etas"][0]
    kk = np.geomspace(k.min(), k.max(), 100)
    ax1.loglog(kk, kk ** 2, "k-", lw=1, label=r"predicted $(\gamma/\sigma)^2$ (slope 2)")
    ax1.loglog(k, table["ratio"], "o", color="C0", label=f"BN, batch statistics held (η={eta0:g})")
    ax1.loglog(k, table["ratio_batch_stats"], "s", mfc="none", ms=9, color="C1",
               label=f"BN, train-mode statistics (η={eta0:g})")
    ticks = [t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20) if k.min() / 1.1 <= t <= k.max() * 1.1]
    ax1.set_xticks(ticks, labels=[f"{t:g}" for t in ticks])
    ax1.xaxis.set_minor_formatter(NullFormatter())  # minor labels collide on log axes
    ax1.set_xlabel(r"$\gamma/\sigma$")
    ax1.set_ylabel("outlier margin growth per step: BN / no BN")
    ax1.set_title("One SGD step on the outlier's loss")
    ax1.legend(fontsize=8)
    ax1.grid(True, which="both", alpha=0.3)
    ax2.axhline(0.1, color="k", ls="--", lw=1, label="10 %")
    for i in sorted({0, len(k) // 2, len(k) - 1}):
        ax2.loglog(grid["etas"], np.abs(grid["rel"][i] - 1), "o-",
                   label=fr"$\gamma/\sigma$ = {k[i]:.2g}")
    ax2.set_xlabel(r"step size $\eta$")
    ax2.set_ylabel("|measured / predicted - 1|")
    ax2.set_title("Error of the first-order prediction (batch statistics held)")
    ax2.legend(fontsize=8)
    ax2.grid(True, which="both", alpha=0.3)
    fig.savefig(path, format="png", dpi=110)
