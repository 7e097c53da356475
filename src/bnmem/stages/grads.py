"""grads@<arm>: per-sample gradient norms of every pool sample at every saved checkpoint."""
import argparse
import logging
import time
from pathlib import Path
from typing import Iterator

import numpy as np

from bnmem.core import cli
from bnmem.core.config import load_config
from bnmem.grads.checkpoints import grads_for_arm, native_norm
from bnmem.core.io import InputError, load_state, read_state_arrays, save_csv, save_json, save_npz
from bnmem.core.records import TargetRecord
from bnmem.data.pool import load_pool
from bnmem.native.arrays import check_state

log = logging.getLogger("bnmem.grads.per_sample")


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
    target = TargetRecord.load(Path(args.model).with_suffix(".json"))
    spec, epochs = target.spec, sorted(target.checkpoints or [cfg.train.epochs])
    norm = native_norm(cfg, spec)  # a LeNet on the CPU: arrays and C kernels, no torch
    cli.setup(cfg.train.threads, torch=norm is None)
    pool = load_pool(args.pool)
    if norm is None:  # the torch path: the module's keys (load_state_dict checks shapes)
        from bnmem.models.spec import build
        keys = set(build(spec).state_dict())

    def read(path) -> dict:
        if norm is not None and (state := read_state_arrays(path)) is not None:
            return state
        return load_state(path)  # torch.load: any other file, or the one-line error

    def states() -> Iterator[dict]:  # the final epoch is read from --model (the same weights)
        for k in epochs:
            path = args.model if k == epochs[-1] else Path(args.checkpoints) / f"epoch_{k}.pt"
            state = read(path)
            # the array path's C kernels index by LeNet's shapes: every key and shape checked
            wrong = (check_state(state, norm, spec.in_channels, spec.num_classes) if norm
                     else None if set(state) == keys
                     else f"keys do not match a {spec.arch}/{spec.norm} model")
            if wrong:
                raise InputError(f"{path}: {wrong}; re-run train@{spec.arm}")
            log.info("checkpoint epoch %d", k)
            yield state

    t0 = time.perf_counter()
    arrays, summary, hist = grads_for_arm(cfg, pool, spec, epochs, states())
    log.info("norms: %.1f s", time.perf_counter() - t0)  # logged only: outputs stay bit-identical
    save_npz(args.out, **arrays)
    save_json(args.metrics, summary)
    save_csv(args.hist, hist)
    kind, norms = pool["kind"], arrays["norms"]
    log.info("median norm clean %.4g flipped %s (%s)", np.median(norms[kind == 0]),
             np.median(norms[kind == 1]) if (kind == 1).any() else None, cfg.grads.definition)


if __name__ == "__main__":
    cli.run(main, "grads")
