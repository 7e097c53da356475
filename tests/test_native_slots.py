"""lenet.h's named enums against the Python side (bnmem.native.library): the pointer
tables are built by name on one side and read by position on the other, so both lists must
agree entry for entry."""
import re

from bnmem.models.zoo import LeNet
from bnmem.native import library


def _enum(name: str) -> list[str]:
    """Entries of `enum <name> { ... }` in lenet.h, in order."""
    text = (library.HERE / "lenet.h").read_text()
    body = re.search(r"enum\s+" + name + r"\s*\{(.*?)\}", text, re.S).group(1)
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    return [e.strip() for e in body.split(",") if e.strip()]


def _as_key(entry: str) -> str:
    """CONV1_WEIGHT -> conv1.weight, NORM1_RUNNING_MEAN -> norm1.running_mean."""
    return entry.lower().replace("_", ".", 1)


def test_slot_enum_matches_python_slots():
    entries = _enum("slot")
    assert entries[-1] == "NSLOT"
    assert [_as_key(e) for e in entries[:-1]] == library.SLOTS
    # and LeNet's own parameter order (with BN), which the tables are built from
    assert library.SLOTS == [n for n, _ in LeNet("batchnorm", 10, 1).named_parameters()]


def test_running_enum_matches_python_running():
    entries = _enum("running")
    assert entries[-1] == "NRUNNING"
    assert [_as_key(e) for e in entries[:-1]] == library.RUNNING
    state = LeNet("batchnorm", 10, 1).state_dict()
    assert all(key in state for key in library.RUNNING)


def test_status_enum_matches_error_table():
    entries = _enum("status")
    assert entries[0] == "OK" and entries[1:] == list(library.ERRORS)


def test_every_library_file_is_hashed():
    # a header or included .c file left out of the hash would let a stale build be reused
    native_dir = library.HERE
    listed = {f for files in library.KERNELS.values() for f in files} | set(library.HEADERS)
    assert listed == {p.name for p in native_dir.iterdir() if p.suffix in (".c", ".h")}


def test_kernel_errors_use_the_table():
    from bnmem import native
    try:
        native._call(lambda *a: 4)
    except ValueError as exc:
        assert str(exc) == library.ERRORS["E_BN_BATCH_OF_ONE"]
    else:
        raise AssertionError("status 4 did not raise")
