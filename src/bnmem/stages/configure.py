"""configure: validate params.yaml once and write one resolved recipe per arm, and one of
the whole run.

The per-arm stages read `data/recipes/<arm>.yaml`, whose content changes only when a knob
that affects that arm changes, so `-S reg_strength=...` reruns only batchnorm_reg. The
stages over every arm (attack, exposure, report) read `data/recipes/all.yaml`: every key,
defaults resolved, but where shadows run (shadow.backend, resources, retries, tls).
"""
import argparse
from pathlib import Path

import yaml

from bnmem.core import cli
from bnmem.core.config import load_config
from bnmem.core.recipes import arm_recipe, pipeline_recipe
from bnmem.core.io import atomic_path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--params", default="params.yaml")
    p.add_argument("--out", required=True, help="output folder of <arm>.yaml and all.yaml")
    args = p.parse_args()
    cfg = load_config(args.params)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("*.yaml"):
        if old.stem not in (*cfg.arms, "all"):
            old.unlink()
    for arm in cfg.arms:
        with atomic_path(out / f"{arm}.yaml") as tmp:
            tmp.write_text(yaml.safe_dump(arm_recipe(cfg, arm), sort_keys=True))
    with atomic_path(out / "all.yaml") as tmp:
        tmp.write_text(yaml.safe_dump(pipeline_recipe(cfg), sort_keys=True))


if __name__ == "__main__":
    cli.run(main, "configure")
