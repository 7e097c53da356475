"""tools/fit_seeds.py: candidates parsed (and refused in one line), the prepare stage's own
pool rebuilt per seed, and the table's every-replicate rule."""
import subprocess
import sys

import numpy as np
import pytest
import yaml

from bnmem.core.config import ConfigError
from bnmem.core.io import load_npz
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import fit_seeds  # noqa: E402


def test_candidates_parse_into_overrides_on_the_grid_recipe():
    assert fit_seeds.overrides("grid") == {}
    assert fit_seeds.overrides("lr0.05+e24") == {"train.lr": 0.05, "train.epochs": 24}
    assert fit_seeds.overrides("w0.5+bs32") == {"train.warmup_epochs": 0.5, "train.batch_size": 32}
    assert fit_seeds.overrides("wd0+m0.8+w1") == {"train.weight_decay": 0.0, "train.momentum": 0.8,
                                                  "train.warmup_epochs": 1.0}
    with pytest.raises(ConfigError, match="'x3'"):
        fit_seeds.overrides("lr0.1+x3")
    with pytest.raises(ConfigError, match="'e'"):
        fit_seeds.overrides("e")


def test_the_table_asks_for_every_replicate():
    rows = [{"candidate": c, "noise": n, "seed": s, "fit": f}
            for c, fits in (("a", (0.81, 0.90, 0.85)), ("b", (0.95, 0.79, 0.99)),
                            ("c", (0.85, 0.85, None)))
            for (n, s), f in zip(((0.01, 0), (0.01, 1), (0.05, 0)), fits) if f is not None]
    reps = [(0.01, 0), (0.01, 1), (0.05, 0)]
    lines = {l.split(" | ")[0][2:]: l for l in fit_seeds.table(rows, 0.8, reps).splitlines()[2:]}
    assert lines["a"].endswith("| 0.810 | **yes** |")
    assert lines["b"].endswith("| 0.790 | no |")   # one replicate misses
    assert lines["c"].endswith("| 0.850 | no |")   # one replicate not run yet
    # the grid's replicates decide, not the rows at hand: a run stopped after the first
    # noise rate fits nowhere yet
    early = [r for r in rows if r["noise"] == 0.01 and r["candidate"] == "a"]
    assert fit_seeds.table(early, 0.8, reps).splitlines()[2].endswith("| no |")


@pytest.mark.slow
def test_the_pool_is_the_one_the_prepare_stage_builds(tmp_path):
    """The prepare stage's own output for the default params (Fashion-MNIST, seed 0, 5 %
    flipped, 1 % OOD), run here, is what pool_for gives."""
    subprocess.run([sys.executable, str(ROOT / "stages" / "prepare.py"), "--params",
                    str(ROOT / "params.yaml"), "--pool", str(tmp_path / "pool.npz"),
                    "--test", str(tmp_path / "test.npz")], check=True, capture_output=True)
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    cfg = fit_seeds.config({"dataset": params["dataset"], "noise_rate": params["noise_rate"]},
                           "none", params["seed"], {})
    from bnmem.data.sources import load_splits, ood_images
    pool, test = fit_seeds.pool_for(cfg, load_splits(cfg.dataset, cfg.data),
                                    ood_images(cfg.dataset, cfg.data)[1])
    staged = load_npz(tmp_path / "pool.npz")
    for key in ("x", "y_train", "y_clean", "kind", "index"):
        assert np.array_equal(pool[key], staged[key]), key
    assert np.array_equal(test["y"], load_npz(tmp_path / "test.npz")["y"])


def test_an_unknown_arch_is_one_line_naming_the_grid():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "fit_seeds.py"), "--arch", "vgg"],
                         capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--arch/--dataset" in out.stderr
    assert "densenet_cpu" in out.stderr
