"""grads@<arm>: per-sample gradient norms of every pool sample at every saved checkpoint."""
import _boot  # noqa: F401, I001  (first: pins the CPU kernels; one-line error without bnmem)
import argparse
import logging
import time
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from bnmem import cli
from bnmem.config import load_config
from bnmem.grads import checkpoint_norms, has_batchnorm, histogram, summarize
from bnmem.io import InputError, atomic_path, load_json, load_state, save_json, save_npz
from bnmem.pipeline import build, load_pool, tensors
from bnmem.train import batch_order, resolve_device

log = logging.getLogger("bnmem.grads")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--recipe", required=True, help="data/recipes/<arm>.yaml from configure")
    p.add_argument("--pool", required=True)
    p.add_argument("--model", required=True, help="final state_dict (.pt); .json beside it")
    p.add_argument("--checkpoints", required=True, help="folder of epoch_<k>.pt")
    p.add_argument("--out", required=True, help="output .npz")
    p.add_argument("--metrics", required=True, help="output per-arm metrics .json")
    p.add_argument("--hist", required=True, help="output histogram .csv")
    args = p.parse_args()
    cfg = load_config(args.recipe)
    cli.setup(cfg.train.threads)
    pool = load_pool(args.pool)
    x, y = tensors(pool, cfg.dataset)
    meta = load_json(Path(args.model).with_suffix(".json"))
    epochs = sorted(meta.get("checkpoints") or [cfg.train.epochs])
    model = build(meta).to(resolve_device(cfg.train.device))

    def states() -> Iterator[dict]:  # the final epoch is read from --model (the same weights)
        for k in epochs:
            path = args.model if k == epochs[-1] else Path(args.checkpoints) / f"epoch_{k}.pt"
            state = load_state(path)
            if state.keys() != model.state_dict().keys():
                raise InputError(f"{path}: keys do not match a {meta['arch']}/{meta['norm']} model")
            log.info("checkpoint epoch %d", k)
            yield state

    # The first epoch's training batches: the batches the batch-coupled definition couples.
    batches = batch_order(len(y), cfg.train.batch_size, 1, cfg.seed)[0]
    definition = cfg.grads.definition
    other = "batch" if definition == "eval" else "eval"
    t0 = time.perf_counter()
    rows, final = checkpoint_norms(model, states(), x, y, definition, cfg.grads.chunk_size,
                                   batches, progress=True,
                                   other_every=cfg.grads.both_at_every_checkpoint,
                                   workers=cfg.grads.workers)
    main_rows, other_rows = rows[definition], rows[other]
    save_npz(args.out, norms=main_rows[-1], norms_epoch=main_rows,
             epochs=np.asarray(epochs, dtype=np.int64), layer_norms=final.layer_norms,
             layers=np.asarray(final.layers, dtype=str), definition=np.asarray(definition),
             batch_coupled=np.asarray(has_batchnorm(model)),
             **{f"norms_{other}": other_rows[-1], f"norms_{other}_epoch": other_rows})
    log.info("norms: %.1f s", time.perf_counter() - t0)  # logged only: outputs stay bit-identical
    kind = pool["kind"]
    save_json(args.metrics, {"epoch_final": epochs[-1], "epoch_early": epochs[0],
                             **summarize(main_rows[-1], kind),
                             **summarize(main_rows[0], kind, "_early"),
                             **summarize(other_rows[-1], kind, f"_{other}"),
                             **(summarize(other_rows[0], kind, f"_{other}_early")
                                if np.isfinite(other_rows[0]).all() else {})})
    with atomic_path(args.hist) as tmp:
        pd.DataFrame(histogram(main_rows[-1], kind)).to_csv(tmp, index=False, float_format="%.6g")
    log.info("median norm clean %.4g flipped %s (%s)", np.median(main_rows[-1][kind == 0]),
             np.median(main_rows[-1][kind == 1]) if (kind == 1).any() else None, definition)


if __name__ == "__main__":
    cli.run(main, "grads")
