"""The machine line every benchmark prints: lscpu's model name, CPU family and model (the
guide asks for it; machines differ between sessions)."""
from __future__ import annotations

import platform
import subprocess


def fields() -> dict[str, str]:
    """lscpu's "key: value" lines ({} where lscpu is missing)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    except OSError:
        return {}
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in out.splitlines()) if v}


def model_name() -> str:
    """lscpu's model name, e.g. "AMD EPYC" (the processor string where lscpu is missing)."""
    return fields().get("Model name") or platform.processor() or "unknown"


def describe() -> str:
    """The model name with its family and model, e.g. "AMD EPYC (family 26, model 2)"."""
    f = fields()
    return f"{model_name()} (family {f.get('CPU family', '?')}, model {f.get('Model', '?')})"
