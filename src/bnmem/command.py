"""The `bnmem` command ([project.scripts]): audits, the pipeline's stages and the drivers.

    bnmem audit init DIR [--check]   write DIR/params.yaml (when absent) and DIR/dvc.yaml
    bnmem stage NAME [ARGS...]       run one stage (= python -m bnmem.stages.NAME ARGS)
    bnmem grid | fullscale | sweep | check-repro [ARGS...]
                                     the experiment drivers of a bnmem checkout (they run
                                     the checkout's own pipeline as DVC experiments)
    bnmem --version

Bad input is one line on stderr naming what is wrong and exit status 2.
"""
from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import bnmem

STAGES = ("configure", "prepare", "train", "shadow", "grads", "replicate", "attack",
          "exposure", "theory", "report", "code")
DRIVERS = {"grid": "tools/grid.py", "fullscale": "tools/fullscale.py",
           "sweep": "tools/sweep.py", "check-repro": "tools/check_repro.py"}


def _fail(message: str) -> None:
    print(f"bnmem: error: {message}", file=sys.stderr)
    sys.exit(2)


def checkout(start: Path) -> Path | None:
    """The bnmem checkout holding `start` (a folder with dvc.yaml and tools/grid.py)."""
    for d in (start, *start.parents):
        if (d / "dvc.yaml").is_file() and (d / "tools" / "grid.py").is_file():
            return d
    return None


def audit(args: argparse.Namespace) -> None:
    from bnmem.audit_project import init
    from bnmem.core.config import ConfigError
    from bnmem.core.io import InputError

    try:
        ok, said = init(Path(args.dir), check=args.check, force=args.force)
    except (InputError, ConfigError) as exc:
        _fail(str(exc))
    print("\n".join(said))
    sys.exit(0 if ok else 1)


def stage(args: argparse.Namespace) -> None:
    from bnmem.core import cli

    module = importlib.import_module(f"bnmem.stages.{args.name}")
    sys.argv = [f"bnmem stage {args.name}", *args.args]
    cli.run(module.main, args.name)


def driver(name: str, argv: list[str]) -> None:
    root = checkout(Path.cwd().resolve())
    if root is None:
        _fail(f"{name} runs a bnmem checkout's own pipeline (its dvc.yaml, params and "
              f"{DRIVERS[name]}); run it inside one (none above {Path.cwd()}), e.g. a "
              "`git clone` of bnmem")
    sys.exit(subprocess.run([sys.executable, str(root / DRIVERS[name]), *argv],
                            cwd=root).returncode)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in DRIVERS:
        driver(argv[0], argv[1:])  # their own options (and --help): passed through
    p = argparse.ArgumentParser(prog="bnmem", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"bnmem {bnmem.__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    a = sub.add_parser("audit", help="audit your own model and data (a DVC project)")
    asub = a.add_subparsers(dest="action", required=True, metavar="ACTION")
    i = asub.add_parser("init", help="write DIR/params.yaml (when absent) and DIR/dvc.yaml",
                        description="Write DIR/params.yaml from a commented template when it "
                        "is absent, and DIR/dvc.yaml from DIR/params.yaml; then `cd DIR && dvc "
                        "repro`. DIR must be inside a git + DVC repository.")
    i.add_argument("dir", metavar="DIR")
    i.add_argument("--check", action="store_true",
                   help="exit 1 if DIR/dvc.yaml differs from what would be written")
    i.add_argument("--force", action="store_true",
                   help="replace a DIR/dvc.yaml that `bnmem audit init` did not write")
    i.set_defaults(run=audit)
    s = sub.add_parser("stage", help="run one pipeline stage, as dvc.yaml does",
                       description="Run one stage: bnmem stage NAME --help lists its options.")
    s.add_argument("name", choices=STAGES, metavar="NAME", help=" | ".join(STAGES))
    s.add_argument("args", nargs=argparse.REMAINDER, help="the stage's own options")
    s.set_defaults(run=stage)
    for name, script in DRIVERS.items():
        sub.add_parser(name, add_help=False, help=f"{script} of the enclosing bnmem checkout "
                       f"(its options: bnmem {name} --help)")
    args = p.parse_args(argv)
    args.run(args)


if __name__ == "__main__":
    main()
