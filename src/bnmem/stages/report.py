"""report: target-model and gradient comparisons, the claims table with its verdicts,
headline metrics, figures and report.md (bnmem.report.build.build_report)."""
import argparse
from pathlib import Path

from bnmem.core import cli
from bnmem.core.config import load_config
from bnmem.report.build import build_report

INPUTS = ("params", "pool", "test", "models", "curves", "grads", "grad-hists", "attack",
          "membership", "scores", "roc", "theory", "replicates", "exposure")
OUTPUTS = ("out-train", "out-deltas", "out-results", "plots", "report")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    for name in INPUTS + OUTPUTS:
        p.add_argument(f"--{name}", required=True)
    args = vars(p.parse_args())
    cfg = load_config(args["params"])
    kernels = cli.setup(torch=False)  # numpy and matplotlib only
    key = lambda name: name.replace("-", "_")  # noqa: E731
    build_report(cfg, kernels, {key(n): Path(args[key(n)]) for n in INPUTS},
                 {key(n): Path(args[key(n)]) for n in OUTPUTS})


if __name__ == "__main__":
    cli.run(main, "report")
