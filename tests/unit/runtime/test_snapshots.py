"""The snapshot store (``runtime/snapshots.py``): a partition written on the store's thread
reads back equal, the caller's later changes to its state do not reach the file, a reader
never sees half a file, and a file that is not a snapshot (tampered with, too large, another
record) is an error, never code run."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from sparkflux.protocol.messages import ConsumerSnapshot, PartitionSnapshot, StoredPartition
from sparkflux.runtime.codec import encode_message
from sparkflux.runtime.snapshots import SnapshotError, SnapshotStore, filesystem


def part(counts: np.ndarray, rows: int = 3) -> StoredPartition:
    table = pa.table({"k": pa.array(range(rows), pa.int64()), "v": pa.array(["x"] * rows)})
    snap = PartitionSnapshot(
        cons=ConsumerSnapshot(progress_sn=np.array([5, 7], dtype=np.int64),
                              progress_wm=np.array([1, 2], dtype=np.int64), released_sn=5,
                              released_wm=1, pending=None),
        ops=({"counts": counts, "keys": table}, None), out_sn=5, out_wm=1, held=None)
    return StoredPartition(checkpoint=2, stage=1, q=6, cut=5, snapshot=snap)


def same(a: StoredPartition, b: StoredPartition) -> bool:
    x, y = a.snapshot.ops[0], b.snapshot.ops[0]
    return (dataclasses.astuple(a)[:4] == dataclasses.astuple(b)[:4]
            and np.array_equal(x["counts"], y["counts"]) and x["keys"].equals(y["keys"])
            and np.array_equal(a.snapshot.cons.progress_sn, b.snapshot.cons.progress_sn)
            and b.snapshot.ops[1] is None)


def test_a_partition_reads_back_equal_and_later_changes_stay_out(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path / "store"))
    counts = np.arange(10, dtype=np.int64)
    original = part(counts.copy())
    live = part(counts)
    done = store.put("chk-1/part-1-6", live)
    counts[:] = -1  # the operator goes on changing its state after the put
    assert done.result(10) > 0
    assert same(store.get("chk-1/part-1-6"), original)
    assert store.list("chk-1") == ["part-1-6"] and store.list() == ["chk-1"]
    store.close()


def test_an_owned_partition_is_encoded_on_the_stores_thread_and_read_back_after_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A spill: nobody else holds the record, so it is encoded on the store's thread; a read
    submitted after it (``get_async``) sees it whole."""
    import threading

    from sparkflux.runtime import snapshots

    store = SnapshotStore(str(tmp_path / "spill"))
    original = part(np.arange(10, dtype=np.int64))
    encoded_on: list[str] = []

    def encode(msg: object) -> object:
        encoded_on.append(threading.current_thread().name)
        return encode_message(msg)

    monkeypatch.setattr(snapshots, "encode_message", encode)
    store.put_owned("spill-1-6.arrow", original)
    back = store.get_async("spill-1-6.arrow").result(10)
    assert same(back, original) and encoded_on[0].startswith("sparkflux-snapshots")
    store.close()


def test_a_relative_path_and_a_file_uri_are_the_same_store(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.chdir(tmp_path)
    a = SnapshotStore("ckpt")
    a.put_json("m.json", {"c": 1}).result(10)
    b = SnapshotStore(f"file://{tmp_path / 'ckpt'}")
    assert b.get_json("m.json") == {"c": 1}
    fs, path = filesystem("ckpt")
    assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path / "ckpt")
    for s in (a, b):
        s.close()


class Watched:
    """The store's filesystem, looking at what a reader would list each time a byte is
    written: the file being written must not be there under its name yet."""

    def __init__(self, store: SnapshotStore) -> None:
        self.store, self.fs, self.views = store, store.fs, []

    def __getattr__(self, name: str):
        return getattr(self.fs, name)

    def open_output_stream(self, path: str):
        stream, views = self.fs.open_output_stream(path), self.views
        store = self.store

        class Stream:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                stream.close()

            def write(self, data) -> None:
                views.append(store.list("c"))  # a reader's view, mid-write
                stream.write(data)

        return Stream()


def test_a_reader_never_sees_half_a_file(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path))
    store.fs = Watched(store)
    big = part(np.arange(200_000, dtype=np.int64), rows=5_000)
    for k in range(3):
        store.put(f"c/p{k}", big).result(60)
    views = store.fs.views
    assert len(views) >= 3 * 3  # several pieces per file: looked at mid-write
    for k, view in enumerate(views):
        written = k // (len(views) // 3)
        assert view == [f"p{j}" for j in range(written)], (k, view)
    assert store.list("c") == ["p0", "p1", "p2"] and same(store.get("c/p2"), big)
    store.close()


def test_what_is_not_a_snapshot_is_an_error(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path), max_bytes=10_000)
    (tmp_path / "pickled").write_bytes(pickle.dumps({"evil": 1}))
    (tmp_path / "by-hand").write_bytes(b"".join(bytes(p) for p in encode_message(
        part(np.arange(3)))))
    store.put("big", part(np.arange(5_000, dtype=np.int64))).result(10)
    with pytest.raises(SnapshotError, match="not a sparkflux snapshot"):
        store.get("pickled")
    with pytest.raises(SnapshotError, match="more than the 10,000"):
        store.get("big")
    with pytest.raises(SnapshotError, match="no snapshot"):
        store.get("absent")
    assert store.get("by-hand").q == 6  # written by hand the same way: readable
    with pytest.raises(ValueError, match="without '..'"):
        store.put("../outside", part(np.arange(3)))
    store.close()


def test_delete_and_close(tmp_path: Path) -> None:
    store = SnapshotStore(str(tmp_path))
    store.put("chk-1/a", part(np.arange(3))).result(10)
    store.put_json("chk-1/_manifest.json", {"cut": 5})
    store.flush()
    assert store.exists("chk-1/_manifest.json")
    store.delete("chk-1")
    store.delete("chk-1")  # absent: nothing
    assert store.list() == []
    store.close()
    with pytest.raises(RuntimeError, match="closed"):
        store.put("x", part(np.arange(3)))
