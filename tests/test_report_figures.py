"""The report's figures drawn side by side (bnmem.report.plots.draw) are the serial run's,
byte for byte, under the same keys."""
from pathlib import Path

import numpy as np

from bnmem.report import plots


def _jobs(out: Path) -> dict:
    rng = np.random.default_rng(0)
    kind = np.repeat([0, 1, 2], [80, 15, 5]).astype(np.int8)
    norms = {a: rng.lognormal(size=100) * (1 + (kind > 0)) for a in ("none", "batchnorm")}
    layers = {"none": {}, "batchnorm": {f"norm{i}": list(rng.uniform(0.5, 2, 8))
                                        for i in range(1, 5)}}
    return {"grad_norms": (plots.grad_norms, (norms, kind, out / "grad_norms.png")),
            "gamma_sigma": (plots.gamma_sigma_layers, (layers, out / "gamma_sigma.png")),
            "grad_norms_2": (plots.grad_norms, ({"none": norms["none"]}, kind,
                                                out / "grad_norms_2.png"))}


def test_figures_drawn_side_by_side_are_the_serial_ones(tmp_path: Path) -> None:
    serial = plots.draw(_jobs(tmp_path / "serial"), workers=1)
    forked = plots.draw(_jobs(tmp_path / "forked"), workers=2)
    assert list(forked) == list(serial) == ["grad_norms", "gamma_sigma", "grad_norms_2"]
    for key, path in serial.items():
        assert forked[key] == tmp_path / "forked" / path.name
        assert forked[key].read_bytes() == path.read_bytes(), key
    assert serial["grad_norms"].read_bytes() != serial["grad_norms_2"].read_bytes()
