"""Default pipeline, per stage: `dvc repro -f` of the default params timed stage by stage
(tools/fullscale.py --force, bench/default.yaml: no override) at a baseline commit and at HEAD, in
the same session on the same machine, side by side.

    python bench/bench_stages.py [--baseline REF]     # default baseline: 93eeb3a (before
                                                      # the annealed endpoints)

Writes bench/results/stages.md (and the two runs' timing.json under /tmp). Each run has its
own git worktree and DVC cache, so nothing is reused between them or from the workspace.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(ref: str, tag: str) -> dict:
    out = Path(f"/tmp/bnmem-stages-{tag}")
    subprocess.run([sys.executable, str(ROOT / "tools/fullscale.py"), "--config",
                    "bench/default.yaml", "--force", "--ref", ref, "--out", str(out), "--workdir",
                    f"/tmp/bnmem-stages-work-{tag}"], cwd=ROOT, check=True)
    return json.loads((out / "timing.json").read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", default="93eeb3a")
    args = p.parse_args()
    base, head = timed(args.baseline, "base"), timed("HEAD", "head")
    sec = {r["stage"]: r["seconds"] for r in base["stages"]}
    lines = ["# Default pipeline per stage (bench/bench_stages.py)", "",
             f"`python bench/bench_stages.py --baseline {args.baseline}` on {head['cpu']}: "
             "`dvc repro -f` of the default params in a fresh worktree each (tools/fullscale.py "
             "--force), "
             f"baseline {base['commit'][:7]} then HEAD {head['commit'][:7]}, one after the "
             "other in one session.", "",
             "| stage | baseline (s) | HEAD (s) |", "|---|---:|---:|"]
    for r in head["stages"]:
        b = sec.pop(r["stage"], None)
        lines.append(f"| {r['stage']} | {'' if b is None else f'{b:.1f}'} | {r['seconds']:.1f} |")
    lines += [f"| {k} (baseline only) | {v:.1f} | |" for k, v in sec.items()]
    lines += [f"| **total wall** | **{base['wall_seconds']:.0f}** | **{head['wall_seconds']:.0f}** |", ""]
    path = ROOT / "bench" / "results" / "stages.md"
    path.write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
