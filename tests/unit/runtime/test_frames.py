"""The wire format: every message survives encode -> decode with every field equal, and
nothing that is not a valid frame is ever turned into an object (no pickle on the wire)."""

from __future__ import annotations

import dataclasses
import os
import pickle
import struct
from typing import Any

import msgpack
import numpy as np
import pyarrow as pa
import pytest

from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.messages import (
    Ack,
    ConsumerSnapshot,
    CuDone,
    CuStart,
    Cut,
    Data,
    Echo,
    Installed,
    Keepalive,
    PartitionSnapshot,
    Probe,
    PSync,
    Reconciled,
    Rejoin,
    Rejoined,
    Retain,
    Retaining,
    Reverse,
    State,
    StoredPartition,
    Streams,
    Tentative,
)
from sparkflux.runtime import codec
from sparkflux.runtime.codec import PARTS, REGISTRY, EncodeError
from sparkflux.runtime.frames import FRAME_HEADER, MSG, FrameError, decode, encode

SCHEMA = pa.schema([("v", pa.int64()), ("_src", pa.int32())])


def roundtrip(msg: object) -> object:
    raw = b"".join(bytes(p) for p in encode(msg))
    size, kind = FRAME_HEADER.unpack_from(raw, 0)
    assert size == len(raw) - 4
    return decode(kind, raw[FRAME_HEADER.size:], {3: SCHEMA})


