"""The intervals at matched held-out accuracy (annealed endpoints interpolated by
bnmem.attack.frontier) cover a known truth on simulated runs: a fast, seeded version of
bench/bench_coverage_matched.py (500 runs there, bench/results/coverage_matched.md)."""
import numpy as np
import pytest

from bnmem.attack.coverage_matched import matched_coverage, simulate


def test_simulated_endpoints_rise_in_utility_and_leakage():
    """The simulation's premise: each arm's later endpoints are more useful (held-out
    accuracy up) and leak more, and membership moves members only."""
    kind = np.zeros(400, np.int8)
    kind[:40] = 1
    for rho in ({}, {"arm_rho": 0.3, "end_rho": 0.3}):  # the first design; the measured one
        phi, keep = simulate(16, 400, kind, 3, **rho)
        out = [[float(((phi[j, k, ..., 0] > 0) & ~keep).sum() / (~keep).sum()) for k in range(3)]
               for j in range(2)]
        assert all(a < b for row in out for a, b in zip(row, row[1:])), (rho, out)
        gap = phi[0, 2, ..., 0] - phi[1, 2, ..., 0]  # arm a - arm b at the last endpoint
        if not rho:  # shared noise: non-members differ by the utility shift alone
            assert np.allclose(np.std(gap[~keep]), 0) and np.std(gap[keep]) > 0
        else:  # each arm's own noise: non-members differ too
            assert np.std(gap[~keep]) > 0.5


@pytest.mark.slow  # a simulation study (about 12 s): the full suite, not the edit loop
def test_matched_heldout_intervals_cover_on_simulated_runs():
    res = matched_coverage(20, n=800, draws=20, truth_runs=40, seed=2, arm_rho=0.3, end_rho=0.3,
                           procedures=("mixed",))
    assert res["truth"]["auc_matched"] > 0  # a leaks more at matched utility (the design)
    mixed = res["table"]["mixed"]
    for name in ("auc_matched", "auc_overlap", "fz_flipped_matched"):
        assert mixed[name]["runs"] == 20
        assert mixed[name]["coverage"] >= 0.8, (name, mixed[name])

