"""Default pipeline, per stage: `dvc repro -f` of the default params timed stage by stage
(tools/fullscale.py --force, bench/default.yaml: no override) at a baseline commit and at HEAD, in
the same session on the same machine, side by side.

    python bench/bench_stages.py [--baseline REF] [--pairs N] [--warm-cache]
        # default baseline: 93eeb3a (before the annealed endpoints)

Runs baseline then HEAD, `--pairs` times interleaved (base, head, base, head, ...), so the
machine's drift shows in the spread; every run has its own git worktree and DVC cache and,
unless --warm-cache, an empty C-kernel cache (XDG_CACHE_HOME), so it compiles its kernels
as a fresh checkout does: nothing is reused between runs or from the workspace. Writes
bench/results/stages.md (and the runs' timing.json under /tmp).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import lscpu  # noqa: E402  (bench/lscpu.py: the machine line)


def timed(ref: str, tag: str, cold: bool) -> dict:
    out = Path(f"/tmp/bnmem-stages-{tag}")
    env = dict(os.environ)
    cache = None
    if cold:
        cache = tempfile.mkdtemp(prefix="bnmem-stages-xdg-")
        env["XDG_CACHE_HOME"] = cache
    try:
        subprocess.run([sys.executable, str(ROOT / "tools/fullscale.py"), "--config",
                        "bench/default.yaml", "--force", "--ref", ref, "--out", str(out),
                        "--workdir", f"/tmp/bnmem-stages-work-{tag}"], cwd=ROOT, check=True,
                       env=env)
    finally:
        if cache:
            shutil.rmtree(cache, ignore_errors=True)
    return json.loads((out / "timing.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", default="93eeb3a")
    p.add_argument("--pairs", type=int, default=1, help="interleaved baseline/HEAD pairs")
    p.add_argument("--warm-cache", action="store_true",
                   help="reuse the compiled C kernels in ~/.cache/bnmem (default: compile afresh)")
    args = p.parse_args()
    runs = []
    for _ in range(args.pairs):
        runs.append((timed(args.baseline, "base", not args.warm_cache),
                     timed("HEAD", "head", not args.warm_cache)))
    base0, head0 = runs[0]
    cols = [f"pair {i + 1}: {w}" for i in range(len(runs)) for w in ("base", "HEAD")]
    lines = ["# Default pipeline per stage (bench/bench_stages.py)", "",
             f"`python bench/bench_stages.py --baseline {args.baseline} --pairs {args.pairs}"
             f"{' --warm-cache' if args.warm_cache else ''}` on {lscpu.describe()}, "
             f"{os.cpu_count()} cores: `dvc repro -f` of the default params in a fresh worktree "
             f"each (tools/fullscale.py --force), {'reusing' if args.warm_cache else 'with an empty'}"
             f" C-kernel cache, baseline {base0['commit'][:7]} then HEAD {head0['commit'][:7]}, "
             f"{args.pairs} interleaved pair(s) in one session (seconds).", "",
             "| stage | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for r in head0["stages"]:
        cells = []
        for base, head in runs:
            for t in (base, head):
                sec = {s["stage"]: s["seconds"] for s in t["stages"]}
                cells.append(f"{sec[r['stage']]:.1f}" if r["stage"] in sec else "")
        lines.append(f"| {r['stage']} | " + " | ".join(cells) + " |")
    lines.append("| **total wall** | " + " | ".join(
        f"**{t['wall_seconds']:.0f}**" for base, head in runs for t in (base, head)) + " |")
    ratios = [head["wall_seconds"] / base["wall_seconds"] for base, head in runs]
    lines += ["", "HEAD / baseline per pair: " + ", ".join(f"{r:.3f}" for r in ratios)
              + f" (min {min(ratios):.3f}, max {max(ratios):.3f}).", ""]
    path = ROOT / "bench" / "results" / "stages.md"
    path.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
