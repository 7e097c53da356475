"""Target models: an arm's model trained on the whole pool with per-epoch measurements
(memorization, test accuracy, gamma/sigma), checkpoints and the train stage's entry point
`train_arm`. LeNet trains and is measured as the shadow models are (bnmem.train.stacked: the C
kernels where they apply, whose results do not depend on the CPU vendor); other archs in
the plain loop (bnmem.train.recipe.fit)."""
from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from bnmem.core.config import Config, dp_arm
from bnmem.data.images import preprocess
from bnmem.core.io import save_state
from bnmem.core.records import TargetRecord
from bnmem.models.spec import build, model_spec
from bnmem.train.recipe import fit
from bnmem.data.pool import tensors
from bnmem.train.stacked import eval_logits, query_logits, train_stack
from bnmem.train.target_metrics import (
    accuracy_by_kind, epochs_to, gamma_push, gamma_sigma, lower_median,
)
from bnmem.core.kinds import CLEAN, FLIPPED, OOD
from bnmem.models.runtime import resolve_device

log = logging.getLogger("bnmem.train")


def train_target(cfg: Config, arm: str, pool: dict[str, np.ndarray], test: dict[str, np.ndarray],
                 on_epoch=None, progress: bool = False) -> tuple[nn.Module, list[dict], TargetRecord]:
    """Train an arm's target model on the whole pool (init and batch order from cfg.seed),
    measuring memorization and gamma/sigma after every epoch (eval mode). LeNet trains
    and is measured as the shadow models are (bnmem.train.stacked: the C kernels where they
    apply, whose results do not depend on the CPU vendor); other archs in the plain loop.

    `on_epoch(epoch, model, record)` runs after the measurements (e.g. to save a
    checkpoint). Returns (model, history, record): the record is `<arm>.json`'s content
    (the model spec, the final metrics and the per-channel gamma/sigma).
    """
    x, y = tensors(pool, cfg.dataset)
    x_test = preprocess(test["x"], cfg.dataset, pool["x"])
    spec = model_spec(cfg, arm, x.shape[1], x.shape[2])
    stacked = spec.arch == "lenet" and not dp_arm(arm)  # the shadows' trainer: C kernels

    def logits(model: nn.Module, data: torch.Tensor) -> torch.Tensor:
        return eval_logits(model, spec, data, resolve_device(cfg.train.device))

    def measure(epoch: int, model: nn.Module, rec: dict) -> None:
        rec.update(accuracy_by_kind(logits(model, x), pool["y_train"], pool["kind"],
                                logits(model, x_test), test["y"]))
        bn = gamma_sigma(model)
        if bn:
            # the lower middle value for an even number of layers (torch.median's)
            rec["median_gamma_sigma"] = lower_median([v["median_ratio"] for v in bn.values()])
            # layers whose channels are mostly above 1 (bnmem.report.summary.gamma_sigma_summary)
            rec["gamma_sigma_layers_mostly_above_1"] = sum(v["share_above_1"] > 0.5 for v in bn.values())
        if on_epoch is not None:
            on_epoch(epoch, model, rec)

    if stacked:
        model, history, pending = build(spec), [], []

        def measured(epoch: int, state: dict, rec: dict) -> None:
            torch.set_num_threads(1)  # OpenMP keeps the count per thread
            model.load_state_dict(state)
            measure(epoch, model, rec)
            history.append(rec)

        # each epoch is measured on a second thread while the next one trains (the state is
        # train_stack's copy; one worker keeps the epochs, checkpoints and logs in order)
        with ThreadPoolExecutor(1) as worker:
            train_stack(cfg, arm, x, y, np.ones((1, len(y)), bool), spec, [cfg.seed],
                        [cfg.seed], on_epoch=lambda epoch, states, recs: pending.append(
                            worker.submit(measured, epoch, states[0], dict(recs[0]))))
        for done in pending:
            done.result()  # a measurement's error, raised here
    else:
        model, history = fit(cfg, arm, x, y, spec, init_seed=cfg.seed, order_seed=cfg.seed,
                             on_epoch=measure, progress=progress)
    final = {k: v for k, v in history[-1].items() if k not in ("epoch", "lr", "seconds")}
    final["epochs_to_mem_50"] = epochs_to(history, "flipped_mem_acc", 0.5)
    # no wall time in any output: outputs are bit-identical across runs and machines
    record = TargetRecord(spec, final, sorted(set(cfg.train.checkpoints) | {cfg.train.epochs}),
                          gamma_sigma(model))
    return model, history, record


