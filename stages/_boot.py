"""Imported first by every stage script, before numpy or torch.

The stage runs the code of the checkout it belongs to: this checkout's `src/` goes first on
`sys.path`, so `dvc exp run --queue` / `--temp` (which run in a copy of the commit under
.dvc/tmp/exps) and a second clone both run their own commit's code, never that of the
checkout the virtual environment's editable install points at (the code DVC hashed as the
stage's deps is the code that ran). Then `import bnmem` pins the CPU kernel level
(bnmem.core.cpu) before numpy or torch load. When the Python running the stage cannot import
bnmem (dvc from outside the virtual environment runs the system `python`), the stage stops
with one line saying how to fix it.
"""
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
if (SRC / "bnmem" / "__init__.py").is_file() and str(SRC) not in sys.path[:1]:
    sys.path.insert(0, str(SRC))

import importlib.util  # noqa: E402

try:
    import bnmem  # noqa: F401  (its __init__ pins the CPU kernels)
    missing = [m for m in ("numpy", "yaml") if importlib.util.find_spec(m) is None]
except ModuleNotFoundError as exc:
    if exc.name != "bnmem":
        raise
    missing = ["bnmem"]
if missing:  # src/ alone gives bnmem, not the packages it needs: the venv does
    print(f"bnmem: error: {sys.executable} cannot import bnmem (missing: {', '.join(missing)}); "
          "run `make repro` once, then `source .venv/bin/activate` before dvc commands (or use "
          "the make targets)", file=sys.stderr)
    sys.exit(2)
