"""The full-scale Fashion-MNIST protocol in one command: fullscale.yaml's keys set over
params.yaml, the whole pipeline (`dvc repro`) run in a git worktree of HEAD, and its report,
headline metrics, results and figures copied to results/fullscale/ with the wall time and
peak memory of every stage (timing.md, timing.json).

    python tools/fullscale.py                 # make fullscale
    python tools/fullscale.py --config my.yaml --out results/my-run --workdir /tmp/run

The workspace is never touched (the run has its own worktree, DVC cache and outputs), so
the default pipeline's committed outputs stay those of the default params. Wall time per
stage is the time from DVC's "Running stage" line to the next one; peak memory is the
proportional set size (PSS: a page shared by n processes counts 1/n in each, so forked
workers are not counted twice; RSS where PSS is unreadable) summed over the whole process
tree (DVC, the stage, its worker processes), sampled every 0.5 s (at 0.2 s the sampler
itself took ~15 % of a core in the memreg run).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
COPY = ("report.md", "metrics", "results", "plots")  # outputs kept (files <= MAX_BYTES)
MAX_BYTES = 2_000_000


def apply(params: dict, overrides: dict) -> dict:
    """params with every dotted key of `overrides` set (a.b: 1 sets params[a][b])."""
    for key, value in overrides.items():
        node = params
        *path, last = key.split(".")
        for part in path:
            if not isinstance(node.get(part), dict):
                raise SystemExit(f"{key}: no such parameter in params.yaml")
            node = node[part]
        if last not in node:
            raise SystemExit(f"{key}: no such parameter in params.yaml")
        node[last] = value
    return params


class Monitor:
    """Peak memory (PSS) of a process tree, per stage, sampled in a thread."""

    def __init__(self, pid: int) -> None:
        self.root, self.stage, self.peak, self.total_peak = psutil.Process(pid), "(dvc)", {}, 0
        self.done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self.done.is_set():
            rss = 0
            try:
                for p in [self.root, *self.root.children(recursive=True)]:
                    try:  # PSS: pages shared by forked workers are counted once in all
                        rss += p.memory_full_info().pss
                    except (psutil.Error, AttributeError):
                        try:
                            rss += p.memory_info().rss
                        except psutil.Error:
                            pass
            except psutil.Error:
                break
            self.peak[self.stage] = max(self.peak.get(self.stage, 0), rss)
            self.total_peak = max(self.total_peak, rss)
            time.sleep(0.5)


def run(workdir: Path, log: Path, force: bool = False, append: bool = False
        ) -> tuple[list[dict], int, int]:
    """`dvc repro` (`-f` with `force`: every stage, also those whose committed outputs are
    up to date) in workdir; ([{stage, seconds, peak_pss_mib}], total peak, return code)."""
    env = {**os.environ, "PYTHONPATH": str(workdir / "src"),  # the worktree's bnmem, not ours
           # this interpreter's venv first: its dvc and the stages' `python`, without activation
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.Popen(["dvc", "repro", *(["-f"] if force else [])], cwd=workdir, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    mon, rows, t_stage = Monitor(proc.pid), [], time.perf_counter()
    with open(log, "a" if append else "w") as out:  # a resumed run keeps the earlier log
        for line in proc.stdout:
            out.write(line)
            out.flush()
            hit = re.match(r"Running stage '([^']+)'", line)
            if hit:
                now = time.perf_counter()
                if rows:
                    rows[-1]["seconds"] = now - t_stage
                rows.append({"stage": hit.group(1)})
                t_stage, mon.stage = now, hit.group(1)
    rc = proc.wait()
    mon.done.set()
    if rows:
        rows[-1]["seconds"] = time.perf_counter() - t_stage
    for r in rows:
        r["peak_pss_mib"] = round(mon.peak.get(r["stage"], 0) / 2 ** 20)
        r["seconds"] = round(r["seconds"], 1)
    return rows, round(mon.total_peak / 2 ** 20), rc


def collect(workdir: Path, out: Path) -> list[str]:
    """Copy the run's outputs (COPY, small files only) from workdir to out."""
    copied = []
    for name in COPY:
        src = workdir / name
        files = [src] if src.is_file() else sorted(p for p in src.rglob("*") if p.is_file())
        for f in files:
            rel = f.relative_to(workdir)
            if f.stat().st_size > MAX_BYTES or rel.parts[:2] == ("results", "fullscale"):
                continue
            if not _made_by_pipeline(workdir, rel):
                continue  # committed files of other tools (grid, sweeps), not this run
            (out / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, out / rel)
            copied.append(str(rel))
    return copied


