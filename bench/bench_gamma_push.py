"""Peak memory and time of the BN targets' gamma push (bnmem.train.target_metrics.gamma_push)
at the full-scale pool: all samples in one float64 forward and backward (chunk None, the
reference path and the code before chunking) against chunks of GAMMA_PUSH_CHUNK samples.
Each variant runs in its own process (peak RSS from getrusage), on random LeNet-BN weights
(memory does not depend on them) and random 28x28 images.

    python bench/bench_gamma_push.py --n 60000
"""
import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def _one(n: int, chunk: int | None) -> dict:
    import bnmem  # noqa: F401  (pins the CPU kernels)
    import numpy as np
    import torch

    from bnmem.core.config import config_from_dict
    from bnmem.models.spec import build, model_spec
    from bnmem.train.target_metrics import gamma_push
    import yaml
    cfg = config_from_dict(yaml.safe_load((ROOT / "params.yaml").read_text()))
    model = build(model_spec(cfg, "batchnorm", 1, 28), seed=0)
    rng = np.random.default_rng(0)
    x = torch.as_tensor(rng.standard_normal((n, 1, 28, 28)).astype(np.float32))
    y = rng.integers(0, 10, n)
    kind = rng.choice(3, n, p=[0.94, 0.05, 0.01])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    out = gamma_push(model, x, y, {"clean": kind == 0, "flipped": kind == 1, "ood": kind == 2},
                     chunk=chunk)
    return {"chunk": chunk, "seconds": round(time.perf_counter() - t, 2),
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "rss_before_mib": round(base / 1024), "push": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=60000)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one is not None:
        print(json.dumps(_one(a.n, None if a.one == "none" else int(a.one))))
        return
    sys.path.insert(0, str(ROOT / "bench"))
    import lscpu
    from bnmem.train.target_metrics import GAMMA_PUSH_CHUNK
    rows = []
    for chunk in ("none", str(GAMMA_PUSH_CHUNK)):
        r = subprocess.run([sys.executable, __file__, "--n", str(a.n), "--one", chunk],
                           capture_output=True, text=True, check=True)
        rows.append(json.loads(r.stdout))
    ref, new = rows
    worst = max(abs(new["push"][l][g] - ref["push"][l][g]) / max(abs(ref["push"][l][g]), 1e-30)
                for l in ref["push"] for g in ref["push"][l])
    print(f"# gamma push at {a.n} pool samples (bench/bench_gamma_push.py), {lscpu.model_name()}")
    print("\n| chunk | seconds | peak RSS (MiB) |\n|---|---:|---:|")
    for r in rows:
        print(f"| {r['chunk'] or 'all at once'} | {r['seconds']} | {r['peak_rss_mib']} |")
    print(f"\nlargest relative difference of a push value, chunked vs all at once: {worst:.2e}")


if __name__ == "__main__":
    main()
