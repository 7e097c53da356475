"""The typed records stages hand each other (bnmem.core.records): `<arm>.json` round-trips
through TargetRecord byte for byte, the spec rebuilds the module the train stage trained,
and a file that is not a record is one line naming it."""
import json

import pytest
import torch

from bnmem.core.config import Config
from bnmem.core.io import InputError
from bnmem.core.records import ModelSpec, TargetRecord
from bnmem.models.spec import build, load_model, model_spec


def test_default_spec_has_no_optional_keys_and_round_trips():
    spec = model_spec(Config(), "batchnorm", 1, 28)
    raw = spec.to_json()
    assert list(raw) == ["arch", "norm", "arm", "num_classes", "in_channels", "width",
                         "image_size", "dataset"]  # the keys <arm>.json always had, in order
    assert ModelSpec.from_json(raw) == spec
    custom = ModelSpec("resnet", "groupnorm", "groupnorm", 10, 3, 8, 32, "cifar10",
                       zero_init_residual=True, init="kaiming", swapped=("1", "5"))
    raw = custom.to_json()
    assert raw["zero_init_residual"] is True and raw["init"] == "kaiming" and raw["swapped"] == ["1", "5"]
    assert ModelSpec.from_json(json.loads(json.dumps(raw))) == custom


def test_target_record_file_round_trips_byte_for_byte(tmp_path):
    spec = model_spec(Config(), "batchnorm", 1, 28)
    rec = TargetRecord(spec, {"test_acc": 0.5}, [1, 12], {"bn1": {"ratio": [1.0]}},
                       {"bn1": {"clean": 0.1}}, {"level": "avx2"})
    rec.save(tmp_path / "a.json")
    back = TargetRecord.load(tmp_path / "a.json")
    assert back == rec
    back.save(tmp_path / "b.json")
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    flat = json.loads((tmp_path / "a.json").read_text())  # one flat object, as before the records
    assert set(spec.to_json()) < set(flat) and flat["checkpoints"] == [1, 12]
    no_bn = TargetRecord(model_spec(Config(), "none", 1, 28), {}, [12], {})
    assert "gamma_push" not in no_bn.to_json() and "cpu_kernels" not in no_bn.to_json()


def test_spec_rebuilds_the_trained_module(tmp_path):
    spec = model_spec(Config(), "batchnorm", 1, 28)
    model = build(spec, seed=3)
    torch.save(model.state_dict(), tmp_path / "m.pt")
    again = load_model(ModelSpec.from_json(spec.to_json()), tmp_path / "m.pt")
    for (k, a), (_, b) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), k


@pytest.mark.parametrize("raw", [{"arch": "lenet"}, {"metrics": {}, "checkpoints": [1]}, []])
def test_a_file_that_is_no_record_is_one_line(tmp_path, raw):
    path = tmp_path / "x.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(InputError, match=r"x\.json: not a train stage record"):
        TargetRecord.load(path)
