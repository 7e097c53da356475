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


def test_read_state_arrays_equals_torch_load(tmp_path):
    """The torch-free reader of state_dict files gives torch.load's values bit for bit (a
    BN LeNet with its int64 counters, a float64 one), and None (not a wrong array) for what
    it does not read: a non-contiguous tensor, a parameter object, a legacy-format file."""
    import numpy as np
    from bnmem.core.io import read_state_arrays
    from bnmem.models.zoo import LeNet
    torch.manual_seed(0)
    for model in (LeNet("batchnorm", 10, 1), LeNet("none", 7, 3).double()):
        model.train()
        model(torch.randn(8, model.conv1.in_channels, 28, 28, dtype=model.conv1.weight.dtype))
        save_state(tmp_path / "m.pt", model.state_dict())
        got, ref = read_state_arrays(tmp_path / "m.pt"), load_state(tmp_path / "m.pt")
        assert list(got) == list(ref)
        for k, v in ref.items():
            assert got[k].dtype == v.numpy().dtype and got[k].shape == tuple(v.shape), k
            np.testing.assert_array_equal(got[k], v.numpy(), err_msg=k)
    base = torch.arange(24.0)  # views into one storage at non-zero offsets, and a 0-dim one
    shared = {"a": base[5:11].view(2, 3), "b": base[:4], "c": base[23], "d": torch.tensor(7)}
    save_state(tmp_path / "s.pt", shared)
    got = read_state_arrays(tmp_path / "s.pt")
    for k, v in load_state(tmp_path / "s.pt").items():
        assert got[k].shape == tuple(v.shape), k
        np.testing.assert_array_equal(got[k], v.numpy(), err_msg=k)
    w = torch.arange(12.0).reshape(3, 4)
    save_state(tmp_path / "t.pt", {"w": w.t()})  # a transposed view: strides not row-major
    assert read_state_arrays(tmp_path / "t.pt") is None
    torch.save({"w": torch.nn.Parameter(w)}, tmp_path / "p.pt")
    assert read_state_arrays(tmp_path / "p.pt") is None
    torch.save({"w": w}, tmp_path / "old.pt", _use_new_zipfile_serialization=False)
    assert read_state_arrays(tmp_path / "old.pt") is None
    (tmp_path / "junk.pt").write_bytes(b"PK\x03\x04 not really a zip")
    assert read_state_arrays(tmp_path / "junk.pt") is None  # load_state names it
