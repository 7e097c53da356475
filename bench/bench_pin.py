"""Cost and effect of pinning the CPU kernel level (bnmem.core.cpu): the default `dvc repro`
from an empty cache, pinned (AVX2, the default) and with BNMEM_CPU=native, per stage.

    python bench/bench_pin.py [--out bench/results/pin.md]

Runs in a fresh `git clone` of HEAD in a temp dir (the workspace is untouched). Stage
times are the `<stage> done in X s` lines each stage logs (torch start-up excluded); the
wall time includes it. The native run's metrics are compared with the pinned run's: on a
CPU whose best kernels are not AVX2 they differ, which shows the pin is what makes runs
on different machines equal.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bnmem  # noqa: F401  (pins this process; the stage processes pin themselves)
import torch

ROOT = Path(__file__).resolve().parents[1]


def run(work: Path, level: str) -> tuple[float, dict[str, float], dict]:
    env = {**os.environ, "BNMEM_CPU": level,
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    for key in bnmem.core.cpu.PIN:  # let the stage processes choose, not this one's settings
        env.pop(key, None)
    t0 = time.perf_counter()
    done = subprocess.run(["dvc", "repro", "-f"], cwd=work, env=env, capture_output=True,
                          text=True, check=True)
    wall = time.perf_counter() - t0
    stages: dict[str, float] = {}
    for name, sec in re.findall(r"bnmem (\w+) done in ([0-9.]+) s", done.stdout + done.stderr):
        stages[name] = stages.get(name, 0.0) + float(sec)
    metrics = {p.name: json.loads(p.read_text()) for p in sorted((work / "metrics").glob("*.json"))}
    kernels = json.loads((work / "data/models/none.json").read_text())["cpu_kernels"]
    return wall, stages, {"metrics": metrics, "kernels": kernels}


def flat(d, prefix=""):
    if isinstance(d, dict):
        return {k: v for key, val in d.items() for k, v in flat(val, f"{prefix}{key}.").items()}
    return {prefix[:-1]: d}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--out", default=str(ROOT / "bench/results/pin.md"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(work)], check=True)
        results = {level: run(work, level) for level in ("avx2", "native")}
        again = run(work, "avx2")
    (w_pin, s_pin, r_pin), (w_nat, s_nat, r_nat) = results["avx2"], results["native"]
    a, b = flat(r_pin["metrics"]), flat(r_nat["metrics"])
    differ = sum(a[k] != b.get(k) for k in a)
    same_again = flat(again[2]["metrics"]) == a
    lines = ["# Cost of the CPU pin (bench/bench_pin.py)", "",
             f"Default `dvc repro -f` in a fresh clone, {os.cpu_count()} cores, torch "
             f"{torch.__version__}; this CPU's best torch kernels: "
             f"{r_nat['kernels']['torch']}. Pinned stage processes ran "
             f"{r_pin['kernels']['torch']}.", "",
             "| stage | pinned (AVX2) s | native s | native / pinned |", "|---|---:|---:|---:|"]
    for st in s_pin:
        lines.append(f"| {st} | {s_pin[st]:.1f} | {s_nat.get(st, float('nan')):.1f} | "
                     f"{s_nat.get(st, float('nan')) / s_pin[st]:.2f} |")
    lines += [f"| **wall, whole pipeline** | {w_pin:.1f} | {w_nat:.1f} | {w_nat / w_pin:.2f} |", "",
              f"Metric values that differ between the native and the pinned run: {differ} of "
              f"{len(a)}. A second pinned run gives the same metrics: {same_again}."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
