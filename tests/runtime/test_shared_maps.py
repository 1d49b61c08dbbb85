"""A receiver's kept mappings of senders' shared files (runtime/wire/shared_maps.py): one mapping
per file for all its messages, and a message's reader slot cleared only once no array made from
its body is left."""

import gc
import os

import numpy as np

from simshard.runtime.wire.shared_maps import SharedMaps

HEAD = 64  # the file's slot bytes before its body (READERS in shared_memory.py)


def shared_file(directory, name: str, body: np.ndarray) -> str:
    """A sender's file: ``HEAD`` bytes of slots, then ``body``."""
    with open(os.path.join(directory, name), "wb") as f:
        f.write(bytes(HEAD) + body.tobytes())
    return name


def set_slot(directory, name: str, slot: int, value: int) -> None:
    with open(os.path.join(directory, name), "r+b") as f:
        f.seek(slot)
        f.write(bytes([value]))


def test_a_slot_is_cleared_once_the_last_array_made_from_the_body_goes(tmp_path):
    cleared = []
    maps = SharedMaps(str(tmp_path), HEAD, lambda name, slot: cleared.append((name, slot)))
    name = shared_file(tmp_path, "f", np.arange(24, dtype=np.float32))
    got = maps.view(name, np.float32, (4, 6), slot=3)
    assert np.array_equal(got, np.arange(24, dtype=np.float32).reshape(4, 6)) and not got.flags.writeable
    derived = [got[1:, ::2], got.T, got.reshape(-1)[5:], np.asarray(got[2])]
    del got
    gc.collect()
    assert cleared == []  # views of the body live on: the sender may not write it yet
    del derived
    gc.collect()
    assert cleared == [("f", 3)]


def test_a_file_is_mapped_once_for_all_its_messages_and_each_sees_what_was_written(tmp_path):
    maps = SharedMaps(str(tmp_path), HEAD, lambda name, slot: None)
    name = shared_file(tmp_path, "f", np.zeros(16, dtype=np.int32))
    first = maps.view(name, np.int32, (16,), slot=0)
    mapping = maps.maps[name]
    with open(os.path.join(tmp_path, name), "r+b") as f:  # the sender writes the file again
        f.seek(HEAD)
        f.write(np.arange(16, dtype=np.int32).tobytes())
    second = maps.view(name, np.int32, (8,), slot=1)
    assert maps.maps[name] is mapping and len(maps.maps) == 1
    assert second.tolist() == list(range(8)) and first[:8].tolist() == list(range(8))


def test_files_gone_and_the_least_recently_used_past_the_limit_are_unmapped(tmp_path):
    size = HEAD + 1024 * 4
    maps = SharedMaps(str(tmp_path), HEAD, lambda name, slot: None, limit=2 * size)
    for n in "abc":
        shared_file(tmp_path, n, np.zeros(1024, dtype=np.float32))
    kept = maps.view("a", np.float32, (4,), slot=0)  # a view keeps its own mapping alive
    maps.view("b", np.float32, (4,), slot=0)
    maps.view("a", np.float32, (4,), slot=1)  # "a" used last
    maps.view("c", np.float32, (4,), slot=0)  # past the limit: "b" goes
    assert list(maps.maps) == ["a", "c"] and maps.bytes == 2 * size
    os.unlink(os.path.join(tmp_path, "a"))
    shared_file(tmp_path, "d", np.ones(1024, dtype=np.float32))
    assert maps.view("d", np.float32, (2,), slot=0).tolist() == [1.0, 1.0]
    assert list(maps.maps) == ["c", "d"]  # "a" was removed by its sender: unmapped
    assert kept.tolist() == [0.0] * 4  # its view still reads its mapping
