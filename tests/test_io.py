"""Outputs are byte-stable: the same state_dict saved twice, to different paths, gives the
same bytes (dvc.lock hashes then match across runs and machines), and loads back."""
import torch

from bnmem.core.io import load_state, save_state


def test_save_state_bytes_do_not_depend_on_the_path(tmp_path):
    state = {"w": torch.arange(6.0).reshape(2, 3), "n": torch.tensor(3)}
    save_state(tmp_path / "a.pt", state)
    save_state(tmp_path / "sub" / "b.pt", state)
    assert (tmp_path / "a.pt").read_bytes() == (tmp_path / "sub" / "b.pt").read_bytes()
    back = load_state(tmp_path / "sub" / "b.pt")
    assert torch.equal(back["w"], state["w"]) and int(back["n"]) == 3
