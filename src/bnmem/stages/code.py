"""code: the stamp of the bnmem that runs an audit project's stages (`bnmem audit init`).

An audit project made from an installed bnmem (a wheel) has no source files to list as
dependencies, so this stage (always run, in a fraction of a second: no torch import) writes
the sha256 of every file of the installed package and the versions of the libraries that
compute the bits; every other stage depends on the file. It changes only when bnmem, torch or
numpy does, so an upgrade reruns the project and nothing else does.
"""
import argparse
import hashlib
import json
from importlib import metadata
from pathlib import Path

import bnmem
from bnmem import cli
from bnmem.io import atomic_path

SUFFIXES = (".py", ".c", ".h", ".yaml")
LIBRARIES = ("torch", "numpy", "torchvision")


def stamp() -> dict:
    """{"bnmem": version, "sha256": of the package's files, "files": count, <library>: version}"""
    root = Path(bnmem.__file__).parent
    h, n = hashlib.sha256(), 0
    for f in sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file()):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        n += 1
    out = {"bnmem": bnmem.__version__, "sha256": h.hexdigest(), "files": n}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            out[lib] = None
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", required=True, help="output JSON (e.g. data/code.json)")
    args = p.parse_args()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out) as tmp:
        tmp.write_text(json.dumps(stamp(), indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    cli.run(main, "code")
