"""The pipeline's stages as modules: `python -m bnmem.stages.<stage>` runs one as DVC does.

Each module's `main()` parses the stage's arguments and runs it; a bad input ends it with
one line and exit 2 (bnmem.core.cli.run). The checkout's thin `stages/<stage>.py` scripts call the
same `main()`; an audit project made by `bnmem audit init` calls the modules, so it needs no
path into a checkout (bnmem installed from a wheel is enough).
"""
