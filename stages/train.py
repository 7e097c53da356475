"""The train stage as the checkout's dvc.yaml runs it: bnmem.stages.train is the stage."""
import _boot  # noqa: F401, I001  (first: pins the CPU kernels; one-line error without bnmem)
from bnmem.core import cli
from bnmem.stages.train import main

if __name__ == "__main__":
    cli.run(main, "train")
