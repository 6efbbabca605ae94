"""The rows digest: an order-independent digest of the multiset of output rows.

``rows_digest`` compares an output with a reference that does not number its rows the way the
engine does: it covers the user columns only (``_sn``, ``_snm``, ``_t0`` and ``_part`` are
left out) and does not depend on the order of the rows, nor on how they are split into
batches, nor on the order of the columns. Equal multisets of rows give equal digests; a
changed value, a dropped row or a duplicated row changes it.

Rules:

- Every value gets a 64-bit canonical word, from the encoding of ``output_digest``
  (``sparkflux.model.digest``): integers, booleans and times as int64; floats as float64 with
  -0.0 as 0.0, every NaN as one NaN, then *rounded* (below); strings and binaries as the
  SipHash-2-4 (pandas' fixed key) of their bytes. A null is marked apart from every value.
- Floats are rounded to ``FLOAT_BITS`` = 30 fraction bits (31 significant bits, about 9.3
  significant decimal digits), to nearest, ties away from zero, by bit arithmetic on the
  float64 itself (exact and the same on every machine, unlike decimal rounding). Why: an
  aggregate such as ``avg`` over floats depends on the order of its additions, which differs
  between the engine's partial sums and Spark's, by a few units in the last place (relative
  1e-16 per addition). Nine digits leave six to seven digits for such differences and still
  show any semantic error (a wrong window changes an average far more). The price: two values
  a unit apart that straddle a rounding boundary round apart (for a difference d, with
  probability about d / 2^-30 relative), so ``sparkflux run --check`` falls back to comparing
  the differing rows with a relative tolerance of ``FLOAT_RTOL`` (``sparkflux.model.compare``).
- A row's hash is two 64-bit lanes: each column's word is mixed with a seed derived from
  the column name (splitmix64), the lanes sum the columns' mixed words with different odd
  multipliers, and the null marks, then mix again. The digest is a sha256 over the sorted
  column names, the row count and each lane's sum over all rows modulo 2^64: sums commute,
  so the order of the rows does not matter and an update is a vectorized sum.

A different multiset collides only by a 64-bit coincidence (two strings with equal SipHash,
or the lanes' sums cancelling), which the row count and the 128 bits of the sums make
negligible for checking; it is not a defence against a chosen collision.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.model.digest import canonical_floats, canonical_ints, is_bytes, is_integral
from sparkflux.model.schema import SYSTEM_COLUMNS

FLOAT_BITS = 30  # fraction bits a float keeps in the rows digest (of float64's 52)
FLOAT_RTOL = 1e-9  # above the rounding's relative step 2^-30: equal words imply this close
LANES = 2

_DROP = 52 - FLOAT_BITS
_HALF = np.uint64(1 << (_DROP - 1))
_KEEP = np.uint64(~((1 << _DROP) - 1) & 0xFFFF_FFFF_FFFF_FFFF)
_NAN = np.uint64(0x7FF8_0000_0000_0000)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_MASK64 = (1 << 64) - 1


def user_columns(names: Iterable[str]) -> list[str]:
    """The columns a rows digest covers: all but the system columns."""
    return [n for n in names if n not in SYSTEM_COLUMNS]


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The splitmix64 finaliser, elementwise on uint64 (a bijection)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


def _constants(name: str) -> npt.NDArray[np.uint64]:
    """Per column: a seed, a null mark and one odd multiplier per lane, from its name."""
    raw = hashlib.sha256(f"sparkflux rows digest column {name}".encode()).digest()
    words = np.frombuffer(raw, dtype="<u8").copy()
    words[2:] |= np.uint64(1)
    return words


def round_floats(values: npt.NDArray[np.float64]) -> npt.NDArray[np.uint64]:
    """float64 ``values`` (-0.0 already 0.0) as the uint64 bits of their rounded values."""
    bits = np.where(np.isnan(values), _NAN, values.view(np.uint64))
    return (bits + _HALF) & _KEEP


def _string_words(col: pa.Array) -> npt.NDArray[np.uint64]:
    """SipHash of each value's bytes (hashed once per distinct value), nulls as 0."""
    encoded = pc.dictionary_encode(col.fill_null(b"" if _is_binary(col.type) else ""))
    uniques = encoded.dictionary.to_numpy(zero_copy_only=False).astype(object)
    hashes = pd.util.hash_array(uniques, categorize=False) if len(uniques) else uniques
    words: npt.NDArray[np.uint64] = np.asarray(hashes, dtype=np.uint64)
    idx: npt.NDArray[np.integer[Any]] = encoded.indices.to_numpy(zero_copy_only=False)
    per_row: npt.NDArray[np.uint64] = words[idx]  # numpy types fancy indexing as Any
    return per_row


def _is_binary(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t))


def canonical_words(col: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.uint64]:
    """The 64-bit canonical word of every value of ``col`` (nulls as 0)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    t = col.type
    if is_integral(t):
        return canonical_ints(col).view(np.uint64)
    if pa.types.is_floating(t):
        return round_floats(canonical_floats(col))
    if is_bytes(t):
        return _string_words(col)
    raise TypeError(f"no canonical rows-digest encoding for column type {t}")


def row_hashes(batch: pa.RecordBatch | pa.Table, columns: Sequence[str] | None = None
               ) -> npt.NDArray[np.uint64]:
    """A ``(rows, LANES)`` uint64 hash of every row over ``columns`` (default: the user
    columns); the same row gives the same hash whatever its position or batch."""
    names = user_columns(batch.schema.names) if columns is None else list(columns)
    n = batch.num_rows
    acc = np.zeros((LANES, n), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for name in names:
            col = batch.column(name)
            seed, null_mark, *mults = _constants(name)[: 2 + LANES]
            h = _mix(canonical_words(col) + seed)
            nulls = None
            if col.null_count:
                nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False))
            for lane, mult in enumerate(mults):
                acc[lane] += h * mult
                if nulls is not None:
                    acc[lane] += nulls.astype(np.uint64) * (null_mark + np.uint64(lane))
        return _mix(acc + np.uint64(len(names))).T


class RowsDigest:
    """Incremental digest of the multiset of rows (user columns) of a stream of batches."""

    def __init__(self) -> None:
        self._columns: list[str] | None = None
        self._sums = [0] * LANES
        self.rows = 0

    def update(self, batch: pa.RecordBatch | pa.Table) -> None:
        names = user_columns(batch.schema.names)
        if self._columns is None:
            self._columns = names
        elif sorted(names) != sorted(self._columns):
            raise ValueError(f"rows digest columns changed from {self._columns} to {names}")
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        sums = row_hashes(batch, names).sum(axis=0, dtype=np.uint64)
        self._sums = [(s + int(x)) & _MASK64 for s, x in zip(self._sums, sums, strict=True)]

    def hexdigest(self) -> str:
        top = hashlib.sha256()
        top.update(repr((sorted(self._columns or []), self.rows)).encode())
        for s in self._sums:
            top.update(s.to_bytes(8, "little"))
        return top.hexdigest()


def rows_digest_of(batches: pa.Table | Iterable[pa.RecordBatch]) -> str:
    """The rows digest of a whole table or sequence of batches."""
    d = RowsDigest()
    for b in batches.to_batches() if isinstance(batches, pa.Table) else batches:
        d.update(b)
    if isinstance(batches, pa.Table) and batches.num_rows == 0:
        d.update(batches)
    return d.hexdigest()
