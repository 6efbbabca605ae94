"""Key codes and hash partitioning, identical in every process.

``key_codes`` maps the values of some columns to 64-bit codes with pandas' stable hashing (a
fixed-key SipHash for strings, a fixed mixer for numbers), so the driver's ingress and every
site route a key to the same mini-partition. ``exact_codes`` is the injective variant used by
operators for group state when the key columns allow it (integers that pack into 64 bits).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa

_MIX = np.uint64(0x9E3779B97F4A7C15)


def _column_numpy(col: pa.Array | pa.ChunkedArray) -> np.ndarray:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type):
        values: np.ndarray = col.to_numpy(zero_copy_only=False)
        return values
    if pa.types.is_boolean(col.type):
        flags: npt.NDArray[np.bool_] = col.to_numpy(zero_copy_only=False)
        return flags.astype(np.uint8)
    return np.asarray(col.to_pylist(), dtype=object)


def key_codes(batch: pa.RecordBatch | pa.Table, columns: Sequence[str]) -> npt.NDArray[np.uint64]:
    """A uint64 hash code per row of the given key columns (stable across processes)."""
    if not columns:
        raise ValueError("key_codes needs at least one column")
    acc: npt.NDArray[np.uint64] | None = None
    for name in columns:
        h = pd.util.hash_array(_column_numpy(batch.column(name)), categorize=False)
        acc = h if acc is None else (acc * _MIX) ^ h
    assert acc is not None
    return acc


def partition_of(
    batch: pa.RecordBatch | pa.Table, columns: Sequence[str], partitions: int
) -> npt.NDArray[np.int32]:
    """The mini-partition (0..partitions-1) of every row: hash of the key columns mod P;
    with no key columns, 0 for every row (``exchange(by=[])``: one partition)."""
    if not columns:
        return np.zeros(batch.num_rows, dtype=np.int32)
    return (key_codes(batch, columns) % np.uint64(partitions)).astype(np.int32)


def exact_codes(batch: pa.RecordBatch | pa.Table, columns: Sequence[str]
                ) -> npt.NDArray[np.int64] | None:
    """An injective int64 code per row when the key columns' integer types fit in 64 bits.

    The choice depends only on the column types (e.g. one int64, or two int32), never on the
    values, so every batch of a stream is encoded the same way. Returns None otherwise
    (strings, two int64 columns); the caller then falls back to hashed codes with verification.
    """
    if not columns:
        return None
    cols = [batch.column(name) for name in columns]
    if not all(pa.types.is_integer(c.type) for c in cols):
        return None
    widths = [c.type.bit_width for c in cols]
    if sum(widths) > 64:
        return None
    if len(cols) == 1:
        return _column_numpy(cols[0]).astype(np.int64)
    code = np.zeros(len(batch), dtype=np.uint64)
    for col, bits in zip(cols, widths, strict=True):
        raw = _column_numpy(col).astype(np.int64).astype(np.uint64) & np.uint64((1 << bits) - 1)
        code = (code << np.uint64(bits)) | raw
    return code.view(np.int64)
