"""The wire format of the one multiplexed connection between two sites (or a site and the driver).

Every frame is ``u32 length | u8 kind | body``. Data and control share the connection so that
they stay in FIFO order (DESIGN.md §4: ``pause-ack`` after the last in-flight tuple, ``psync``
on the data channel).

- ``DATA``: ``i16 stage | i32 producer | i64 progress.sn | i64 progress.wm | i32 rows`` then,
  when ``rows > 0``, the record batch in Arrow IPC form *without* its schema (both ends know
  the stage's schema from the plan), so a frame costs a few dozen bytes over its data.
- ``CONTROL``: a pickled ``dict`` (small, rare: registration, views, stop, statistics).
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkflux.model.progress import Progress

DATA = 1
CONTROL = 2

FRAME_HEADER = struct.Struct("<IB")
DATA_HEADER = struct.Struct("<hiqqi")
MAX_FRAME = 1 << 31


@dataclass(frozen=True, slots=True)
class DataFrame:
    """A decoded DATA frame: rows (maybe none) of one stage from one producer, and progress."""

    stage: int
    producer: int
    progress: Progress
    batch: pa.RecordBatch | None


def encode_data(
    stage: int, producer: int, progress: Progress, batch: pa.RecordBatch | None
) -> list[bytes | memoryview]:
    """The pieces of a DATA frame, ready for ``writelines`` (no copy of the batch buffers)."""
    rows = 0 if batch is None else batch.num_rows
    body: pa.Buffer | None = batch.serialize() if rows else None
    head = DATA_HEADER.pack(stage, producer, progress.sn, progress.wm, rows)
    size = 1 + len(head) + (body.size if body is not None else 0)
    pieces: list[bytes | memoryview] = [FRAME_HEADER.pack(size, DATA), head]
    if body is not None:
        pieces.append(memoryview(body))
    return pieces


def decode_data(body: bytes | memoryview, schema_of: dict[int, pa.Schema]) -> DataFrame:
    stage, producer, sn, wm, rows = DATA_HEADER.unpack_from(body, 0)
    batch = None
    if rows:
        buf = pa.py_buffer(memoryview(body)[DATA_HEADER.size :])
        batch = pa.ipc.read_record_batch(buf, schema_of[stage])
    return DataFrame(stage, producer, Progress(sn, wm), batch)


def encode_control(message: dict[str, Any]) -> list[bytes]:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return [FRAME_HEADER.pack(1 + len(body), CONTROL), body]


def decode_control(body: bytes | memoryview) -> dict[str, Any]:
    return pickle.loads(body)
