"""LiRA at matched utility: compare arms at the epoch where their shadow models fit the
clean data equally well, not at the same epoch.

BN models fit faster, so at equal epochs part of "BN leaks more" may be "BN has fitted
more". The shadow stage records every model's identity-query signal after every epoch
(`epoch_phi`, `epoch_correct`); here each arm's shadow population gets a per-epoch fit
(accuracy on its IN clean samples, pooled over models), the common target is the lowest
final fit among the arms, and each arm is attacked (leave-one-out online LiRA, identity
query only) at the first epoch whose fit reaches it. The same attack at the final epoch
is reported beside it, so the two differ only in the epoch.
"""
from __future__ import annotations

import numpy as np

from bnmem.attack import loo_lira
from bnmem.corrupt import CLEAN, FLIPPED, OOD
from bnmem.roc import evaluate, paired_deltas


def _in_acc(correct: np.ndarray, keep: np.ndarray, mask: np.ndarray) -> float | None:
    """Accuracy on IN (model, sample) pairs of the `mask` samples, pooled over models."""
    sel = keep & mask[None, :]
    return float((correct & sel).sum() / sel.sum()) if sel.any() else None


def epoch_curve(epoch_phi: np.ndarray, epoch_correct: np.ndarray, keep: np.ndarray,
                kind: np.ndarray, one_sided: bool = True) -> list[dict]:
    """Per epoch: shadow fit (clean_in_acc), memorization of IN flipped / OOD samples, and
    the leave-one-out online LiRA AUC (identity query) on all samples.

    epoch_phi [m, E, N], epoch_correct [m, E, N] bool, keep [m, N] bool, kind [N].
    """
    rows = []
    for e in range(epoch_phi.shape[1]):
        c = epoch_correct[:, e]
        scores = loo_lira(epoch_phi[:, e, :, None].astype(np.float64), keep, one_sided,
                          ("lira_online",))
        met, _, _ = evaluate(scores["lira_online"], keep, kind, subsets=("all",))
        rows.append({"epoch": e + 1, "clean_in_acc": _in_acc(c, keep, kind == CLEAN),
                     "flipped_in_mem_acc": _in_acc(c, keep, kind == FLIPPED),
                     "ood_in_mem_acc": _in_acc(c, keep, kind == OOD),
                     "auc_lira_online_identity": met["all"]["auc"]})
    return rows


def matched_epochs(curves: dict[str, list[dict]],
                   key: str = "clean_in_acc") -> tuple[float, dict[str, int]]:
    """(target fit, {arm: first epoch whose `key` reaches it}) for per-epoch records; the
    target is the lowest final `key` of the arms, so every arm reaches it. Shared by the
    shadow view (clean_in_acc) and the target-model view (clean_train_acc)."""
    target = min(c[-1][key] for c in curves.values())
    return target, {arm: next(r["epoch"] for r in c if r[key] >= target - 1e-12)
                    for arm, c in curves.items()}


def matched_lira(epochs: dict[str, dict], kind: np.ndarray, boot: np.ndarray,
                 one_sided: bool = True) -> dict:
    """LiRA (online, identity query) at matched utility and at the final epoch, per arm,
    with bootstrap CIs and paired arm - none deltas on all samples (point estimates on
    each kind).

    Args:
        epochs: {arm: {"epoch_phi", "epoch_correct", "keep"}} from the shadow shards.
        kind: [N] pool kinds; boot: [B, N] bootstrap multiplicities shared by all arms.
    Returns a JSON-ready dict: target_clean_in_acc, per arm its matched epoch, fit,
    memorization and metrics at both points plus its per-epoch curve, and
    delta_<arm>_minus_none {matched, final} for every other arm.
    """
    curves = {arm: epoch_curve(a["epoch_phi"], a["epoch_correct"], a["keep"], kind, one_sided)
              for arm, a in epochs.items()}
    target, at = matched_epochs(curves)
    out: dict = {"target_clean_in_acc": target, "attack": "lira_online, identity query",
                 "arms": {}}
    metrics: dict = {"matched": {}, "final": {}}
    resamples: dict = {"matched": {}, "final": {}}
    for arm, a in epochs.items():
        final = a["epoch_phi"].shape[1]
        for point, e in (("matched", at[arm]), ("final", final)):
            phi = a["epoch_phi"][:, e - 1, :, None].astype(np.float64)
            scores = loo_lira(phi, a["keep"], one_sided, ("lira_online",))["lira_online"]
            # bootstrap CIs on all samples; point estimates per kind (CIs cost 4x)
            met, res, _ = evaluate(scores, a["keep"], kind, boot, subsets=("all",))
            met.update(evaluate(scores, a["keep"], kind, subsets=("clean", "flipped", "ood"))[0])
            metrics[point][arm], resamples[point][arm] = {"lira": met}, {"lira": res}
        row = curves[arm][at[arm] - 1]
        out["arms"][arm] = {"epoch": at[arm], "final_epoch": final,
                            "clean_in_acc": row["clean_in_acc"],
                            "flipped_in_mem_acc": row["flipped_in_mem_acc"],
                            "ood_in_mem_acc": row["ood_in_mem_acc"],
                            "matched": metrics["matched"][arm]["lira"],
                            "final": metrics["final"][arm]["lira"],
                            "curve": curves[arm]}
    for point in ("matched", "final"):
        for arm, d in paired_deltas(metrics[point], resamples[point], base="none").items():
            for sub, row in d["lira"].items():  # per kind: point difference, no CI
                a, b = metrics[point][arm]["lira"][sub], metrics[point]["none"]["lira"][sub]
                for key in ("auc", "tpr_at_fpr_1e-3"):
                    if row[key] is None and None not in (a[key], b[key]):
                        row[key] = a[key] - b[key]
            out.setdefault(f"delta_{arm}_minus_none", {})[point] = d["lira"]
    return out


def load_epochs(paths: list, n_samples: int) -> dict[str, np.ndarray] | None:
    """epoch_phi / epoch_correct / keep of an arm's shards, models in id order; None when a
    shard was trained without shadow.track_epochs. Bad shapes are a one-line InputError."""
    from bnmem.io import InputError, load_npz

    parts = [load_npz(p, ("keep", "model_ids")) for p in paths]
    if not all("epoch_phi" in z and "epoch_correct" in z for z in parts):
        return None
    for path, z in zip(paths, parts):
        m = len(z["model_ids"])
        ph, co = z["epoch_phi"], z["epoch_correct"]
        if ph.ndim != 3 or ph.shape[0] != m or ph.shape[2] != n_samples or co.shape != ph.shape:
            raise InputError(f"{path}: epoch_phi {ph.shape} / epoch_correct {co.shape} do not "
                             f"fit [m={m}, epochs, N={n_samples}]; re-run the shadow stage")
        if not np.isfinite(ph).all():
            raise InputError(f"{path}: non-finite epoch_phi; re-run the shadow stage")
    if len({z["epoch_phi"].shape[1] for z in parts}) > 1:
        raise InputError(f"{paths[0]}: shards disagree on the number of epochs")
    order = np.argsort(np.concatenate([z["model_ids"] for z in parts]))
    return {k: np.concatenate([z[k] for z in parts])[order]
            for k in ("epoch_phi", "epoch_correct", "keep")}
