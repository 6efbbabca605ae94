"""Input validation at the ingress: bad records go to the dead-letter output with a reason.

A source yields Arrow batches (the fast path: checked column by column, never row by row) or
lists of plain dict records. A source that could not even parse a record (a line that is not
JSON, a file that is not Parquet) puts a ``Malformed`` in the list instead: it is rejected with
the source's reason. A record missing a column, holding a null in a non-nullable
column, or holding a value of the wrong type is rejected with its reason; the rest of the
input goes on. Conversion is vectorized per column and falls back to a per-record check only
for a column that failed to convert, to find exactly which records are bad.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record the ingress refused, and why."""

    record: dict[str, Any]
    reason: str


@dataclass(frozen=True, slots=True)
class Malformed:
    """Input a source could not parse into a record, in a list of records: the ingress rejects
    it to the dead letters with ``reason`` (``record`` says what and where, e.g. the file, the
    line and its text)."""

    record: dict[str, Any]
    reason: str


def validate(
    data: pa.RecordBatch | list[dict[str, Any]], schema: pa.Schema
) -> tuple[pa.RecordBatch, list[Rejected]]:
    """Split input into a batch of valid records (in ``schema``) and the rejected ones."""
    if isinstance(data, pa.RecordBatch):
        return _validate_batch(data, schema)
    malformed = [Rejected(r.record, r.reason) for r in data if isinstance(r, Malformed)]
    if not malformed:
        return _validate_records(data, schema)
    good, rejected = _validate_records([r for r in data if not isinstance(r, Malformed)],
                                       schema)
    return good, malformed + rejected


def _validate_batch(batch: pa.RecordBatch, schema: pa.Schema) -> tuple[pa.RecordBatch,
                                                                       list[Rejected]]:
    missing = [f.name for f in schema if batch.schema.get_field_index(f.name) < 0]
    if missing:
        reason = f"missing column(s) {', '.join(missing)}"
        return _empty(schema), [Rejected(r, reason) for r in batch.to_pylist()]
    columns = []
    for f in schema:
        col = batch.column(f.name)
        if not col.type.equals(f.type):
            try:
                col = pc.cast(col, f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                # A whole column of the wrong type: fall back to record-by-record checks.
                return _validate_records(batch.to_pylist(), schema)
        columns.append(col)
    bad = np.zeros(batch.num_rows, dtype=bool)
    reasons: dict[int, str] = {}
    for f, col in zip(schema, columns, strict=True):
        if not f.nullable and col.null_count:
            nulls = np.asarray(col.is_null().to_numpy(zero_copy_only=False))
            for i in np.flatnonzero(nulls & ~bad):
                reasons[int(i)] = f"missing value for column {f.name!r}"
            bad |= nulls
    good = pa.RecordBatch.from_arrays(columns, schema=schema)
    if not bad.any():
        return good, []
    rows = batch.to_pylist()
    rejected = [Rejected(rows[i], reasons[i]) for i in sorted(reasons)]
    return good.filter(pa.array(~bad)), rejected


def _validate_records(records: list[dict[str, Any]], schema: pa.Schema) -> tuple[
        pa.RecordBatch, list[Rejected]]:
    n = len(records)
    bad_reason: dict[int, str] = {}
    columns: list[pa.Array] = []
    for f in schema:
        values = [r.get(f.name, _MISSING) for r in records]
        for i, v in enumerate(values):
            if v is _MISSING and i not in bad_reason:
                bad_reason[i] = f"missing column {f.name!r}"
        clean = [None if v is _MISSING else v for v in values]
        try:
            arr = pa.array(clean, type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            arr = _convert_one_by_one(clean, f, bad_reason)
        if not f.nullable and arr.null_count:
            for row in np.flatnonzero(np.asarray(arr.is_null().to_numpy(zero_copy_only=False))):
                bad_reason.setdefault(int(row), f"missing value for column {f.name!r}")
        columns.append(arr)
    good = pa.RecordBatch.from_arrays(columns, schema=_nullable(schema))
    rejected = [Rejected(records[i], bad_reason[i]) for i in sorted(bad_reason)]
    if bad_reason:
        keep = np.ones(n, dtype=bool)
        keep[list(bad_reason)] = False
        good = good.filter(pa.array(keep))
    return pa.RecordBatch.from_arrays(good.columns, schema=schema), rejected


def _convert_one_by_one(values: list[Any], f: pa.Field, bad: dict[int, str]) -> pa.Array:
    out: list[Any] = []
    for i, v in enumerate(values):
        try:
            pa.array([v], type=f.type)
            out.append(v)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            bad.setdefault(i, f"column {f.name!r}: {v!r} is not of type {f.type}")
            out.append(None)
    return pa.array(out, type=f.type)


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, nullable=True) for f in schema])


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()
