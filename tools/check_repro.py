"""Run `dvc repro --force` twice and compare every key of metrics/*.json, also against
the committed metrics. Prints each differing key; exit status 1 if any differ.

    python tools/check_repro.py [--runs 2]
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path


def flatten(d, prefix=""):
    if isinstance(d, dict):
        out = {}
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}/"))
        return out
    return {prefix.rstrip("/"): d}


def snapshot() -> dict[str, dict]:
    return {str(p): flatten(json.loads(p.read_text())) for p in sorted(Path("metrics").glob("*.json"))}


def diff(a: dict, b: dict, label: str) -> int:
    n = 0
    for f in sorted(set(a) | set(b)):
        fa, fb = a.get(f, {}), b.get(f, {})
        for k in sorted(set(fa) | set(fb)):
            if fa.get(k, "<missing>") != fb.get(k, "<missing>"):
                print(f"{label}: {f}:{k}: {fa.get(k, '<missing>')!r} != {fb.get(k, '<missing>')!r}")
                n += 1
    return n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--runs", type=int, default=2)
    args = p.parse_args()
    committed = snapshot()
    runs = []
    for i in range(args.runs):
        subprocess.run(["dvc", "repro", "--force", "-q"], check=True)
        runs.append(snapshot())
        print(f"run {i + 1}: {sum(len(v) for v in runs[-1].values())} metric keys")
    n = sum(diff(runs[0], r, f"run 1 vs run {i + 2}") for i, r in enumerate(runs[1:]))
    n_commit = diff(committed, runs[0], "committed vs run 1")
    status = subprocess.run(["dvc", "status", "-q"], capture_output=True, text=True)
    print(f"differing keys between runs: {n}; vs committed: {n_commit}; "
          f"dvc status clean: {status.returncode == 0 and not status.stdout.strip()}")
    sys.exit(1 if n or n_commit else 0)


if __name__ == "__main__":
    main()
