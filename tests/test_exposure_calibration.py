"""Exposure calibrated against an empirical null: a non-member's calibrated exposure is
>= k with probability 10^-k, where the Gaussian tail of the raw exposure is not (heavy-tailed
shadow signals, as flipped and OOD samples give)."""
import numpy as np
import pytest

from bnmem.attack.signals import Signals
from bnmem.core.config import config_from_dict
from bnmem.exposure.scores import ExposureNull
from bnmem.core.keep import keep_matrix

M, N = 16, 6000


def _signals(df: float, seed: int) -> Signals:
    """Shadow signals without membership signal, Student-t noise with `df` degrees of
    freedom around a per-sample location (df = inf: Gaussian)."""
    rng = np.random.default_rng([seed, 0xE7])
    keep = keep_matrix(M, N, seed)
    noise = rng.standard_normal((M, N, 1)) if np.isinf(df) else rng.standard_t(df, (M, N, 1))
    phi = rng.normal(0, 2, (1, N, 1)) + noise
    return Signals(phi=phi, logp=np.zeros((M, N)), correct=np.zeros((M, N), bool), keep=keep,
                   model_ids=np.arange(M, dtype=np.int64))


@pytest.mark.parametrize("df", [3.0, np.inf])
def test_calibrated_exposure_has_nominal_tails(df):
    null = ExposureNull.build(_signals(df, 0), config_from_dict({}))
    assert null.values.size == M * N // 2
    table = null.table()
    for k in ("2", "3"):
        row = table["levels"][k]
        nominal = row["nominal"]
        # 48 000 non-member values, correlated within samples: allow 3 binomial sd x 2
        sd = np.sqrt(nominal * (1 - nominal) / null.values.size)
        assert abs(row["calibrated"] - nominal) <= 6 * sd + 1e-4, (df, k, row)
    if np.isinf(df):
        return
    # heavy tails: the Gaussian reads far more non-members as exposed than nominal
    assert table["levels"]["3"]["raw"] > 3 * table["levels"]["3"]["nominal"]


def test_calibrate_is_a_null_share():
    null = ExposureNull(values=np.array([0.1, 0.5, 1.0, 2.0, 3.0]), pair=np.zeros(5, int))
    got = null.calibrate(np.array([0.0, 1.0, 2.5, 9.0]))
    # (1 + #null >= raw) / (1 + 5)
    np.testing.assert_allclose(got, -np.log10(np.array([6, 4, 2, 1]) / 6))
