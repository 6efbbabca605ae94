"""The one spelling of aggregates, shared by every aggregating operator, and their value columns.

``aggs`` maps an output column name to what it computes, the same way in
``TimeWindowAggregate``, ``SessionWindowAggregate``, ``CountWindowAggregate`` and
``GroupAggregate``:

- ``"count"``: the number of rows (no column read);
- ``(func, column)``: ``("sum", "bytes")``, ``("max", "dwell_ms")``, ``("avg", "price")``;
  ``("count", None)`` or ``("count", column)`` is a count too (the column must exist; it is
  not read: a value column may not hold nulls anyway);
- ``(func, value_column, carried_column)`` for the functions that carry another column
  (``GroupAggregate``'s ``argmax`` / ``argmin``);
- ``"func"`` alone for another function is the older spelling of the windowed aggregates: it
  reads the operator's ``value=`` column (``aggs={"s": "sum"}, value="bytes"``), and is
  refused, naming the tuple to write instead, when there is no ``value=``.

``parse_aggs`` turns any of these into ``{name: Agg(func, column, carried)}`` or raises a
``PlanError`` that says what to write. One helper, so that a spelling accepted by one operator
is accepted by all and every operator's error reads the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from sparkflux.model.errors import PlanError

AGGREGATES = ("max", "min", "sum", "count", "avg")  # what the windowed aggregates compute
CARRYING = ("argmax", "argmin")  # (func, value_column, carried_column)
EXAMPLE = '{"n": "count", "total": ("sum", "bytes"), "top": ("max", "dwell_ms")}'


class Agg(NamedTuple):
    """One aggregate: its function, the column it reads (None for a count without one) and,
    for argmax / argmin, the column whose value it carries."""

    func: str
    column: str | None = None
    carried: str | None = None


def parse_aggs(op: str, aggs: Any, funcs: Sequence[str] = AGGREGATES,
               value: str | None = None) -> dict[str, Agg]:
    """``aggs`` in any accepted spelling as ``{name: Agg}``, or PlanError saying the fix.

    ``funcs``: the functions the operator computes; ``value``: the operator's ``value=``
    column, which a bare function name other than ``"count"`` reads."""
    if not isinstance(aggs, Mapping) or not aggs:
        raise PlanError(f"{op}: aggs must be a non-empty dict output_name -> aggregate, e.g. "
                        f"{EXAMPLE}; got {aggs!r}")
    known = ", ".join(funcs)
    out: dict[str, Agg] = {}
    for name, spec in aggs.items():
        if not isinstance(name, str) or not name:
            raise PlanError(f"{op}: aggs names its output columns: {name!r} is not a name")
        what = f"{op}: aggregate {name!r} = {spec!r}"
        if isinstance(spec, str):
            if spec not in funcs:
                raise PlanError(f"{what}: unknown function; use one of {known}")
            if spec == "count":
                out[name] = Agg("count")
            elif value is not None:
                out[name] = Agg(spec, value)
            else:
                raise PlanError(f'{what} reads a column: write {name!r}: ("{spec}", '
                                f'"<column>") (only "count" needs none)')
            continue
        if not isinstance(spec, (tuple, list)) or not spec or not isinstance(spec[0], str):
            raise PlanError(f"{what}: write an aggregate as \"count\" or (func, column), e.g. "
                            f"{EXAMPLE}")
        func = spec[0]
        if func not in funcs:
            raise PlanError(f"{what}: unknown function {func!r}; use one of {known}")
        if func in CARRYING:
            if len(spec) != 3 or not all(isinstance(c, str) and c for c in spec[1:]):
                raise PlanError(f"{what}: {func} takes (func, value_column, carried_column), "
                                f'e.g. ("{func}", "price", "bidder")')
            out[name] = Agg(func, spec[1], spec[2])
            continue
        column = spec[1] if len(spec) == 2 else ""
        if column is None and func == "count":
            out[name] = Agg("count")
        elif isinstance(column, str) and column:
            out[name] = Agg(func, column)
        else:
            raise PlanError(f'{what}: {func} takes (func, column), e.g. ("{func}", "bytes")'
                            + (' or just "count"' if func == "count" else ""))
    return out


def read_columns(aggs: Mapping[str, Agg]) -> list[str]:
    """Every column the aggregates name (to check that they exist), each once, in order."""
    names = [c for a in aggs.values() for c in (a.column, a.carried) if c is not None]
    return list(dict.fromkeys(names))


def value_columns(aggs: Mapping[str, Agg]) -> list[str]:
    """The columns read as numbers (every aggregate's but a count's), each once, in order."""
    return list(dict.fromkeys(a.column for a in aggs.values()
                              if a.func != "count" and a.column is not None))


def one_value_column(op: str, aggs: Mapping[str, Agg], value: str | None) -> str | None:
    """The single value column of an operator that aggregates one (``value=``, or the one
    column its aggs name); PlanError when they name two."""
    named = value_columns(aggs)
    columns = list(dict.fromkeys([*([value] if value is not None else []), *named]))
    if len(columns) > 1:
        raise PlanError(f"{op} aggregates one value column, but value= and aggs name "
                        f"{', '.join(repr(c) for c in columns)}; aggregate one of them here "
                        f"(TimeWindowAggregate and GroupAggregate read several)")
    return columns[0] if columns else None


def value_dtype(op: str, schema: pa.Schema, value: str) -> np.dtype:
    """int64 for integer value columns, float64 for floating ones (PlanError otherwise)."""
    t = schema.field(value).type
    if pa.types.is_integer(t):
        return np.dtype(np.int64)
    if pa.types.is_floating(t):
        return np.dtype(np.float64)
    raise PlanError(f"{op}: value column {value!r} must be numeric, not {t}")


def agg_fields(aggs: Mapping[str, Agg], dtypes: Mapping[str, np.dtype]) -> list[pa.Field]:
    """Output fields: max/min/sum keep their column's widened type (``dtypes``), count is
    int64, avg float64."""
    fields = []
    for name, a in aggs.items():
        if a.func == "count":
            fields.append(pa.field(name, pa.int64()))
        elif a.func == "avg":
            fields.append(pa.field(name, pa.float64()))
        else:
            assert a.column is not None  # parse_aggs gives every other function its column
            fields.append(pa.field(name, pa.from_numpy_dtype(dtypes[a.column])))
    return fields


def value_array(op: str, batch: pa.RecordBatch, value: str, dtype: np.dtype) -> np.ndarray:
    """A numeric column as numpy of ``dtype``; ValueError naming the column if it holds
    nulls."""
    col = batch.column(value)
    if col.null_count:
        raise ValueError(f"{op}: value column {value!r} holds nulls; filter them out first")
    return col.cast(pa.from_numpy_dtype(dtype)).to_numpy(zero_copy_only=False)
