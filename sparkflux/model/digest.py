"""The canonical output digest shared by the egress and the Spark SQL reference.

``output_digest`` is a sha256 over the ordered output rows with the timing columns
(``_t0``, ``_part``) excluded. It is independent of how the rows are split into batches: each
column keeps its own sha256 over a canonical encoding (integers and booleans as int64, floats
as float64 with -0.0 normalised, strings as their lengths and UTF-8 bytes), fed batch by batch
in row order; the digest combines the column names, the row count and the column hashes.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.model.schema import TIMING_COLUMNS


class Digest:
    """Incremental, batch-boundary-independent digest of an ordered stream of rows."""

    def __init__(self) -> None:
        self._columns: list[str] | None = None
        self._hashers: dict[str, list[hashlib._Hash]] = {}
        self.rows = 0

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        names = [n for n in batch.schema.names if n not in TIMING_COLUMNS]
        if self._columns is None:
            self._columns = names
            self._hashers = {n: [hashlib.sha256(), hashlib.sha256()] for n in names}
        elif names != self._columns:
            raise ValueError(f"digest columns changed from {self._columns} to {names}")
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        for name in names:
            col = batch.column(name)
            if isinstance(col, pa.ChunkedArray):
                col = col.combine_chunks()
            _feed(self._hashers[name], col)

    def hexdigest(self) -> str:
        top = hashlib.sha256()
        top.update(repr((self._columns or [], self.rows)).encode())
        for name in self._columns or []:
            for h in self._hashers[name]:
                top.update(h.digest())
        return top.hexdigest()


def _feed(hashers: list[hashlib._Hash], col: pa.Array) -> None:
    t = col.type
    if col.null_count:
        hashers[1].update(np.asarray(col.is_null().to_numpy(zero_copy_only=False)).tobytes())
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t):
        vals = pc.cast(col, pa.int64(), safe=False).fill_null(0).to_numpy(zero_copy_only=False)
        hashers[0].update(np.ascontiguousarray(vals, dtype="<i8").tobytes())
    elif pa.types.is_floating(t):
        vals = pc.cast(col, pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
        vals = np.where(vals == 0.0, 0.0, vals)
        hashers[0].update(np.ascontiguousarray(vals, dtype="<f8").tobytes())
    elif pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        col = pc.cast(col, pa.large_binary()).fill_null(b"")
        lengths = pc.binary_length(col).to_numpy(zero_copy_only=False).astype("<i8")
        hashers[1].update(lengths.tobytes())
        offsets = np.frombuffer(col.buffers()[1], dtype=np.int64)
        start, end = offsets[col.offset], offsets[col.offset + len(col)]
        hashers[0].update(memoryview(col.buffers()[2])[start:end])
    else:
        raise TypeError(f"no canonical digest encoding for column type {t}")


def digest_of(batches: list[pa.RecordBatch] | pa.Table) -> str:
    """The digest of a whole ordered table or list of batches."""
    d = Digest()
    if isinstance(batches, pa.Table):
        for b in batches.to_batches():
            d.update(b)
    else:
        for b in batches:
            d.update(b)
    return d.hexdigest()