def same(a: Any, b: Any) -> bool:
    """Deep equality over dataclasses, dicts, lists, numpy arrays (dtype too) and Arrow."""
    if dataclasses.is_dataclass(a):
        return type(a) is type(b) and all(
            same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape and \
            bool(np.array_equal(a, b))
    if isinstance(a, (pa.Table, pa.RecordBatch)):
        return type(a) is type(b) and a.schema == b.schema and a.equals(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


def i32(*v: int) -> np.ndarray:
    return np.array(v, np.int32)


def i8(*v: int) -> np.ndarray:
    return np.array(v, np.int8)


def i64(*v: int) -> np.ndarray:
    return np.array(v, np.int64)


BATCH = pa.RecordBatch.from_pydict({"v": [1, 2, 3], "_src": [1, 1, 2]}, schema=SCHEMA)
TABLE = pa.table({"k": ["a", "b"], "x": [1.5, None]})
CONS = ConsumerSnapshot(progress_sn=i64(3, 4), progress_wm=i64(-1, 7), released_sn=2,
                        released_wm=-1, pending=BATCH,
                        seen=np.array([[1, 9, 0, 0], [0, 7, 3, 1]], dtype=np.int64))
SNAPSHOT = PartitionSnapshot(
    cons=CONS,
    ops=(None, {"code": i64(5, 6), "sub": i64(0, 0), "keys": TABLE,
                "cols": {"n": i64(1, 2), "last": np.arange(6.0).reshape(2, 3)}},
         {"horizon": 9, "rows": TABLE, "side": i8(0, 1)}),
    out_sn=12, out_wm=40, held=BATCH,
)
EXAMPLES: list[Any] = [
    Data(3, Streams(i32(1, 2), i8(0, 1), i32(5, 5), i64(10, 20), i64(-1, 7)), BATCH),
    Data(3, Streams(i32(1), i8(0), i32(5), i64(10), i64(-1)), None),
    Ack(3, p=i32(1), q=i32(4), c=i8(1), upto=i64(99)),
    Reverse(3, p=i32(2), r=i8(1), q=i32(0), c=i8(0), floor=i64(41)),
    CuStart(1, 4, 0, 7, True),
    Retain(1, 4, 1, 3),
    Retaining(1, 4, 1, 3),
    State(1, 4, 0, SNAPSHOT, 5),
    State(1, 4, 0, dataclasses.replace(SNAPSHOT, ops=(), cons=dataclasses.replace(
        CONS, pending=None)), 0),  # no rows pending, an operator-less stage
    Installed(1, 4, 0, 5),
    StoredPartition(3, 1, 4, 1_000, SNAPSHOT),
    Cut(2, 3, 1_000),
    PSync(2, 4, 1, 9),
    Rejoin(1, p=i32(3), r=i8(0), q=i32(4), c=i8(1), floor=i64(7), send=np.array([True]),
           wait=np.array([False])),
    CuDone(0, 2, 1, 123, 0.25),
    cm.OpenControl(token="abc"),
    cm.Register(site=1, attempt=2, host="10.0.0.1", port=4000, pid=77, token="abc"),
    cm.Ready(site=1, attempt=2),
    cm.Heartbeat(site=1, attempt=0, pid=3, busy_s=1.5, slept_s=0.0, passes=3, cpu_s=2.0,
                 buffered=10, capacity_s=4.0, at=12.5, counts=i64(1, 2, 3), refused=4),
    cm.Heartbeat(site=1, attempt=0, pid=3, busy_s=1.5, slept_s=0.0, passes=3, cpu_s=2.0,
                 buffered=10, capacity_s=4.0, at=12.5, counts=i64(1, 2, 3), refused=4,
                 in_sn=i64(7, 5), in_part=i64(3, -1), out_sn=i64(6, 1 << 62),
                 out_part=i64(3, -1), held=8192, pending=40),
    cm.Moved(epoch=9),
    cm.Folded(stage=1, p=3, r=2, epoch=7),
    cm.PartStored(site=2, checkpoint=4, stage=1, q=5,
                  name="checkpoint-0000000004/stage-1/part-00005", nbytes=1234),
    cm.SiteError(site=2, attempt=1, error="Traceback ..."),
    cm.Unreachable(site=0, peer=2, peer_attempt=1, reason="timed out"),
    cm.StartFailed(site=3, attempt=2, error_type="ModuleNotFoundError",
                   message="No module named 'helpers'", file="/tmp/flow.py", line=3,
                   function="<module>", source="from helpers import x",
                   traceback="Traceback ..."),
    cm.View(number=1, members={0: cm.Member(host="h", port=1, attempt=0, registered=0),
                               1: cm.Member(host="g", port=2, attempt=3, registered=5)}),
    cm.View(number=1, members={0: cm.Member(host="h", port=1, attempt=0, registered=0)},
            ring=(1, 0), table=np.array([[0, 1, -2], [1, 0, -2]], np.int32)),
    cm.Standby(),
    Keepalive(),
    Probe(12.5),
    Echo(0.25),
    cm.Adopt(slot=1, members={0: cm.Member(host="h", port=1, attempt=0, registered=0)},
             dead=(2, 3), epochs=np.zeros((4, 2), np.int64), table=np.arange(8).reshape(4, 2)),
    cm.Avail(slot=1, epoch=2, host="h", port=9, attempt=1, registered=4),
    cm.Fail(dead=(1,)),
    cm.Move(q=3, r=1, dst=2, epoch=8, survivor=2),
    cm.Slow(factor=0.5),
    cm.Squeeze(budget=64 << 20),
    Tentative(2, 3, BATCH, 1 << 52, 40),
    Tentative(1, 3, None, 1 << 52, -1),
    Reconciled(3),
    Rejoined(1, p=i32(3), r=i8(0), q=i32(4), c=i8(1)),
    cm.Kill(),
    cm.Stop(reason="run finished", excluded=True),
]


@pytest.mark.parametrize("msg", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_field_survives(msg: Any) -> None:
    assert same(msg, roundtrip(msg))


def _records(value: Any) -> set[type]:
    """The types of ``value`` and of every registered record inside it."""
    if dataclasses.is_dataclass(value):
        return {type(value)}.union(*(_records(getattr(value, f.name))
                                     for f in dataclasses.fields(value)))
    if isinstance(value, dict):
        return set().union(*map(_records, value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*map(_records, value))
    return set()


def test_every_registered_record_has_an_example() -> None:
    assert set().union(*map(_records, EXAMPLES)) >= set(REGISTRY)


def test_the_snapshot_survives_as_its_records() -> None:
    """The new replica installs what the survivor took: typed records, field for field (the
    operators' state stays what ``get_partition_state`` returned, lists for tuples)."""
    snap = roundtrip(State(1, 4, 0, SNAPSHOT, 5)).snapshot  # type: ignore[attr-defined]
    assert type(snap) is PartitionSnapshot and type(snap.cons) is ConsumerSnapshot
    assert type(snap.ops) is tuple and type(snap.cons.pending) is pa.RecordBatch
    assert snap.cons.progress_sn.dtype == np.int64 and snap.cons.progress_sn.tolist() == [3, 4]
    assert (snap.out_sn, snap.out_wm, snap.cons.released_sn) == (12, 40, 2)
    assert snap.cons.seen.tolist() == [[1, 9, 0, 0], [0, 7, 3, 1]]  # keys of an input out
    assert snap.cons.seen.dtype == np.int64                          # of order (race)


def _msg_frame(items: Any, buffers: list[bytes] = ()) -> bytes:  # type: ignore[assignment]
    body = msgpack.packb(items, use_bin_type=True)
    sizes = np.array([len(body), *(len(b) for b in buffers)], dtype="<u8")
    return struct.pack("<I", len(buffers)) + sizes.tobytes() + body + b"".join(buffers)


class _Boom:
    def __reduce__(self) -> tuple:
        return (os.system, ("touch /tmp/sparkflux-pwned",))


@pytest.mark.parametrize("body", [
    b"",
    os.urandom(64),
    pickle.dumps(_Boom()),  # what the old wire would have executed
    _msg_frame([999, 1]),  # unknown tag
    _msg_frame([1, 1, 2]),  # CuStart with too few fields
    _msg_frame([1, "x", 2, 3, 4, True]),  # a string where an int belongs
    _msg_frame([1, 1, 2, 3, 4, msgpack.ExtType(1, msgpack.packb(["|O", [1], 0]))],
               [b"\0" * 8]),  # an object array
    _msg_frame([1, 1, 2, 3, 4, msgpack.ExtType(9, b"")]),  # unknown extension
    _msg_frame([1, 1, 2, 3, 4, 5], [b"trailing"]),  # sizes that do not add up
], ids=["empty", "random", "pickle", "tag", "arity", "type", "object-array", "ext", "sizes"])
def test_a_malformed_message_is_a_frame_error(body: bytes) -> None:
    if os.path.exists("/tmp/sparkflux-pwned"):
        os.unlink("/tmp/sparkflux-pwned")
    with pytest.raises(FrameError):
        decode(MSG, body, {})
    assert not os.path.exists("/tmp/sparkflux-pwned")


@pytest.mark.parametrize("kind,body", [
    (1, struct.pack("<hii", 7, 0, 0)),  # data for a stage that does not exist
    (1, struct.pack("<hii", 3, 1000, 0)),  # more stream entries than bytes
    (1, struct.pack("<hii", 3, 0, 5) + b"\0" * 16),  # rows that are not Arrow IPC
    (3, struct.pack("<hi", 3, -1)),  # a negative count
    (4, struct.pack("<hi", 3, 2) + b"\0" * 10),  # short arrays
    (99, b"x"),  # unknown kind
])
def test_a_malformed_binary_frame_is_a_frame_error(kind: int, body: bytes) -> None:
    with pytest.raises(FrameError):
        decode(kind, body, {3: SCHEMA})


def test_state_that_needs_pickle_is_refused_on_the_sending_site() -> None:
    with pytest.raises(EncodeError, match="plain values"):
        encode(State(1, 0, 0, dataclasses.replace(SNAPSHOT, ops=(object(),))))
    with pytest.raises(EncodeError, match="dtype object"):
        encode(State(1, 0, 0, dataclasses.replace(
            SNAPSHOT, ops=(np.array(["a", None], dtype=object),))))


def _wrong(snap: Any = SNAPSHOT, **cons: Any) -> State:
    """A ``State`` whose snapshot (or its FH-Cons part, given ``cons``) holds a value of the
    wrong type: the dataclasses do not check on construction, the decoder must."""
    if cons:
        snap = dataclasses.replace(SNAPSHOT, cons=dataclasses.replace(CONS, **cons))
    return State(1, 4, 0, snap, 5)


@pytest.mark.parametrize("msg", [
    State(1, 4, 0, {"cons": {}, "ops": [], "out_sn": 1, "out_wm": 2}, 5),  # the old dict
    _wrong(dataclasses.replace(SNAPSHOT, cons={"released_sn": 2})),  # a map, not the record
    _wrong(dataclasses.replace(SNAPSHOT, cons=CuDone(0, 2, 1, 123, 0.25))),  # another record
    _wrong(dataclasses.replace(SNAPSHOT, ops={"a": 1})),  # a map where the list belongs
    _wrong(dataclasses.replace(SNAPSHOT, out_sn=12.0)),  # a float where an int belongs
    _wrong(dataclasses.replace(SNAPSHOT, out_wm=True)),  # a bool where an int belongs
    _wrong(progress_sn=[3, 4]),  # a list where an array belongs
    _wrong(released_wm="-1"),
    _wrong(pending=TABLE),  # a table where a record batch belongs
    _wrong(pending=i64(1, 2)),
], ids=["dict", "cons-map", "cons-record", "ops-map", "out-sn", "out-wm", "progress-list",
        "released-str", "pending-table", "pending-array"])
def test_a_snapshot_with_a_wrong_field_type_is_a_frame_error(msg: State) -> None:
    raw = b"".join(bytes(p) for p in encode(msg))  # the encoder writes what it is given
    with pytest.raises(FrameError, match="PartitionSnapshot|ConsumerSnapshot|State"):
        decode(MSG, raw[FRAME_HEADER.size:], {})


@pytest.mark.parametrize("part", [SNAPSHOT, CONS, cm.Member(host="h", port=1, attempt=0,
                                                             registered=0)],
                         ids=lambda p: type(p).__name__)
def test_a_record_that_travels_inside_a_message_is_no_message(
        part: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert type(part) in PARTS
    with pytest.raises(EncodeError, match="not a registered wire message"):
        encode(part)
    monkeypatch.setattr(codec, "PARTS", frozenset())  # a sender that writes one anyway
    raw = b"".join(bytes(p) for p in encode(part))
    monkeypatch.undo()
    with pytest.raises(FrameError, match="travels inside a message"):
        decode(MSG, raw[FRAME_HEADER.size:], {})
