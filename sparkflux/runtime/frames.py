"""The wire format of a connection between two sites (or a site and the driver).

Every frame is ``u32 length | u8 kind | body``, and every body has a schema: nothing received
is unpickled or executed (docs/design.md §7), and a body that does not parse is a protocol error
that closes the connection (``FrameError``).

- ``DATA``: ``i16 stage | i32 streams | i32 rows``, the stream entries as packed arrays
  (p i32, r i8, q i32, sn i64, wm i64), then the rows in Arrow IPC form *without* their schema
  (both ends know the stage's wire schema from the plan).
- ``ACK``: ``i16 stage | i32 n`` then p i32, q i32, c i8, upto i64 arrays.
- ``REVERSE``: ``i16 stage | i32 n`` then p i32, r i8, q i32, c i8, floor i64 arrays.
- ``MSG``: one typed message (``runtime/codec.py``): the control plane's orders and reports
  (``protocol/control_messages.py``) and the catch-up messages (``cu-start``, retain, the
  moved state, ``csync``/rejoin, ``psync``, ``cu-done``); a partition's moved state travels as
  one such frame, its arrays and Arrow tables out of band.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.protocol.messages import Ack, Data, Reverse, Streams
from sparkflux.runtime.codec import DecodeError, aligned, decode_message, encode_message

DATA = 1
ACK = 3
REVERSE = 4
MSG = 6
KINDS = (DATA, ACK, REVERSE, MSG)

FRAME_HEADER = struct.Struct("<IB")
DATA_HEADER = struct.Struct("<hii")
ACK_HEADER = struct.Struct("<hi")
REVERSE_HEADER = struct.Struct("<hi")

_STREAM_TYPES = (np.int32, np.int8, np.int32, np.int64, np.int64)
_ACK_TYPES = (np.int32, np.int32, np.int8, np.int64)
_REVERSE_TYPES = (np.int32, np.int8, np.int32, np.int8, np.int64)


class FrameError(ValueError):
    """A frame that does not parse: the peer is broken or hostile; its connection closes."""


def frame_size(pieces: list[Any]) -> int:
    return sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in pieces)


def _frame(kind: int, pieces: list[Any]) -> list[Any]:
    return [FRAME_HEADER.pack(1 + frame_size(pieces), kind), *pieces]


def encode(msg: Any) -> list[Any]:
    """The pieces of one frame for ``writelines`` (no copy of the batch buffers)."""
    if isinstance(msg, Data):
        st = msg.streams
        rows = 0 if msg.batch is None else msg.batch.num_rows
        arrays = [np.ascontiguousarray(a, dtype=t).tobytes() for a, t in
                  zip((st.p, st.r, st.q, st.sn, st.wm), _STREAM_TYPES, strict=True)]
        pieces: list[Any] = [DATA_HEADER.pack(msg.stage, len(st), rows), *arrays]
        if msg.batch is not None and rows:  # (rows is 0 without a batch)
            # the batch starts 8-aligned in the body: Arrow's kernels want aligned buffers
            pieces.append(bytes(-sum(len(b) for b in pieces) % 8))
            pieces.append(memoryview(msg.batch.serialize()))
        return _frame(DATA, pieces)
    if isinstance(msg, Ack):
        arrays = [np.ascontiguousarray(a, dtype=t).tobytes() for a, t in
                  zip((msg.p, msg.q, msg.c, msg.upto), _ACK_TYPES, strict=True)]
        return _frame(ACK, [ACK_HEADER.pack(msg.stage, int(msg.p.size)), *arrays])
    if isinstance(msg, Reverse):
        arrays = [np.ascontiguousarray(a, dtype=t).tobytes() for a, t in
                  zip((msg.p, msg.r, msg.q, msg.c, msg.floor), _REVERSE_TYPES, strict=True)]
        return _frame(REVERSE, [REVERSE_HEADER.pack(msg.stage, int(msg.p.size)), *arrays])
    return _frame(MSG, encode_message(msg))


def _arrays(body: memoryview, offset: int, n: int, types: tuple[type[np.generic], ...]
            ) -> tuple[list[np.ndarray], int]:
    if n < 0 or offset + n * sum(np.dtype(t).itemsize for t in types) > body.nbytes:
        raise FrameError(f"{n} entries do not fit in a frame of {body.nbytes} bytes")
    out = []
    for t in types:
        size = n * np.dtype(t).itemsize
        out.append(np.frombuffer(body, dtype=t, count=n, offset=offset).copy())
        offset += size
    return out, offset


def decode(kind: int, body: bytes | memoryview, schema_of: dict[int, pa.Schema]) -> Any:
    """The message in one frame's body; FrameError if it does not parse."""
    view = memoryview(body)
    try:
        if kind == DATA:
            stage, n, rows = DATA_HEADER.unpack_from(view, 0)
            if stage not in schema_of:
                raise FrameError(f"data for unknown stage {stage}")
            (p, r, q, sn, wm), off = _arrays(view, DATA_HEADER.size, n, _STREAM_TYPES)
            batch = None
            if rows:
                off += -off % 8  # the padding that aligns the batch in an aligned body
                batch = pa.ipc.read_record_batch(aligned(pa.py_buffer(view[off:])),
                                                 schema_of[stage])
                if batch.num_rows != rows:
                    raise FrameError(f"data frame says {rows} rows, holds {batch.num_rows}")
            elif off != view.nbytes:
                raise FrameError("trailing bytes after an empty data frame")
            return Data(stage, Streams(p, r, q, sn, wm), batch)
        if kind == ACK:
            stage, n = ACK_HEADER.unpack_from(view, 0)
            (p, q, c, upto), off = _arrays(view, ACK_HEADER.size, n, _ACK_TYPES)
            if off != view.nbytes:
                raise FrameError("trailing bytes after an acknowledgement")
            return Ack(stage, p, q, c, upto)
        if kind == REVERSE:
            stage, n = REVERSE_HEADER.unpack_from(view, 0)
            (p, r, q, c, floor), off = _arrays(view, REVERSE_HEADER.size, n, _REVERSE_TYPES)
            if off != view.nbytes:
                raise FrameError("trailing bytes after a reverse")
            return Reverse(stage, p, r, q, c, floor)
        if kind == MSG:
            return decode_message(view)
    except FrameError:
        raise
    except (struct.error, pa.ArrowException, DecodeError, EOFError, ValueError) as e:
        raise FrameError(f"malformed frame of kind {kind}: {e}") from e
    raise FrameError(f"unknown frame kind {kind}")
