"""Run `dvc repro --force` twice and compare every value of metrics/*.json and
results/*.json and every output hash in dvc.lock: run against run, and the first run
against what is committed. Prints each differing key and the CPU kernels in use; exit
status 1 if anything differs. The first run logs oneDNN's primitives (ONEDNN_VERBOSE=1),
and the kernels each stage used are printed.

    python tools/check_repro.py [--runs 2]
"""
import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import bnmem  # noqa: F401  (pins this process like the stages)
import torch
import yaml


def flatten(d, prefix=""):
    if isinstance(d, dict):
        out = {}
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}/"))
        return out
    if isinstance(d, list):
        return {prefix.rstrip("/"): json.dumps(d)}
    return {prefix.rstrip("/"): d}


def lock_outs() -> dict:
    """{stage: {out path: md5}} from dvc.lock."""
    lock = yaml.safe_load(Path("dvc.lock").read_text())["stages"]
    return {stage: {o["path"]: o.get("md5") for o in spec.get("outs", [])}
            for stage, spec in lock.items()}


def snapshot() -> dict[str, dict]:
    files = sorted(Path("metrics").glob("*.json")) + sorted(Path("results").glob("*.json"))
    snap = {str(p): flatten(json.loads(p.read_text())) for p in files
            if not p.name.startswith("coverage")}  # coverage*.json: benchmarks
    snap["dvc.lock outs"] = flatten(lock_outs())
    return snap


def diff(a: dict, b: dict, label: str) -> int:
    n = 0
    for f in sorted(set(a) | set(b)):
        fa, fb = a.get(f, {}), b.get(f, {})
        for k in sorted(set(fa) | set(fb)):
            if fa.get(k, "<missing>") != fb.get(k, "<missing>"):
                print(f"{label}: {f}:{k}: {fa.get(k, '<missing>')!r} != {fb.get(k, '<missing>')!r}")
                n += 1
    return n


def kernel_table(output: str) -> list[str]:
    """Per stage of a `dvc repro` log run with ONEDNN_VERBOSE=1: the stage's own kernel line
    (bnmem.core.cli.kernels_used) and the oneDNN primitives it executed, by implementation."""
    rows, stage, prims, own = [], None, Counter(), ""

    def flush() -> None:
        if stage is not None:
            dnn = ", ".join(f"{p} {impl} x{n}" for (p, impl), n in sorted(prims.items()))
            rows.append(f"  {stage}: {own or 'no kernel line'}; oneDNN: {dnn or 'none'}")

    for line in output.splitlines():
        m = re.match(r"Running stage '([^']+)'", line)
        if m:
            flush()
            stage, prims, own = m.group(1), Counter(), ""
        elif line.startswith("onednn_verbose") and ",primitive,exec," in line:
            f = line.split(",")
            i = f.index("exec")  # then engine, primitive, implementation (any version's prefix)
            if len(f) > i + 3 and f[i + 2] != "reorder":  # layout copies: exact
                prims[(f[i + 2], f[i + 3])] += 1
        elif " kernels: " in line:
            own = line.split(" kernels: ", 1)[1].strip()
    flush()
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=2)
    args = p.parse_args()
    flags = bnmem.core.cpu._cpu_flags()
    best = "AVX512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "below AVX2"
    print(f"CPU: best vector level {best}; pin level {bnmem.core.cpu.level()!r} "
          f"(this process's torch dispatch: {torch.backends.cpu.get_cpu_capability()})")
    committed = snapshot()
    runs = []
    for i in range(args.runs):
        if i == 0:  # oneDNN logs every primitive it executes: which stages use it, and how
            r = subprocess.run(["dvc", "repro", "--force"], env={**os.environ, "ONEDNN_VERBOSE": "1"},
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            if r.returncode:
                sys.exit(r.stdout[-3000:])
            print("kernels per stage (C kernels give the same bits on every vendor; oneDNN "
                  "float32 results are used only where tests/test_kernels.py shows they do "
                  "not reach an output):")
            print("\n".join(kernel_table(r.stdout)))
        else:
            subprocess.run(["dvc", "repro", "--force", "-q"], check=True)
        runs.append(snapshot())
        print(f"run {i + 1}: {sum(len(v) for v in runs[-1].values())} values and hashes")
    kernels = json.loads(Path("data/models/none.json").read_text()).get("cpu_kernels")
    n = sum(diff(runs[0], r, f"run 1 vs run {i + 2}") for i, r in enumerate(runs[1:]))
    n_commit = diff(committed, runs[0], "committed vs run 1")
    status = subprocess.run(["dvc", "status", "-q"], capture_output=True, text=True)
    print(f"stage processes ran {kernels}; differing values between runs: {n}; vs committed: "
          f"{n_commit}; dvc status clean: {status.returncode == 0 and not status.stdout.strip()}")
    sys.exit(1 if n or n_commit else 0)


if __name__ == "__main__":
    main()
