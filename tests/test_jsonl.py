"""bench/jsonl.py: a store's lines parsed once per process, read again when the file
changes (a resumed study appends units), a line a kill cut short as None."""
import json

from conftest import load_script

J = load_script("bench/jsonl.py")


def test_a_store_is_parsed_once_and_read_again_when_it_grows(tmp_path):
    store = tmp_path / "s.jsonl"
    store.write_text(json.dumps({"study": 1}) + "\n" + json.dumps({"kind": "run", "i": 0}) + "\n")
    first = J.lines(store)
    assert first == ({"study": 1}, {"kind": "run", "i": 0})
    assert J.lines(str(store)) is first  # the same parse, by path or str
    with store.open("a") as f:  # a resumed study appends a unit, then a kill cuts one short
        f.write(json.dumps({"kind": "run", "i": 1}) + "\n" + '{"kind": "ru')
    grown = J.lines(store)
    assert grown == (*first, {"kind": "run", "i": 1}, None)
    # a rewrite of the same size at once (the same modification time, to the clock's
    # resolution) is parsed again: the cache keys on the bytes
    store.write_text(store.read_text().replace('"i": 1', '"i": 7'))
    assert J.lines(store)[2] == {"kind": "run", "i": 7}