def _made_by_pipeline(workdir: Path, rel: Path) -> bool:
    """An output of a stage in dvc.lock, or a file inside an output folder."""
    lock = (workdir / "dvc.lock").read_text()
    return any(f"path: {Path(*rel.parts[:k])}\n" in lock for k in range(1, len(rel.parts) + 1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default="fullscale.yaml")
    p.add_argument("--out", default="results/fullscale")
    p.add_argument("--workdir", default="/tmp/bnmem-fullscale")
    p.add_argument("--force", action="store_true", help="dvc repro -f: run every stage, also "
                   "those whose committed outputs are already up to date (timing)")
    p.add_argument("--resume", action="store_true", help="keep the earlier run's worktree, "
                   "outputs, DVC cache and dvc.lock, move it to the commit and rerun only the "
                   "stages whose dependencies changed (e.g. after an attack-code change, or a "
                   "run killed mid-way); timing then covers the stages rerun")
    p.add_argument("--ref", default="HEAD", help="the commit to run (default HEAD); e.g. an "
                   "older one to time it against HEAD with the same tool")
    args = p.parse_args()
    overrides = yaml.safe_load((ROOT / args.config).read_text()) or {}
    workdir, out = Path(args.workdir), ROOT / args.out
    head = subprocess.run(["git", "rev-parse", args.ref], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "src", "stages", "dvc.yaml"],
                           cwd=ROOT, capture_output=True, text=True, check=True).stdout
    if dirty:
        print(f"note: uncommitted changes in src/stages/dvc.yaml are not run (HEAD {head[:7]})")
    resumed = None
    if args.resume and (workdir / "dvc.lock").is_file():
        resumed = _checkout(workdir, head)
    else:
        if workdir.exists():
            subprocess.run(["git", "worktree", "remove", "--force", str(workdir)], cwd=ROOT)
            shutil.rmtree(workdir, ignore_errors=True)
        subprocess.run(["git", "worktree", "add", "--detach", str(workdir), head], cwd=ROOT,
                       check=True, capture_output=True)
    params = apply(yaml.safe_load((workdir / "params.yaml").read_text()), overrides)
    (workdir / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    print(f"running the pipeline in {workdir} (HEAD {head[:7]}); log: {workdir}/repro.log",
          flush=True)
    t0 = time.perf_counter()
    rows, peak, rc = run(workdir, workdir / "repro.log", args.force, append=bool(resumed))
    wall = time.perf_counter() - t0
    (workdir / "timing_rows.json").write_text(json.dumps(rows) + "\n")  # what --resume keeps
    if rc != 0:
        sys.exit(f"dvc repro failed (exit {rc}); see {workdir}/repro.log (nothing copied)")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    copied = collect(workdir, out)
    for name in ("params.yaml", "dvc.lock"):  # the settings, and every dep's and out's hash
        shutil.copy2(workdir / name, out / name)
    timing = {"commit": head, "overrides": overrides, "wall_seconds": round(wall, 1),
              "peak_pss_mib": peak, "cpu": _cpu(), "stages": rows}
    if resumed:  # the stages not rerun came from the earlier run (its timing, where it ended)
        timing["resumed_from"] = resumed
    (out / "timing.json").write_text(json.dumps(timing, indent=2) + "\n")
    lines = ["# Full-scale run: wall time and memory per stage", "",
             f"`python tools/fullscale.py --config {args.config}` at {head[:7]} on {_cpu()}; "
             f"total wall **{wall / 60:.1f} min**, peak memory (PSS) of the process tree "
             f"**{peak / 1024:.2f} GiB**.", "",
             "| stage | wall (s) | peak PSS (MiB) |", "|---|---:|---:|"]
    lines += [f"| {r['stage']} | {r['seconds']:.1f} | {r['peak_pss_mib']} |" for r in rows]
    if resumed:
        lines += ["", f"Resumed (`--resume`) from the run of {resumed['commit'][:7]}: only the "
                  "stages above were rerun; the others' outputs are that run's (their "
                  "dependencies did not change). Its stages, where it recorded them:", "",
                  "| stage | wall (s) | peak PSS (MiB) |", "|---|---:|---:|"]
        lines += [f"| {r['stage']} | {r['seconds']:.1f} | {r['peak_pss_mib']} |"
                  for r in resumed.get("stages", [])]
    (out / "timing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"copied {len(copied)} files to {out}")


def _checkout(workdir: Path, head: str) -> dict:
    """Move an earlier run's worktree to `head`, keeping its outputs, DVC cache and
    dvc.lock (so `dvc repro` reruns only the stages whose dependencies changed); returns
    the earlier run's timing ({"commit", "stages"}: what it recorded, [] if it was killed)."""
    # the run's outputs that git also tracks (the default run's committed report, plots,
    # recipes, dvc.lock): kept as the run left them, or DVC sees changed outputs and reruns
    # their stages
    changed = subprocess.run(["git", "diff", "--name-only", "-z"], cwd=workdir,
                             capture_output=True, check=True).stdout.split(b"\0")
    keep = {name.decode(): (workdir / name.decode()).read_bytes() for name in changed
            if name and name != b"params.yaml" and (workdir / name.decode()).is_file()}
    lock = (workdir / "dvc.lock").read_bytes()
    prior = {"commit": subprocess.run(["git", "rev-parse", "HEAD"], cwd=workdir, text=True,
                                      capture_output=True, check=True).stdout.strip(),
             "stages": []}
    rows = workdir / "timing_rows.json"
    if rows.is_file():
        prior["stages"] = json.loads(rows.read_text())
    subprocess.run(["git", "checkout", "-f", "--detach", head], cwd=workdir, check=True,
                   capture_output=True)
    for name, data in keep.items():
        (workdir / name).write_bytes(data)
    (workdir / "dvc.lock").write_bytes(lock)
    return prior


def _cpu() -> str:
    try:
        info = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
        name = info["model name"]
        if "cpu family" in info and "model" in info:  # lscpu's model name alone can be vague
            name += f" (family {info['cpu family']}, model {info['model']})"
    except (OSError, KeyError):
        name = "unknown CPU"
    return f"{name}, {os.cpu_count()} cores"


if __name__ == "__main__":
    main()
