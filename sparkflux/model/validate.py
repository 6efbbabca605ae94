"""Input validation at the ingress: bad records go to the dead-letter output with a reason.

A source yields Arrow batches (the fast path: checked column by column, never row by row) or
lists of plain dict records. A source that could not even parse a record (a line that is not
JSON, a file that is not Parquet) puts a ``Malformed`` in the list instead: it is rejected with
the source's reason. A record missing a column, holding a null in a non-nullable
column, or holding a value of the wrong type is rejected with its reason; the rest of the
input goes on. Conversion is vectorized per column and falls back to a per-record check only
for a column that failed to convert, to find exactly which records are bad.

**A value goes into its column exactly, or not at all** (``exact``): never truncated, wrapped,
parsed or coerced into another kind.

- An integer column takes integers within its range, and a float only when it is a whole
  number within that range (``1.0``, ``1e3``): ``1.5``, ``NaN`` and ``2**63`` into ``int64``
  are dead letters, as is a float that is not exactly an integer.
- A float column takes integers and floats, rounded to its precision as every float is (an
  integer beyond 2**53 into ``float64`` is refused: Arrow's rule), but never beyond its
  range: ``1e300`` into ``float32`` (which would read back as infinity) is a dead letter.
- A bool is not a number and a number not a bool: ``true`` into an integer or float column,
  ``1`` into a bool column, are dead letters.
- A string is never parsed into a number, nor a number written as a string: ``"5"`` into
  ``int64`` and ``5`` into ``string`` are dead letters.

Other types (timestamps, dates, decimals, nested) convert as Arrow converts them.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from decimal import Decimal
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
            col = _cast_exactly(col, f.type)
            if col is None:
                # Some value does not fit, or the column is of another kind: find which
                # records, one by one.
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
        kind = _kind(f.type)
        try:
            if kind in _PYTHON_KINDS and not {type(v) for v in clean} <= _PYTHON_KINDS[kind]:
                raise TypeError("a value of another Python type: check one by one")
            arr = pa.array(clean, type=f.type)
            if kind == "float" and not _no_overflow(clean, arr):
                raise OverflowError("a finite value became infinite: check one by one")
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
        why = exact(v, f.type)
        if why is None:
            try:
                pa.array([v], type=f.type)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
                why = ""
        if why is None:
            out.append(v)
        else:
            bad.setdefault(i, f"column {f.name!r}: {v!r} is not of type {f.type}"
                              + (f": {why}" if why else ""))
            out.append(None)
    return pa.array(out, type=f.type)


def exact(value: Any, type_: pa.DataType) -> str | None:
    """Why ``value`` (a Python value) does not go exactly into a column of ``type_``, or None
    when nothing stands in the way here (Arrow's own conversion still checks the range and the
    rest; see the module)."""
    if value is None:
        return None
    kind = _kind(type_)
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, Decimal)):
            return f"a {_what(value)}, not an integer"
        if isinstance(value, numbers.Integral):
            return None
        if not math.isfinite(value):
            return "not a finite number"
        return None if value == math.floor(value) else "not a whole number"
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (numbers.Real, Decimal)):
            return f"a {_what(value)}, not a number"
        if isinstance(value, float) and math.isfinite(value):
            as_column = pa.array([value], type=type_)[0].as_py()
            if not math.isfinite(as_column):
                return f"beyond the range of {type_}"
        return None
    if kind == "bool":
        return None if isinstance(value, bool) else f"a {_what(value)}, not a bool"
    if kind == "string":
        return None if isinstance(value, str) else f"a {_what(value)}, not a string"
    return None


def _what(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (numbers.Real, Decimal)):
        return "number"
    return type(value).__name__


def _kind(type_: pa.DataType) -> str:
    """``int``, ``float``, ``decimal``, ``bool``, ``string`` or ``other`` (a dictionary: its
    values' kind)."""
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    if pa.types.is_integer(type_):
        return "int"
    if pa.types.is_floating(type_):
        return "float"
    if pa.types.is_decimal(type_):
        return "decimal"
    if pa.types.is_boolean(type_):
        return "bool"
    if pa.types.is_string(type_) or pa.types.is_large_string(type_) or (
            pa.types.is_string_view(type_)):
        return "string"
    return "other"


# The Python types a column of each kind converts wholesale, without a look at each value.
_PYTHON_KINDS: dict[str, set[type]] = {"int": {int, type(None)},
                                       "float": {int, float, type(None)},
                                       "bool": {bool, type(None)},
                                       "string": {str, type(None)}}


def _no_overflow(values: list[Any], arr: pa.Array) -> bool:
    """Whether no finite value of ``values`` became infinite in the float column ``arr``."""
    if not pc.any(pc.is_inf(arr)).as_py():
        return True
    finite = pa.array([isinstance(v, float) and math.isfinite(v) or isinstance(v, int)
                       for v in values])
    return not pc.any(pc.and_(pc.is_inf(arr), finite)).as_py()


def _cast_exactly(col: pa.Array, type_: pa.DataType) -> pa.Array | None:
    """``col`` cast to ``type_`` when every value goes into it exactly (see the module), or
    None: a value does not fit, or the column is of another kind (a bool column into an
    integer one, a string column into a number)."""
    src, dst = _kind(col.type), _kind(type_)
    numeric = ("int", "float", "decimal")
    if (dst in numeric and src not in numeric) or (dst in ("bool", "string") and src != dst):
        return None
    try:
        out = pc.cast(col, type_)  # safe: an overflow or a fraction into an integer raises
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if dst == "float" and src == "float" and pc.any(
            pc.and_(pc.is_inf(out), pc.invert(pc.is_inf(col)))).as_py():
        return None  # a finite value beyond the narrower float's range
    return out


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, f.type, nullable=True) for f in schema])


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


_MISSING: Any = _Missing()
