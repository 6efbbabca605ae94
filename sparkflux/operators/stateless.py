"""Stateless operators: Filter, Map and Project.

Each output row is one input row (or none), so it keeps that row's ``_sn, _snm, _t0, _part``
(the 1:1 rule of docs/design.md §3). None of them keeps state, so they may run anywhere, also in
the ingress before the first exchange.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.model.batch import empty
from sparkflux.model.errors import PlanError
from sparkflux.model.schema import SYSTEM_COLUMNS, user_fields
from sparkflux.operators.base import Operator, require_columns
from sparkflux.operators.keyed import assemble, check_output_names, output_schema

# (explicit aliases: pyarrow has no type stubs, so its classes are Any to the type checker)
Predicate: TypeAlias = pc.Expression | Callable[[pa.RecordBatch], Any]
MapResult: TypeAlias = Mapping[str, Any] | pa.RecordBatch | pa.Table


class Filter(Operator):
    """Keep the rows for which ``predicate`` is true (null counts as false).

    ``predicate`` is a ``pyarrow.compute`` expression, checked against the input columns at
    bind time, or a callable from a batch to a boolean array.

    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> batch = pa.RecordBatch.from_pydict({"x": [3, 8, 5], "_sn": [0, 1, 2], "_snm": [0] * 3,
    ...     "_t0": [0.0] * 3, "_part": pa.array([0] * 3, pa.int32())})
    >>> op = Filter(pc.field("x") > 4)
    >>> _ = op.bind(batch.schema)
    >>> op.process(batch).to_pydict()["_sn"]
    [1, 2]
    """

    order_insensitive = True

    def __init__(self, predicate: Predicate) -> None:
        super().__init__()
        if not isinstance(predicate, pc.Expression) and not callable(predicate):
            raise PlanError("Filter: predicate must be a pyarrow.compute.Expression or a callable")
        self.predicate = predicate

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        if isinstance(self.predicate, pc.Expression):
            try:
                empty(input_schema).filter(self.predicate)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                available = ", ".join(f.name for f in user_fields(input_schema))
                raise PlanError(
                    f"Filter: predicate {self.predicate} does not apply to the input "
                    f"({str(e).splitlines()[0]}); the input has: {available}"
                ) from e
        return output_schema(user_fields(input_schema))

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if isinstance(self.predicate, pc.Expression):
            kept = batch.filter(self.predicate)
        else:
            mask = self.predicate(batch)
            if not isinstance(mask, pa.Array | pa.ChunkedArray):
                mask = pa.array(np.asarray(mask, dtype=bool))
            if len(mask) != batch.num_rows:
                raise ValueError(
                    f"Filter: the predicate returned {len(mask)} values for {batch.num_rows} rows"
                )
            kept = batch.filter(mask)
        return _conform(self.output_schema, kept)


class Map(Operator):
    """Add or replace user columns computed from the whole batch.

    ``fn(batch)`` returns a mapping from name to array (Arrow, numpy or a list) or a record
    batch, holding exactly the columns named in ``fields``, one value per row. A field that
    names an input column replaces it in place (its type may change); the others are appended
    in the order given. Arrow arrays of another type are cast to the declared type.

    >>> import pyarrow as pa, pyarrow.compute as pc
    >>> batch = pa.RecordBatch.from_pydict({"x": [3, 8], "_sn": [0, 1], "_snm": [0, 0],
    ...     "_t0": [0.0, 0.0], "_part": pa.array([0, 0], pa.int32())})
    >>> op = Map(lambda b: {"y": pc.multiply(b.column("x"), 2)}, [pa.field("y", pa.int64())])
    >>> _ = op.bind(batch.schema)
    >>> op.process(batch).to_pydict()["y"]
    [6, 16]
    """

    order_insensitive = True

    def __init__(self, fn: Callable[[pa.RecordBatch], MapResult],
                 fields: Sequence[pa.Field]) -> None:
        super().__init__()
        self.fn = fn
        self.fields = list(fields)
        check_output_names("Map", self.fields)

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        new = {f.name: f for f in self.fields}
        out = [new.pop(f.name, f) for f in user_fields(input_schema)]
        return output_schema([*out, *new.values()])

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        schema = self.output_schema
        if batch.num_rows == 0:
            return empty(schema)
        result = self.fn(batch)
        if isinstance(result, pa.RecordBatch | pa.Table):
            result = {name: result.column(name) for name in result.column_names}
        declared = {f.name for f in self.fields}
        missing, extra = declared - set(result), set(result) - declared
        if missing or extra:
            raise ValueError(
                f"Map: the function must return exactly the declared fields "
                f"({', '.join(sorted(declared))}); missing: {sorted(missing)}, "
                f"undeclared: {sorted(extra)}"
            )
        columns = []
        for f in schema:
            if f.name in SYSTEM_COLUMNS:
                break
            col = _to_arrow(result[f.name], f) if f.name in declared else batch.column(f.name)
            if len(col) != batch.num_rows:
                raise ValueError(
                    f"Map: column {f.name!r} has {len(col)} values for {batch.num_rows} rows"
                )
            columns.append(col)
        return assemble(schema, columns, batch)


class Project(Operator):
    """Keep, reorder and rename user columns.

    ``columns`` is a list of names to keep, in output order, or a mapping ``new -> old``.
    The system columns always follow and need not be named.

    >>> import pyarrow as pa
    >>> batch = pa.RecordBatch.from_pydict({"x": [3], "y": [4], "_sn": [0], "_snm": [0],
    ...     "_t0": [0.0], "_part": pa.array([0], pa.int32())})
    >>> op = Project({"b": "y", "a": "x"})
    >>> op.bind(batch.schema).names[:2]
    ['b', 'a']
    """

    order_insensitive = True

    def __init__(self, columns: Sequence[str] | Mapping[str, str]) -> None:
        super().__init__()
        if isinstance(columns, str):
            raise PlanError("Project: columns must be a list of names or a dict new -> old")
        pairs = list(columns.items()) if isinstance(columns, Mapping) else [
            (c, c) for c in columns
        ]
        for _, old in pairs:
            if old in SYSTEM_COLUMNS:
                raise PlanError(
                    f"Project: {old!r} is a system column; system columns are always kept, "
                    f"leave it out"
                )
        self.pairs = pairs

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        require_columns("Project", input_schema, [old for _, old in self.pairs])
        fields = [input_schema.field(old).with_name(new) for new, old in self.pairs]
        check_output_names("Project", fields)
        return output_schema(fields)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return assemble(self.output_schema, [batch.column(old) for _, old in self.pairs], batch)


def _to_arrow(values: Any, field: pa.Field) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if isinstance(values, pa.Array):
        return values if values.type == field.type else values.cast(field.type)
    return pa.array(values, type=field.type)


def _conform(schema: pa.Schema, batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with the columns of ``schema`` (a no-op when it already has that schema)."""
    if batch.schema.equals(schema):
        return batch
    names = [f.name for f in schema if f.name not in SYSTEM_COLUMNS]
    return assemble(schema, [batch.column(n) for n in names], batch)
