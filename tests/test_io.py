"""Outputs are byte-stable: the same state_dict saved twice, to different paths, gives the
same bytes (dvc.lock hashes then match across runs and machines), and loads back."""
import pytest
import torch

from bnmem.core.io import load_state, save_state


def test_save_state_bytes_do_not_depend_on_the_path(tmp_path):
    state = {"w": torch.arange(6.0).reshape(2, 3), "n": torch.tensor(3)}
    save_state(tmp_path / "a.pt", state)
    save_state(tmp_path / "sub" / "b.pt", state)
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "sub" / "b.pt").read_bytes()
    back = load_state(tmp_path / "sub" / "b.pt")
    assert torch.equal(back["w"], state["w"]) and int(back["n"]) == 3


def test_save_csv_writes_what_pandas_writes(tmp_path):
    """save_csv (the attack and grads stages' CSV, without pandas) is byte for byte
    pandas' to_csv(index=False, float_format=...) on the column types the stages write:
    strings, ints, floats with NaN, inf, tiny and huge values; a mismatch fails."""
    import numpy as np
    import pandas as pd
    from bnmem.core.io import save_csv
    rng = np.random.default_rng(0)
    cols = {"arm": np.array(["none", "batch,norm", 'q"x'] * 4), "n": np.arange(12),
            "fpr": np.logspace(-4, 0, 12),
            "tpr": np.r_[rng.random(8), np.nan, np.inf, 1e-300, 123456789.0]}
    for fmt in ("%.6g", "%.8g"):
        save_csv(tmp_path / "a.csv", cols, fmt)
        pd.DataFrame(cols).to_csv(tmp_path / "b.csv", index=False, float_format=fmt)
        assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()
    with pytest.raises(ValueError, match="lengths differ"):
        save_csv(tmp_path / "c.csv", {"a": [1, 2], "b": [1]})
