"""The noise-structure measurement (bnmem.attack.noise) recovers a known structure, and the
coverage simulations reproduce the one measured on the default run's shadows
(bench/results/noise_structure.md): arms' model noise correlated about 0.3, successive
endpoints 0.26-0.65, far endpoints near 0."""
import json

import numpy as np
import pytest

from bnmem.attack.coverage_matched import simulate
from bnmem.attack.noise import residuals, structure
from bnmem.attack.simulate import synthetic_phi
from conftest import ROOT


@pytest.mark.parametrize("rho", [1.0, 0.3, 0.0])
def test_structure_recovers_the_arms_shared_noise(rho):
    phi, keep = synthetic_phi(16, 3000, 1, 0.0, 4, arm_effects=(0.6, 0.3), arm_rho=rho)
    res = structure({"a": phi[0, ..., 0], "b": phi[1, ..., 0]}, keep)["arms"]["a|b"]
    assert res["out"] == pytest.approx(rho, abs=0.03)  # OUT: noise and shift only
    assert res["in"] == pytest.approx(rho, abs=0.06)   # IN: plus each arm's own strength


def test_residuals_remove_the_membership_effect_and_the_sample():
    phi, keep = synthetic_phi(16, 500, 1, 2.0, 1)
    r = residuals(phi[0, ..., 0], keep)
    for side in (keep, ~keep):  # mean 0 per sample and side: difficulty and effect gone
        s = np.where(side, r, 0).sum(0) / side.sum(0)
        assert np.abs(s).max() < 1e-9


def test_the_matched_simulation_shares_noise_within_the_measured_range():
    """The matched coverage study's design (arm_rho 0.3, end_rho 0.3, the per-model shift
    held over an arm's endpoints), averaged over 8 seeds, lies inside the range measured on
    the real shadows (results/noise_structure.json, three arms and their pairs): the
    arms' residual correlation, and the correlation of successive endpoints. It is not the
    measured mean: successive endpoints correlate about 0.35 here, 0.445 on average there
    (0.25-0.65 by arm and budget)."""
    real = json.loads((ROOT / "results/noise_structure.json").read_text())
    arms = [v["out"] for v in real["arms"].values()]
    ends = [np.array(c) for c in real["endpoints"].values()]
    adjacent = [c[i, i + 1] for c in ends for i in range(len(c) - 1)]
    kind = np.zeros(3000, np.int8)
    sim_arm, sim_adj = [], []
    for seed in range(8):
        phi, keep = simulate(16, 3000, kind, seed, arm_rho=0.3, end_rho=0.3)
        res = structure({"a": phi[0, 2, ..., 0], "b": phi[1, 2, ..., 0]}, keep,
                        {"a": [phi[0, k, ..., 0] for k in range(3)]})
        c = np.array(res["endpoints"]["a"])
        sim_arm.append(res["arms"]["a|b"]["out"])
        sim_adj += [c[0, 1], c[1, 2]]
    assert min(arms) - 0.03 <= np.mean(sim_arm) <= max(arms)
    assert min(adjacent) <= np.mean(sim_adj) <= max(adjacent)
    assert np.mean(sim_arm) == pytest.approx(0.3, abs=0.05)  # the parameter is what it says


def test_student_t_noise_has_unit_variance_heavier_tails_and_leaves_the_default_alone():
    """synthetic_phi's noise_df (None, the default, draws what the simulator always drew:
    tests/test_interval_text.py::test_todays_code_reproduces_seed_29s_stored_runs recomputes
    a store written before noise_df existed, bit for bit): Student-t keeps unit variance (on 6 df, pooled over samples, with no model noise and no
    membership effect) and on 3 df puts far more mass beyond 4 sd than the normal; a df of 2
    or less (infinite variance) is refused in one line."""
    rng = np.random.default_rng([9, 0x51A])
    rng.normal(0, 2, 4000)
    s2 = rng.uniform(0.5, 1.5, 4000) ** 2  # each sample's noise scale, as synthetic_phi draws it
    tails = {}
    for df in (None, 6.0, 3.0):
        phi, _ = synthetic_phi(64, 4000, 1, 0.0, 9, model_sd=0.0, noise_df=df)
        x = phi[0, :, :, 0]
        z = (x - x.mean(axis=0)) / np.sqrt(s2)
        tails[df] = float((np.abs(z) > 4).mean())
        if df != 3.0:  # a finite fourth moment: the pooled variance is stable
            assert (z ** 2).sum() / (63 * 4000) == pytest.approx(1.0, abs=0.02)
    assert tails[3.0] > 5 * tails[None]
    with pytest.raises(ValueError, match="noise_df: 2.0; valid: None or a number > 2"):
        synthetic_phi(4, 10, 1, 0.5, 0, noise_df=2.0)
