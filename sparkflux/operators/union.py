"""Union of streams: the shared (null-padded) schema, and the SN-ordered merge of aligned batches.

The engine merges unioned sources at the ingress (``protocol/sequencer.py``: one event-time
order, then one sequence of input SNs); what it needs from here is their common schema
(``padded_union_schema``: every column of any input, null where an input lacks it) and
``pad_to`` for each source's batches. Where inputs with the same columns are merged by hand,
``unify_schemas`` and ``union_batches``. Types may differ where they widen without loss
(``int32`` into ``int64``, ``float32`` into ``float64``, ``string`` into ``large_string``);
anything else is a ``PlanError`` that names the column.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from sparkflux.model.batch import concat, sort_by_sn
from sparkflux.model.errors import PlanError
from sparkflux.model.schema import SN, SNM, SYSTEM_COLUMNS, T0, user_fields
from sparkflux.operators.keyed import output_schema


def unify_schemas(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """The user schema shared by all ``schemas`` (system columns left out).

    Columns follow the first schema's order; a column present in only some inputs, or whose
    types cannot be widened to a common type without loss, raises ``PlanError`` naming it.

    >>> unify_schemas([pa.schema([("a", pa.int32())]), pa.schema([("a", pa.int64())])])
    a: int64
    """
    if not schemas:
        raise PlanError("union: needs at least one input")
    fields = list(user_fields(schemas[0]))
    for i, schema in enumerate(schemas[1:], start=1):
        theirs = {f.name: f for f in user_fields(schema)}
        _check_names(i, [f.name for f in fields], list(theirs))
        for k, mine in enumerate(fields):
            other = theirs[mine.name]
            common = _common_type(mine.type, other.type)
            if common is None:
                raise PlanError(
                    f"union: column {mine.name!r} is {mine.type} in input 0 but {other.type} "
                    f"in input {i}, and neither widens to the other; cast one of them"
                )
            fields[k] = pa.field(mine.name, common, mine.nullable or other.nullable,
                                 mine.metadata)
    return pa.schema(fields)


def padded_union_schema(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """The user schema of a union of inputs whose columns may differ: every column of any
    input, in order of first appearance; a column some input lacks is nullable (that input's
    rows carry null there). A column the inputs share must have a common type.

    >>> padded_union_schema([pa.schema([pa.field("a", pa.int32(), False)]),
    ...                      pa.schema([pa.field("a", pa.int64(), False), ("b", pa.string())])])
    a: int64 not null
    b: string
    """
    if not schemas:
        raise PlanError("union: needs at least one input")
    fields: dict[str, pa.Field] = {}
    seen: dict[str, int] = {}
    for i, schema in enumerate(schemas):
        for f in user_fields(schema):
            mine = fields.get(f.name)
            seen[f.name] = seen.get(f.name, 0) + 1
            if mine is None:
                fields[f.name] = f
                continue
            common = _common_type(mine.type, f.type)
            if common is None:
                raise PlanError(
                    f"union: column {f.name!r} is {mine.type} in an earlier input but {f.type} "
                    f"in input {i}, and neither widens to the other; cast or rename one")
            fields[f.name] = pa.field(f.name, common, mine.nullable or f.nullable, mine.metadata)
    return pa.schema([f if seen[f.name] == len(schemas) else f.with_nullable(True)
                      for f in fields.values()])


def pad_to(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` (user columns) as ``schema``: columns it lacks are null, types widened."""
    n = batch.num_rows
    arrays = []
    for f in schema:
        i = batch.schema.get_field_index(f.name)
        if i < 0:
            arrays.append(pa.nulls(n, f.type))
            continue
        col = batch.column(i)
        arrays.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def union_batches(
    batches_per_input: Sequence[Sequence[pa.RecordBatch]], schema: pa.Schema
) -> pa.RecordBatch:
    """The rows of all inputs, each aligned to ``schema``, in ``(_sn, _snm)`` order.

    ``schema`` gives the user columns (system columns in it are ignored); the result has those
    columns followed by ``_sn, _snm, _t0, _part``.
    """
    target = output_schema(user_fields(schema))
    aligned = [
        _align(i, batch, target)
        for i, batches in enumerate(batches_per_input)
        for batch in batches
    ]
    return sort_by_sn(concat(aligned, target))


def _align(i: int, batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    names = [f.name for f in target if f.name not in SYSTEM_COLUMNS]
    _check_names(i, names, [f.name for f in user_fields(batch.schema)])
    for name in (SN, SNM, T0):
        if batch.schema.get_field_index(name) < 0:
            raise ValueError(f"union: a batch of input {i} lacks the system column {name!r}")
    arrays = []
    for f in target:
        col = batch.column(f.name)
        if col.type != f.type:
            if _common_type(col.type, f.type) != f.type:
                raise PlanError(
                    f"union: column {f.name!r} of input {i} is {col.type}, which does not "
                    f"widen to {f.type} without loss; cast it first"
                )
            col = col.cast(f.type)
        arrays.append(col)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _check_names(i: int, expected: list[str], got: list[str]) -> None:
    missing = [n for n in expected if n not in got]
    extra = [n for n in got if n not in expected]
    if missing:
        raise PlanError(f"union: input {i} lacks column {missing[0]!r} that input 0 has")
    if extra:
        raise PlanError(f"union: input {i} has column {extra[0]!r} that input 0 lacks")


def _common_type(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The narrower of two types that holds both losslessly, or None."""
    if a == b:
        return a
    if _widens(a, b):
        return b
    if _widens(b, a):
        return a
    if pa.types.is_integer(a) and pa.types.is_integer(b):
        bits = max(a.bit_width * (1 + pa.types.is_unsigned_integer(a)),
                   b.bit_width * (1 + pa.types.is_unsigned_integer(b)))
        if bits <= 64:
            return pa.int64() if bits > 32 else pa.int32() if bits > 16 else pa.int16()
    return None


def _widens(a: pa.DataType, b: pa.DataType) -> bool:
    """Whether every value of type ``a`` converts to type ``b`` without loss."""
    t = pa.types
    if t.is_null(a):
        return True
    if t.is_integer(a) and t.is_integer(b):
        if t.is_signed_integer(a) == t.is_signed_integer(b):
            return a.bit_width <= b.bit_width
        return t.is_unsigned_integer(a) and a.bit_width < b.bit_width
    if t.is_integer(a) and t.is_floating(b):
        return a.bit_width <= {16: 8, 32: 16, 64: 32}[b.bit_width]
    if t.is_floating(a) and t.is_floating(b):
        return a.bit_width <= b.bit_width
    return (a, b) in {
        (pa.string(), pa.large_string()),
        (pa.binary(), pa.large_binary()),
    }
