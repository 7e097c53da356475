"""Compile and load a C source with ctypes, cached by content and flags: the machinery the
native LeNet kernels (bnmem.native) and the ROC bootstrap kernel (bnmem.attack.roc) share, without
importing torch.

Libraries go to ~/.cache/bnmem (XDG_CACHE_HOME), one per sources hash, flags and (with
-march=native) CPU; a build is written to a temporary name and renamed, so processes that
build at once never load half a file. Kernels are accelerators: callers fall back to their
reference path when `compile_library` raises (no compiler, a noexec cache) or
BNMEM_NATIVE=0.
"""
from __future__ import annotations

import hashlib
import os
import platform
import shlex
import subprocess
import sysconfig
import tempfile
from pathlib import Path

from bnmem.core import cpu

FLAGS = ["-O3", "-fPIC", "-shared", "-fno-math-errno", "-fno-trapping-math",
         "-fassociative-math", "-fno-signed-zeros"]  # the last three let gcc vectorize sums


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bnmem"


def enabled() -> bool:
    """False when the user turned the C kernels off (BNMEM_NATIVE=0)."""
    return os.environ.get("BNMEM_NATIVE", "1") != "0"


LOADED: set[str] = set()  # names of the libraries this process compiled or found (cli logs them)


def compile_library(name: str, main: Path, hashed: list[Path], directory: Path | None = None,
                    extra: list[str] | None = None) -> Path:
    """Path of the shared library `name`_<hash>.so built from `main` (which may include
    other files; all of `hashed` go into the hash), compiled unless the cache holds it.
    Raises RuntimeError when the compiler fails."""
    flags = FLAGS + cpu.c_flags() + list(extra or ())  # x86-64-v3 when pinned
    # -march=native code is only valid on this CPU: key the cache on its flags too, for
    # home directories shared between machines
    native = _cpu_id() if "-march=native" in flags else ""
    text = b"".join(p.read_bytes() for p in hashed)
    digest = hashlib.sha256(text + " ".join(flags).encode() + native.encode()).hexdigest()[:16]
    lib = Path(directory or cache_dir()) / f"{name}_{digest}.so"
    if not lib.exists():
        cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
        lib.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=lib.parent) as tmp:  # atomic: build, then rename
            part = Path(tmp) / lib.name
            try:
                subprocess.run([*cc, *flags, str(main), "-o", str(part), "-lm"], check=True,
                               capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.SubprocessError) as exc:
                raise RuntimeError(str(getattr(exc, "stderr", "") or exc).strip()) from exc
            os.replace(part, lib)
    LOADED.add(name)
    return lib


def _cpu_id() -> str:
    """The CPU model and instruction-set flags (Linux), else the platform's description."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
        return "".join(sorted({l for l in lines if l.startswith(("model name", "flags"))}))
    except OSError:
        return platform.platform() + platform.processor()
