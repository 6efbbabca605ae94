"""The canonical output digest shared by the egress and the Spark SQL reference.

``output_digest`` is a sha256 over the ordered output rows with the timing columns
(``_t0``, ``_part``) excluded. It is independent of how the rows are split into batches: each
column keeps its own sha256 over a canonical encoding (integers and booleans as int64, floats
as float64 with -0.0 normalised, strings as their lengths and UTF-8 bytes), fed batch by batch
in row order; the digest combines the column names, the row count and the column hashes. A
column's null mask has a hash of its own, fed for every batch, which enters the digest only
when the column held a null (so the digests of null-free outputs are those of earlier builds).

The canonical encoding (``canonical_ints``, ``canonical_floats``, ``is_bytes``) is shared with
the order-independent rows digest (``sparkflux.model.rows_digest``).
"""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.model.schema import TIMING_COLUMNS


class Digest:
    """Incremental, batch-boundary-independent digest of an ordered stream of rows."""

    def __init__(self) -> None:
        self._columns: list[str] | None = None
        # per column: [values, lengths (strings)], then its null mask's hash and whether a
        # null was seen
        self._hashers: dict[str, list[hashlib._Hash]] = {}
        self._nulls: dict[str, hashlib._Hash] = {}
        self._had_null: dict[str, bool] = {}
        self.rows = 0

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        names = [n for n in batch.schema.names if n not in TIMING_COLUMNS]
        if self._columns is None:
            self._columns = names
            self._hashers = {n: [hashlib.sha256(), hashlib.sha256()] for n in names}
            self._nulls = {n: hashlib.sha256() for n in names}
            self._had_null = dict.fromkeys(names, False)
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
            self._had_null[name] |= col.null_count > 0
            self._nulls[name].update(_null_mask(col).tobytes())

    def hexdigest(self) -> str:
        top = hashlib.sha256()
        top.update(repr((self._columns or [], self.rows)).encode())
        for name in self._columns or []:
            for h in self._hashers[name]:
                top.update(h.digest())
            if self._had_null[name]:
                top.update(self._nulls[name].digest())
        return top.hexdigest()


def is_bytes(t: pa.DataType) -> bool:
    """Whether values of type ``t`` are encoded as their bytes (strings and binaries)."""
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
                or pa.types.is_large_binary(t))


def is_integral(t: pa.DataType) -> bool:
    """Whether values of type ``t`` are encoded as int64 (integers, booleans, times)."""
    return bool(pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_temporal(t))


def canonical_ints(col: pa.Array) -> npt.NDArray[np.int64]:
    """An integer, boolean or temporal column as int64 values, nulls as 0."""
    vals = pc.cast(col, pa.int64(), safe=False).fill_null(0).to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(vals, dtype="<i8")


def canonical_floats(col: pa.Array) -> npt.NDArray[np.float64]:
    """A floating column as float64 values, nulls as 0.0 and -0.0 as 0.0."""
    vals = pc.cast(col, pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(np.where(vals == 0.0, 0.0, vals), dtype="<f8")


def _null_mask(col: pa.Array) -> npt.NDArray[np.bool_]:
    if not col.null_count:
        return np.zeros(len(col), dtype=bool)
    return np.asarray(col.is_null().to_numpy(zero_copy_only=False))


def _feed(hashers: list[hashlib._Hash], col: pa.Array) -> None:
    t = col.type
    if is_integral(t):
        hashers[0].update(canonical_ints(col).tobytes())
    elif pa.types.is_floating(t):
        hashers[0].update(canonical_floats(col).tobytes())
    elif is_bytes(t):
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
