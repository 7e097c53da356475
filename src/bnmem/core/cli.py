"""Shared plumbing for the thin stage scripts: logging, threads, one-line errors."""
from __future__ import annotations

import logging
import sys
import time
from typing import Callable

from bnmem.core import cpu
from bnmem.core.config import ConfigError
from bnmem.core.io import ClusterError, DataError, InputError

log = logging.getLogger("bnmem")


def setup(threads: int = 0, torch: bool = True) -> dict[str, str]:
    """Logging to stderr, an optional intra-op thread count, and a check that the CPU
    kernels are pinned (bnmem.core.cpu); returns what runs, e.g. {"level": "avx2", "torch": "AVX2"}.

    `torch=False` (prepare, attack, report: stages that compute nothing with torch) neither
    imports torch nor sets its threads: `import torch` alone is 1.4-2.1 s of a stage's start
    on Zen 5 (BENCHMARKS.md, "Stage start-up"); "torch" is then "not imported".

    Determinism: every random draw comes from an explicit seeded generator, and the CPU
    kernels used here (conv, matmul, reductions) are deterministic for a fixed thread
    count. On CUDA we also ask torch for deterministic algorithms; on the CPU that call
    only costs seconds of start-up (it imports the compiler stack) and changes nothing.
    """
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s",
                        datefmt="%H:%M:%S", stream=sys.stderr)
    if not torch:
        return {"level": cpu.level(), "torch": "not imported"}
    import torch as _torch  # here, so torch-free stages start in a fraction of a second

    if _torch.cuda.is_available():
        _torch.use_deterministic_algorithms(True, warn_only=True)
    if threads:
        _torch.set_num_threads(threads)
    kernels = cpu.check(strict=True)
    log.debug("CPU kernels: %s", kernels)
    return kernels


def run(main: Callable[[], None], name: str) -> None:
    """Run a stage's main; bad input becomes one line on stderr and exit status 2."""
    t0 = time.perf_counter()
    try:
        main()
    except (ConfigError, DataError, InputError) as exc:
        print(f"bnmem {name}: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except ClusterError as exc:  # the Dask cluster: finished chunks are saved, rerun resumes
        print(f"bnmem {name}: error: {exc}", file=sys.stderr)
        sys.exit(3)
    log.info("%s done in %.1f s", name, time.perf_counter() - t0)
    log.info("%s kernels: %s", name, kernels_used())


def kernels_used() -> str:
    """What computed this process's numbers: the C kernels it loaded (bnmem.core.ckernel, the
    same bits on every x86-64-v3 CPU) and, where torch was imported, its dispatch level
    (`make check-repro` adds the oneDNN primitives each stage executed)."""
    from bnmem.core import ckernel
    c = ", ".join(sorted(ckernel.LOADED)) or "none"
    torch = sys.modules.get("torch")
    level = torch.backends.cpu.get_cpu_capability() if torch is not None else "not imported"
    return f"C [{c}] ({' '.join(cpu.c_flags())}); torch {level}"