def train_arm(cfg: Config, pool: dict, test: dict, checkpoint_dir: Path | None = None,
              progress: bool = True,
              on_record: Callable[[int, dict], None] | None = None
              ) -> tuple[torch.nn.Module, list[dict], TargetRecord]:
    """Train the recipe's arm on the whole pool; the epochs in train.checkpoints and the
    final one are saved to `checkpoint_dir` as epoch_<k>.pt; `on_record(epoch, record)`
    sees each epoch's record as it is made (dvclive). Returns (model, per-epoch records,
    the `<arm>.json` record)."""
    arm = cfg.arms[0]
    if checkpoint_dir is not None:
        checkpoint_dir.mkdir(parents=True, exist_ok=True)

    def on_epoch(epoch: int, model: torch.nn.Module, rec: dict) -> None:
        if checkpoint_dir is not None and epoch in cfg.train.checkpoints:
            save_state(checkpoint_dir / f"epoch_{epoch}.pt", model.state_dict())
        log.info("%s epoch %d loss %.4f clean %.3f flipped %.3f ood %.3f test %.3f (%.1f s)",
                 arm, epoch, rec["loss"], rec["clean_train_acc"] or 0,
                 rec["flipped_mem_acc"] or 0, rec["ood_mem_acc"] or 0, rec["test_acc"],
                 rec["seconds"])
        if on_record is not None:
            on_record(epoch, rec)

    model, history, record = train_target(cfg, arm, pool, test, on_epoch, progress=progress)
    if checkpoint_dir is not None:
        save_state(checkpoint_dir / f"epoch_{cfg.train.epochs}.pt", model.state_dict())
    return model, history, record


def final_evals(cfg: Config, model: nn.Module, record: TargetRecord, pool: dict[str, np.ndarray],
                test: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict | None]:
    """What the report and the exposure stage read of the final target, so that neither
    runs a model: per-sample correctness (eval mode, bool) on the pool (`correct` [N]) and
    the test set (`test_correct` [T]), the pool's eval logits under each shadow query
    (`pool_logits` float32 [N, Q, C], `queries` [Q]: bnmem.exposure.scores.query_logits),
    and for a model with BN layers the gamma push per layer and sample kind
    (bnmem.train.target_metrics.gamma_push; None without BN layers)."""
    model, spec = model.cpu(), record.spec
    x, _ = tensors(pool, cfg.dataset)
    x_test = preprocess(test["x"], cfg.dataset, pool["x"])
    queries = cfg.shadow.queries
    # the exposure stage's input, so that it runs no model for the targets
    pool_logits = query_logits(model, x, queries, spec)
    # the identity view is the plain eval forward (augment returns x): not run twice
    pool_pred = (pool_logits[:, queries.index("identity")].argmax(1) if "identity" in queries
                 else eval_logits(model, spec, x).argmax(1).numpy())
    evals = {"correct": pool_pred == pool["y_train"],
             "test_correct": eval_logits(model, spec, x_test).argmax(1).numpy() == test["y"],
             "pool_logits": pool_logits, "queries": np.asarray(queries, dtype=str)}
    kind = pool["kind"]
    push = gamma_push(model, x, pool["y_train"], {
        "clean": kind == CLEAN, "flipped": kind == FLIPPED, "ood": kind == OOD}) if record.gamma_sigma else None
    return evals, push
