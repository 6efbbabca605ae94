"""The wire format of the one multiplexed connection between two sites (or a site and the driver).

Every frame is ``u32 length | u8 kind | body``. Data, acknowledgements, ``reverse`` and control
share the connection so that they stay in FIFO order (DESIGN.md §4): an acknowledgement sent
before a ``reverse`` arrives before it; the driver's ``fail`` follows the ingress data it sent.

- ``DATA``: ``i16 stage | i32 streams | i32 rows``, the stream entries as packed arrays
  (p i32, r i8, q i32, sn i64, wm i64), then the rows in Arrow IPC form *without* their schema
  (both ends know the stage's wire schema from the plan).
- ``ACK``: ``i16 stage | i32 n`` then p i32, q i32, c i8, upto i64 arrays.
- ``REVERSE``: ``i16 stage | i32 n`` then p i32, r i8, q i32, c i8, floor i64 arrays.
- ``CONTROL``: a pickled ``dict`` (small, rare: registration, views, fail, stop).
- ``PROTO``: a pickled catch-up message (``cu-start``, retain, the moved state, rejoin,
  ``psync``, ``cu-done``); the state of a partition travels as one such frame.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.protocol.messages import Ack, Data, Message, Reverse, Streams

DATA = 1
CONTROL = 2
ACK = 3
REVERSE = 4
PROTO = 5  # rare protocol messages (catch-up), pickled: CuStart, Retain, State, Rejoin, ...
KINDS = (DATA, CONTROL, ACK, REVERSE, PROTO)

FRAME_HEADER = struct.Struct("<IB")
DATA_HEADER = struct.Struct("<hii")
ACK_HEADER = struct.Struct("<hi")
REVERSE_HEADER = struct.Struct("<hi")

_STREAM_TYPES = (np.int32, np.int8, np.int32, np.int64, np.int64)
_ACK_TYPES = (np.int32, np.int32, np.int8, np.int64)
_REVERSE_TYPES = (np.int32, np.int8, np.int32, np.int8, np.int64)


def _frame(kind: int, pieces: list[Any]) -> list[Any]:
    size = 1 + sum(len(p) if not isinstance(p, memoryview) else p.nbytes for p in pieces)
    return [FRAME_HEADER.pack(size, kind), *pieces]


def encode(msg: Message) -> list[Any]:
    """The pieces of one frame for ``writelines`` (no copy of the batch buffers)."""
    if isinstance(msg, Data):
        st = msg.streams
        rows = 0 if msg.batch is None else msg.batch.num_rows
        arrays = [np.ascontiguousarray(a, dtype=t).tobytes() for a, t in
                  zip((st.p, st.r, st.q, st.sn, st.wm), _STREAM_TYPES, strict=True)]
        pieces: list[Any] = [DATA_HEADER.pack(msg.stage, len(st), rows), *arrays]
        if rows:
            pieces.append(memoryview(msg.batch.serialize()))  # type: ignore[union-attr]
        return _frame(DATA, pieces)
    if isinstance(msg, Ack):
        arrays = [np.ascontiguousarray(a, dtype=t).tobytes() for a, t in
                  zip((msg.p, msg.q, msg.c, msg.upto), _ACK_TYPES, strict=True)]
        return _frame(ACK, [ACK_HEADER.pack(msg.stage, int(msg.p.size)), *arrays])
    if isinstance(msg, Reverse):
        arrays = [np.ascontiguousarray(a, dtype=t).tobytes() for a, t in
                  zip((msg.p, msg.r, msg.q, msg.c, msg.floor), _REVERSE_TYPES, strict=True)]
        return _frame(REVERSE, [REVERSE_HEADER.pack(msg.stage, int(msg.p.size)), *arrays])
    # Pickle 5 with out-of-band buffers: a moved partition's Arrow buffers go to the socket
    # as they are, never copied into the pickle (layout: u32 n | u64 sizes[n] | pickle | bufs).
    buffers: list[pickle.PickleBuffer] = []
    body = pickle.dumps(msg, protocol=5, buffer_callback=buffers.append)
    views = [b.raw() for b in buffers]
    sizes = np.array([len(body), *(v.nbytes for v in views)], dtype="<u8")
    head = struct.pack("<I", len(views)) + sizes.tobytes()
    return _frame(PROTO, [head, body, *views])


def encode_control(message: dict[str, Any]) -> list[bytes]:
    return _frame(CONTROL, [pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)])


def _arrays(body: memoryview, offset: int, n: int, types: tuple) -> tuple[list[np.ndarray], int]:
    out = []
    for t in types:
        size = n * np.dtype(t).itemsize
        out.append(np.frombuffer(body, dtype=t, count=n, offset=offset).copy())
        offset += size
    return out, offset


def decode(kind: int, body: bytes, schema_of: dict[int, pa.Schema]) -> Message | dict[str, Any]:
    view = memoryview(body)
    if kind == DATA:
        stage, n, rows = DATA_HEADER.unpack_from(view, 0)
        (p, r, q, sn, wm), off = _arrays(view, DATA_HEADER.size, n, _STREAM_TYPES)
        batch = None
        if rows:
            batch = pa.ipc.read_record_batch(pa.py_buffer(view[off:]), schema_of[stage])
        return Data(stage, Streams(p, r, q, sn, wm), batch)
    if kind == ACK:
        stage, n = ACK_HEADER.unpack_from(view, 0)
        (p, q, c, upto), _ = _arrays(view, ACK_HEADER.size, n, _ACK_TYPES)
        return Ack(stage, p, q, c, upto)
    if kind == REVERSE:
        stage, n = REVERSE_HEADER.unpack_from(view, 0)
        (p, r, q, c, floor), _ = _arrays(view, REVERSE_HEADER.size, n, _REVERSE_TYPES)
        return Reverse(stage, p, r, q, c, floor)
    if kind == PROTO:
        (n,) = struct.unpack_from("<I", view, 0)
        sizes = np.frombuffer(view, dtype="<u8", count=n + 1, offset=4)
        off = 4 + 8 * (n + 1)
        body = view[off : off + int(sizes[0])]
        off += int(sizes[0])
        bufs = []
        for size in sizes[1:]:
            bufs.append(view[off : off + int(size)])
            off += int(size)
        return pickle.loads(body, buffers=bufs)
    if kind == CONTROL:
        return pickle.loads(view)
    raise ValueError(f"unknown frame kind {kind}")
