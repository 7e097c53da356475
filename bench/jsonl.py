"""A results store's lines (JSON lines), parsed once per process.

The analyses re-read the same stores many times (one table reads a pool's main, halves,
anova and per-candidate stores through several loaders, and the tests regenerate every
table): decoding was about a third of their time. `lines` keys its cache on the file's
path, size and modification time, so a store that grows (a resumed study appends units) is
read again. The parsed objects are shared between callers: read them, never change them.
"""
from __future__ import annotations

import functools
import json
import os
from pathlib import Path


def lines(path: Path | str) -> tuple:
    """Every line of `path` parsed, in order; None for a line that is no JSON (a line a
    kill cut short)."""
    p = Path(path).resolve()
    st = os.stat(p)
    return _read(str(p), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=48)
def _read(path: str, size: int, mtime_ns: int) -> tuple:
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(None)
    return tuple(out)
