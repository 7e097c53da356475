"""Overhead of shadow.backend: dask against the local backend on the same shard, one run.

    python bench/bench_dask.py [--arm batchnorm] [--rounds 3] [--out bench/results/dask.md]

The default pool and recipe (prepared in a temp dir). Each round times the whole shadow
stage command for one shard (16 models), in alternation:
  local: the stage as `dvc repro` runs it (shadow.workers=2 threads, one process);
  dask cold: a fresh LoopbackCluster (scheduler + 2 one-thread workers on 127.0.0.1), so the
    workers import torch inside the run, as the first shard of a session would;
  dask warm: the same cluster again (workers already started), as every later shard.
Ratio: dask wall time / local wall time of the same round (median over rounds). Every
shard is checked bit-identical to the local one.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

import bnmem  # noqa: F401  (pins this process and the cluster it starts)
from bnmem.train.cluster import LoopbackCluster
from bnmem.train.signature import cpu_model

ROOT = Path(__file__).resolve().parents[1]


def cpu_kind() -> str:
    info = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if ":" in line:
            key, value = line.split(":", 1)
            info.setdefault(key.strip(), value.strip())
    return f"{cpu_model()}, family {info.get('cpu family', '?')} model {info.get('model', '?')}"


def stage(d: Path, recipe: Path, out: Path, params: Path, env: dict) -> float:
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, str(ROOT / "stages/shadow.py"), "--recipe", str(recipe),
                    "--pool", str(d / "pool.npz"), "--shard", "0", "--out", str(out),
                    "--params", str(params)], env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--arm", default="batchnorm")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=str(ROOT / "bench/results/dask.md"))
    args = p.parse_args()
    d = Path(tempfile.mkdtemp(prefix="bench-dask-"))
    for script, extra in (("prepare.py", ["--pool", str(d / "pool.npz"), "--test",
                                          str(d / "test.npz")]),
                          ("configure.py", ["--out", str(d / "recipes")])):
        subprocess.run([sys.executable, str(ROOT / "stages" / script), "--params",
                        str(ROOT / "params.yaml"), *extra], check=True, capture_output=True)
    recipe = d / "recipes" / f"{args.arm}.yaml"
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    local_p, dask_p = d / "local.yaml", d / "dask.yaml"
    local_p.write_text(yaml.safe_dump(params))
    params["shadow"]["backend"] = "dask"
    dask_p.write_text(yaml.safe_dump(params))
    rows = []
    for r in range(args.rounds):
        local = stage(d, recipe, d / "local.npz", local_p, dict(os.environ))
        ref = (d / "local.npz").read_bytes()
        with LoopbackCluster(d / f"logs{r}", workers=2) as cluster:
            env = {**os.environ, "DASK_SCHEDULER_ADDRESS": cluster.address}
            cold = stage(d, recipe, d / "dask.npz", dask_p, env)
            same = (d / "dask.npz").read_bytes() == ref
            warm = stage(d, recipe, d / "dask.npz", dask_p, env)
            same &= (d / "dask.npz").read_bytes() == ref
        rows.append((local, cold, warm, same))
        print(f"round {r}: local {local:.1f} s, dask cold {cold:.1f} s, warm {warm:.1f} s, "
              f"identical {same}", flush=True)
    med = [statistics.median(x[i] for x in rows) for i in range(3)]
    ratio_cold = statistics.median(x[1] / x[0] for x in rows)
    ratio_warm = statistics.median(x[2] / x[0] for x in rows)
    s = yaml.safe_load(recipe.read_text())["shadow"]
    lines = [
        "# Dask backend overhead (bench/bench_dask.py)", "",
        f"`python bench/bench_dask.py --arm {args.arm} --rounds {args.rounds}`. Machine: "
        f"{os.cpu_count()} cores ({cpu_kind()}), python {platform.python_version()}. One "
        f"shadow shard of the default recipe ({args.arm}, {s['n_models']} models, chunk "
        f"{s['chunk']}, {params['pool_size']} pool samples, {params['train']['epochs']} epochs); "
        "wall time of the whole stage command (process start, torch import, training, "
        "saving). local: shadow.workers=2 threads in one process. dask: a LoopbackCluster "
        "(scheduler + 2 one-thread workers, `dask` CLI processes on 127.0.0.1); cold = "
        "fresh workers (they import torch during the run), warm = the same workers again.", "",
        "| round | local s | dask cold s | dask warm s | cold / local | warm / local | "
        "bit-identical |", "|---:|---:|---:|---:|---:|---:|---|"]
    for r, (local, cold, warm, same) in enumerate(rows):
        lines.append(f"| {r} | {local:.1f} | {cold:.1f} | {warm:.1f} | {cold / local:.2f}x | "
                     f"{warm / local:.2f}x | {'yes' if same else 'NO'} |")
    lines += ["", f"Median: local {med[0]:.1f} s, dask cold {med[1]:.1f} s "
              f"({ratio_cold:.2f}x), dask warm {med[2]:.1f} s ({ratio_warm:.2f}x). "
              f"Target: at most 1.10x.", ""]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
