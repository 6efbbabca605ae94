"""The wire format: every message survives encode -> decode unchanged."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkflux.protocol.messages import (
    Ack,
    CuDone,
    Data,
    Rejoin,
    Reverse,
    State,
    Streams,
)
from sparkflux.runtime.frames import FRAME_HEADER, decode, encode, encode_control

SCHEMA = pa.schema([("v", pa.int64()), ("_src", pa.int32())])


def roundtrip(msg: object) -> object:
    pieces = encode(msg)  # type: ignore[arg-type]
    raw = b"".join(bytes(p) for p in pieces)
    size, kind = FRAME_HEADER.unpack_from(raw, 0)
    assert size == len(raw) - 4
    return decode(kind, raw[FRAME_HEADER.size:], {3: SCHEMA})


def test_data_ack_reverse_roundtrip() -> None:
    st = Streams(p=np.array([1, 2], np.int32), r=np.array([0, 1], np.int8),
                 q=np.array([5, 5], np.int32), sn=np.array([10, 20]), wm=np.array([-1, 7]))
    batch = pa.RecordBatch.from_pydict({"v": [1, 2, 3], "_src": [1, 1, 2]}, schema=SCHEMA)
    d = roundtrip(Data(3, st, batch))
    assert isinstance(d, Data) and d.batch is not None and d.batch.equals(batch)
    assert d.streams.q.tolist() == [5, 5] and d.streams.wm.tolist() == [-1, 7]
    a = roundtrip(Ack(3, p=np.array([1], np.int32), q=np.array([4], np.int32),
                      c=np.array([1], np.int8), upto=np.array([99])))
    assert isinstance(a, Ack) and a.upto.tolist() == [99] and a.c.tolist() == [1]
    r = roundtrip(Reverse(3, p=np.array([2], np.int32), r=np.array([1], np.int8),
                          q=np.array([0], np.int32), c=np.array([0], np.int8),
                          floor=np.array([41])))
    assert isinstance(r, Reverse) and r.floor.tolist() == [41] and r.r.tolist() == [1]


def test_catch_up_messages_roundtrip() -> None:
    snap = {"ops": [{"k": np.arange(3)}], "cons": {"pending": None}}
    s = roundtrip(State(1, 4, 0, snap))
    assert isinstance(s, State) and s.q == 4 and s.snapshot["ops"][0]["k"].tolist() == [0, 1, 2]
    j = roundtrip(Rejoin(1, p=np.array([3], np.int32), r=np.array([0], np.int8),
                         q=np.array([4], np.int32), c=np.array([1], np.int8),
                         floor=np.array([7]), send=np.array([True]), wait=np.array([False])))
    assert isinstance(j, Rejoin) and j.send.tolist() == [True]
    assert roundtrip(CuDone(0, 2, 1, 123)) == CuDone(0, 2, 1, 123)


def test_control_frames() -> None:
    raw = b"".join(encode_control({"type": "hb", "site": 2}))
    size, kind = FRAME_HEADER.unpack_from(raw, 0)
    assert decode(kind, raw[FRAME_HEADER.size:], {}) == {"type": "hb", "site": 2}
