"""Whole-pipeline cost: default `dvc repro` from an empty DVC cache (warm venv), wall time
and peak RSS, plus how the shadow stage grows with pool_size and n_models.

    python bench/bench_pipeline.py [--scaling]

Runs in a fresh `git clone` of this repository's HEAD in a temp dir, so the workspace and
its cache are untouched. Peak RSS is the largest resident set of any stage process
(getrusage RUSAGE_CHILDREN), which is what bounds memory since DVC runs stages one by one.
"""
import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}


def sh(cwd: Path, *cmd: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=ENV, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0



def shadow_time(work: Path, pool_size: int, n_models: int, track: bool = True) -> float:
    params = yaml.safe_load((work / "params.yaml").read_text())
    params.update(pool_size=pool_size, arms=["batchnorm"])
    params["shadow"]["n_models"] = n_models
    params["shadow"]["track_epochs"] = track
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    sh(work, "dvc", "repro", "-q", "prepare", "configure")
    return sh(work, "dvc", "repro", "-q", "--force", "--single-item", "shadow@batchnorm-0")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--scaling", action="store_true", help="also time the shadow stage at other sizes")
    p.add_argument("--scaling-only", action="store_true", help="skip the whole-pipeline timing")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bnmem-bench-"))
    work = tmp / "repo"
    sh(ROOT, "git", "clone", "-q", str(ROOT), str(work))
    os.symlink(ROOT / ".venv", work / ".venv")
    out = ROOT / "bench" / "results" / "pipeline.md"
    lines = []
    if not args.scaling_only:
        wall = sh(work, "dvc", "repro", "-q")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        noop = sh(work, "dvc", "repro", "-q")
        lines = ["## Whole pipeline (default params)", "",
                 "| measure | value | target |", "|---|---|---|",
                 f"| `dvc repro`, empty cache, warm venv | {wall:.0f} s | <= 180 s |",
                 f"| peak RSS of any stage | {peak:.0f} MiB | <= 4096 MiB |",
                 f"| no-op `dvc repro` afterwards (baseline: DVC overhead) | {noop:.1f} s | |", ""]
        on, off = shadow_time(work, 2000, 16, True), shadow_time(work, 2000, 16, False)
        lines += ["Per-epoch shadow queries (`shadow.track_epochs`, for LiRA at matched utility), "
                  "shadow@batchnorm-0 at defaults, same run:", "",
                  "| track_epochs | seconds |", "|---|---|",
                  f"| false (baseline) | {off:.1f} |", f"| true (default) | {on:.1f} "
                  f"(+{100 * (on / off - 1):.0f} %) |", ""]
        sh(work, "git", "checkout", "-q", "params.yaml")
    elif out.exists():
        lines = out.read_text().split("## Shadow stage cost")[0].rstrip().splitlines() + [""]
    if not (args.scaling or args.scaling_only) and out.exists() and "## Shadow stage cost" in out.read_text():
        lines += ["## Shadow stage cost" + out.read_text().split("## Shadow stage cost")[1]]
    if args.scaling or args.scaling_only:
        rows = []
        for pool, m in [(2000, 8), (2000, 16), (8000, 8)]:
            rows.append((pool, m, shadow_time(work, pool, m)))
        per = {(pool, m): t for pool, m, t in rows}
        # marginal cost per (sample x model) from the two pool sizes (removes start-up time)
        unit = (per[(8000, 8)] - per[(2000, 8)]) / ((8000 - 2000) * 8)
        fixed = per[(2000, 8)] - unit * 2000 * 8
        lines += ["## Shadow stage cost (one arm, batchnorm, default epochs)", "",
                  "| pool_size | n_models | seconds | note |", "|---|---|---|---|"]
        lines += [f"| {pool} | {m} | {t:.1f} | measured |" for pool, m, t in rows]
        for pool, m in [(8000, 16), (32000, 16), (32000, 64), (50000, 64)]:
            lines.append(f"| {pool} | {m} | {fixed + unit * pool * m:.0f} | extrapolated: "
                         f"{fixed:.1f} s fixed + {unit * 1e6:.1f} us per sample x model |")
        lines.append("")
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
