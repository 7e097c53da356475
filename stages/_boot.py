"""Imported first by every stage script, before numpy or torch.

`import bnmem` pins the CPU kernel level (bnmem.core.cpu) before those libraries load. When
the Python running the stage cannot import bnmem (dvc from outside the virtual
environment runs the system `python`), the stage stops with one line saying how to fix it.
"""
import sys

try:
    import bnmem  # noqa: F401  (its __init__ pins the CPU kernels)
except ModuleNotFoundError as exc:
    if exc.name != "bnmem":
        raise
    print(f"bnmem: error: {sys.executable} cannot import bnmem; run `make repro` once, then "
          "`source .venv/bin/activate` before dvc commands (or use the make targets)",
          file=sys.stderr)
    sys.exit(2)
