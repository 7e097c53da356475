"""Run every benchmark in bench/ and assemble BENCHMARKS.md from bench/results/*.md.

    python bench/run_all.py            # all
    python bench/run_all.py attack     # only bench_attack.py (others keep their last results)
    python bench/run_all.py --assemble # only rebuild BENCHMARKS.md from bench/results/
"""
from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ORDER = ["train", "train_notes", "train_zoo", "convs", "grads", "attack", "attack_100",
         "attack_scale", "roc_boot", "pipeline", "pin", "coverage", "noise_structure",
         "coverage_paired03_confirm", "coverage_paired03_confirm2",
         "coverage_matched_paired03_confirm", "dask", "dp"]
# grads writes grads_run.md; bench/results/grads.md keeps the runs with notes added by hand
COMMANDS = {"grads": "python bench/bench_grads.py --threads 1 --out bench/results/grads_run.md",
            "attack_100": "python bench/bench_attack.py --classes 100 --baseline-targets 1 "
                          "--out bench/results/attack_100.md",
            "pipeline": "python bench/bench_pipeline.py --scaling",
            "attack_scale": "python bench/bench_attack_scale.py --sizes 4000 8000 --draws 10 20",
            "dp": "python bench/bench_dp.py --models 4 --samples 1000 --out bench/results/dp.md",
            # coverage under the noise structure real shadows have (noise_structure.md)
            "coverage_paired03_confirm":
                "python bench/bench_coverage.py --runs 500 --draws 100 --truth-runs 1000 "
                "--workers 2 --procedures mixed,both,pairs,samples,sum,twoway,jackknife,jacksum "
                "--arm-rho 0.3 --seed 11 --out results/coverage_paired03_confirm.json "
                "--md bench/results/coverage_paired03_confirm.md",
            "coverage_paired03_confirm2":
                "python bench/bench_coverage.py --runs 500 --draws 100 --truth-runs 1000 "
                "--workers 2 --procedures mixed,jacksum,jackknife,both --arm-rho 0.3 --seed 12 "
                "--out results/coverage_paired03_confirm2.json "
                "--md bench/results/coverage_paired03_confirm2.md",
            "coverage_matched_paired03_confirm":
                "python bench/bench_coverage_matched.py --runs 500 --draws 100 --truth-runs 1000 "
                "--workers 2 --procedures mixed,both,pairs,samples,sum,twoway,jackknife,jacksum "
                "--arm-rho 0.3 --end-rho 0.3 --seed 11 "
                "--out results/coverage_matched_paired03_confirm.json "
                "--md bench/results/coverage_matched_paired03_confirm.md"}


def machine() -> str:
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else platform.processor()
    return (f"{os.cpu_count()} cores ({cpu}), torch {torch.__version__}, "
            f"{torch.get_num_threads()} threads, python {platform.python_version()}")


def command(name: str) -> str | None:
    """The documented command of a section; None for hand-written notes."""
    if name in COMMANDS:
        return COMMANDS[name]
    return f"python bench/bench_{name}.py" if (HERE / f"bench_{name}.py").exists() else None


def main() -> None:
    only = sys.argv[1:]
    assemble_only = only == ["--assemble"]
    (HERE / "results").mkdir(exist_ok=True)
    for name in ORDER:
        cmd = command(name)
        if cmd and not assemble_only and (not only or name in only):
            print(f"== {cmd}", flush=True)
            argv = shlex.split(cmd)
            argv[0] = sys.executable if argv[0] == "python" else argv[0]
            subprocess.run(argv, cwd=HERE.parent, check=True)
    parts = ["# Benchmarks", "",
             f"Assembled {datetime.date.today()} by `make bench` (`python bench/run_all.py`). "
             f"Assembled on: {machine()}; a section rerun alone (`python bench/run_all.py "
             "<name>`) was measured on the machine its own text names, or on the one of the "
             "assembly it was last run in. Each section names its own command; every figure "
             "is a ratio against a baseline measured in the same run, plus the absolute "
             "numbers.", ""]
    for name in ORDER:
        res = HERE / "results" / f"{name}.md"
        if res.exists():
            parts += [res.read_text().strip(), ""]
            if command(name):
                parts += [f"*Command: `{command(name)}`*", ""]
    (HERE.parent / "BENCHMARKS.md").write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
