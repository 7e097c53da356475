"""train@<arm>: train one arm on the whole pool, evaluating memorization every epoch.

The per-epoch records go to --curves (CSV, what the report reads) and, with --live, to a
dvclive folder as the epochs finish (`dvc plots show`, the VS Code extension and Studio
draw them as step plots; dvcyaml=None: dvclive never edits dvc.yaml)."""
import argparse
from pathlib import Path

import pandas as pd

from bnmem.core import cli
from bnmem.core.config import load_config
from bnmem.core.io import atomic_path, load_npz, save_npz, save_state
from bnmem.data.pool import load_pool
from bnmem.train.target import final_evals, train_arm


LIVE_KEYS = ("loss", "clean_train_acc", "flipped_mem_acc", "ood_mem_acc", "test_acc", "lr")


def live_logger(directory: str):
    """A dvclive Live writing to `directory` (no dvc.yaml, no experiment, no timestamps:
    the folder is bit-identical across runs) and the per-epoch callback feeding it."""
    from dvclive import Live

    class Records(Live):
        """dvclive's writer without its DVC / git hooks: this stage's folder is declared in
        bnmem's dvc.yaml and there is no experiment to save. dvclive 3.x's hooks read git
        HEAD (an error in a repository without commits: a user's fresh `git init`) and
        may `dvc init` a folder that is not a DVC repository."""

        def _init_dvc(self) -> None:
            self._dvc_file, self._save_dvc_exp = None, False

    live = Records(directory, dvcyaml=None, save_dvc_exp=False, report=None)

    def on_record(epoch: int, rec: dict) -> None:
        live.step = epoch
        for key in LIVE_KEYS:
            if rec.get(key) is not None:
                live.log_metric(key, float(rec[key]))
        live.make_summary()
    return live, on_record


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--recipe", required=True, help="data/recipes/<arm>.yaml from configure")
    p.add_argument("--pool", required=True)
    p.add_argument("--test", required=True)
    p.add_argument("--model", required=True, help="output state_dict (.pt); beside it .json (spec, "
                   "final metrics, gamma/sigma, gamma push) and _eval.npz (per-sample correctness)")
    p.add_argument("--checkpoints", required=True, help="output folder of epoch_<k>.pt")
    p.add_argument("--curves", required=True, help="output per-epoch CSV")
    p.add_argument("--live", help="output dvclive folder (per-epoch metrics as step plots)")
    args = p.parse_args()
    cfg = load_config(args.recipe)
    kernels = cli.setup(cfg.train.threads)
    live, on_record = live_logger(args.live) if args.live else (None, None)
    pool, test = load_pool(args.pool), load_npz(args.test, ("x", "y"))
    model, history, record = train_arm(cfg, pool, test, Path(args.checkpoints), on_record=on_record)
    if live is not None:
        live.end()
    evals, record.gamma_push = final_evals(cfg, model, record, pool, test)
    record.cpu_kernels = kernels
    out = Path(args.model)
    save_state(out, model.state_dict())
    save_npz(out.with_name(f"{out.stem}_eval.npz"), **evals)
    record.save(out.with_suffix(".json"))
    with atomic_path(args.curves) as tmp:
        pd.DataFrame(history).drop(columns=["seconds"]).to_csv(tmp, index=False, float_format="%.6g")


if __name__ == "__main__":
    cli.run(main, "train")
