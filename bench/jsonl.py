"""A results store's lines (JSON lines), parsed once per process.

The analyses re-read the same stores many times (one table reads a pool's main, halves,
anova and per-candidate stores through several loaders, and the tests regenerate every
table): decoding was about a third of their time. `lines` keys its cache on a digest of the
file's bytes (reading and hashing a store costs a few milliseconds, decoding it hundreds), so
a store that grows or is rewritten, however fast, is parsed again. The parsed objects are
shared between callers: read them, never change them.
"""
from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from pathlib import Path

_CACHE: OrderedDict[bytes, tuple] = OrderedDict()
_KEEP = 48  # stores kept parsed (the largest analysis reads about 40)


def lines(path: Path | str) -> tuple:
    """Every line of `path` parsed, in order; None for a line that is no JSON (a line a
    kill cut short)."""
    data = Path(path).read_bytes()
    key = hashlib.blake2b(data, digest_size=16).digest()
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    out = []
    for line in data.decode().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            out.append(None)
    _CACHE[key] = tuple(out)
    if len(_CACHE) > _KEEP:
        _CACHE.popitem(last=False)
    return _CACHE[key]
