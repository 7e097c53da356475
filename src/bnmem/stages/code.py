"""code: the stamp of the bnmem that runs an audit project's stages (`bnmem audit init`).

An audit project made from an installed bnmem (a wheel) has no source files to list as
dependencies, so this stage (always run, in a fraction of a second: no torch import) writes
the sha256 of every file of the installed package, the versions of its runtime dependencies,
the CPU kernel level and the C compiler; every other stage depends on the file. It changes
only when one of those does, so an upgrade reruns the project and nothing else does.
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
from importlib import metadata
from pathlib import Path

import bnmem
from bnmem.core import cli
from bnmem.core import cpu
from bnmem.core.io import atomic_path

SUFFIXES = (".py", ".c", ".h", ".yaml")
LIBRARIES = ("torch", "numpy", "torchvision")


def stamp() -> dict:
    """{"bnmem": version, "sha256": of the package's files, "files": count, <library>: version}"""
    root = Path(bnmem.__file__).parent
    h, n = hashlib.sha256(), 0
    for f in sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        n += 1
    out = {"bnmem": bnmem.__version__, "sha256": h.hexdigest(), "files": n,
           "cpu level": cpu.level(), "C compiler": compiler()}
    for lib in libraries():
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = None
    return out


def libraries() -> list[str]:
    """bnmem's runtime dependencies (its package metadata), or the main ones without it."""
    try:
        reqs = metadata.requires("bnmem") or []
    except metadata.PackageNotFoundError:
        return list(LIBRARIES)
    names = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in reqs if "extra ==" not in r}
    return sorted(names | set(LIBRARIES))


def compiler() -> str | None:
    """The first line of the C compiler's --version (the kernels build with it)."""
    cc = os.environ.get("CC", "cc")
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.splitlines()[0] if out.returncode == 0 and out.stdout else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True, help="output JSON (e.g. data/code.json)")
    args = p.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out) as tmp:
        tmp.write_text(json.dumps(stamp(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    cli.run(main, "code")
