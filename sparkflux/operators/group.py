"""Running group aggregates: per key, the aggregates of every row so far, on every row.

Unlike the windowed aggregates nothing closes: each input row emits one row for its key with
the aggregates over all the key's rows up to and including it, so an output keeps its input's
``_sn, _snm, _t0, _part`` (one output per input) and progress passes through untouched. The
state is one row per key (its count, sums, extremes and the values ``first`` and
``argmax``/``argmin`` carry); it grows with the number of keys, never with time.

Determinism. A running sum is the left fold of the key's values in SN order, ``((s + v1) +
v2) + ...``, however the rows are cut into batches: floating sums and averages are the same
to the last bit on every replica. Within a batch, keys are folded together with one 2-D
``accumulate`` per bucket of keys of similar row counts (``running``), never a loop over rows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.model.batch import empty
from sparkflux.model.errors import PlanError
from sparkflux.operators.aggs import Agg, parse_aggs, read_columns, value_array, value_dtype
from sparkflux.operators.base import Operator, require_columns
from sparkflux.operators.keyed import (
    KeyCoder,
    KeyTable,
    TableState,
    assemble,
    check_output_names,
    groups_of,
    output_schema,
    part_array,
    rebind,
)

FUNCS = ("count", "sum", "min", "max", "avg", "first", "last", "argmax", "argmin")
_NUMERIC = ("sum", "min", "max", "avg", "argmax", "argmin")  # read a numeric value column
_CARRIED = ("first", "argmax", "argmin")  # keep an Arrow value per key


def running(ufunc: np.ufunc, init: np.ndarray, values: np.ndarray, starts: np.ndarray,
            sizes: np.ndarray) -> np.ndarray:
    """The running fold of every group at every element, left to right from ``init``.

    Group g is ``values[starts[g] : starts[g] + sizes[g]]``; element i of it gets
    ``ufunc(... ufunc(ufunc(init[g], v0), v1) ..., vi)``. Groups are bucketed by size (up to
    a power of two) and each bucket is one ``accumulate`` along the rows of a 2-D array, so
    the work is O(n) in O(log n) numpy calls and every fold is sequential.

    >>> running(np.add, np.array([10, 0]), np.array([1, 2, 3, 4, 5]), np.array([0, 3]),
    ...         np.array([3, 2]))
    array([11, 13, 16,  4,  9])
    """
    dtype = np.result_type(init, values)
    out = np.empty(values.size, dtype=dtype)
    if values.size == 0:
        return out
    bucket = np.frexp(np.maximum(sizes, 1) - 1)[1]  # size <= 2 ** bucket
    for b in np.unique(bucket).tolist():
        g = np.flatnonzero(bucket == b)
        width = np.arange(1 << b)
        idx = starts[g, None] + width  # (groups, 2 ** b); past a group's end: padding
        valid = width < sizes[g, None]
        m = np.empty((g.size, width.size + 1), dtype=dtype)
        m[:, 0] = init[g]
        m[:, 1:] = values[np.minimum(idx, values.size - 1)]
        with np.errstate(all="ignore"):  # the padding may overflow; it is thrown away
            acc = ufunc.accumulate(m, axis=1)[:, 1:]
        out[idx[valid]] = acc[valid]
    return out


class GroupAggregate(TableState, Operator):
    """The aggregates so far of the key ``by`` of every row, on every row.

    ``aggs`` maps an output name to ``"count"`` (the rows so far) or ``(func, column)``, the
    spelling ``TimeWindowAggregate`` shares (``aggs.py``): ``sum``, ``min``, ``max``, ``avg``
    of a numeric column, ``first`` / ``last`` (the column's value in the key's first row / in
    this row), or ``(argmax | argmin, value_column, carried_column)``: the carried column's
    value in the row with the largest (smallest) value so far, the earliest such row on ties
    (NaN never wins over a number). ``("count", None)`` is a count too.
    ``carry`` copies columns of the triggering row. Output: the ``by`` columns, the aggs in
    order (count int64, avg float64, sum/min/max int64 or float64, first/last/argmax/argmin
    of their column's type), then ``carry``.

    >>> import pyarrow as pa
    >>> batch = pa.RecordBatch.from_pydict({"cat": [1, 2, 1, 1], "price": [5, 9, 8, 3],
    ...     "bidder": ["a", "b", "c", "d"], "_sn": [0, 1, 2, 3], "_snm": [0] * 4,
    ...     "_t0": [0.0] * 4, "_part": pa.array([0] * 4, pa.int32())})
    >>> op = GroupAggregate(by=["cat"], aggs={"n": "count", "avg": ("avg", "price"),
    ...     "best": ("argmax", "price", "bidder")})
    >>> _ = op.bind(batch.schema)
    >>> out = op.process(batch).to_pydict()
    >>> out["n"], out["avg"], out["best"], out["_sn"]
    ([1, 1, 2, 3], [5.0, 9.0, 6.5, 5.333333333333333], ['a', 'b', 'c', 'c'], [0, 1, 2, 3])
    """

    stateful = True

    def __init__(self, by: Sequence[str], aggs: Mapping[str, Any],
                 carry: Sequence[str] | None = None) -> None:
        super().__init__()
        op = "GroupAggregate"
        if isinstance(carry, str):
            raise PlanError(f"{op}: carry must be a list of column names, e.g. [{carry!r}]")
        self.coder = KeyCoder(op, by)
        self.aggs: dict[str, Agg] = parse_aggs(op, aggs, FUNCS)
        self.carry = list(carry or [])
        self._dtypes: dict[str, np.dtype] = {}
        self._table = KeyTable(self._spec())

    def _spec(self) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        # n: rows so far; per numeric aggregate its running value (a sum for avg, the best
        # value for argmax/argmin). The carried values live in the table's payload.
        spec: dict[str, tuple[np.dtype, tuple[int, ...]]] = {"n": (np.dtype(np.int64), ())}
        for name, a in self.aggs.items():
            if a.func in _NUMERIC:
                spec[f"v:{name}"] = (self._dtypes.get(name, np.dtype(np.float64)), ())
        return spec

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        op = "GroupAggregate"
        require_columns(op, input_schema, [*read_columns(self.aggs), *self.carry])
        self.coder.bind(input_schema)
        fields, payload = [*self.coder.key_schema], []
        for name, a in self.aggs.items():
            if a.func in _NUMERIC:
                self._dtypes[name] = value_dtype(op, input_schema, str(a.column))
            if a.func in ("count", "avg"):
                fields.append(pa.field(name, pa.int64() if a.func == "count" else pa.float64()))
            elif a.func in ("sum", "min", "max"):
                fields.append(pa.field(name, pa.from_numpy_dtype(self._dtypes[name])))
            else:
                fields.append(input_schema.field(_shown(a)).with_name(name))
            if a.func in _CARRIED:
                payload.append(input_schema.field(_shown(a)).with_name(name))
        fields += [input_schema.field(c) for c in self.carry]
        check_output_names(op, fields)
        keys = None if self.coder.exact else self.coder.key_schema
        fresh = KeyTable(self._spec(), keys, verify=True,
                         payload_schema=pa.schema(payload) if payload else None)
        self._table = rebind(self._table, fresh)
        return output_schema(fields)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        schema = self.output_schema
        if batch.num_rows == 0:
            return empty(schema)
        op, table = "GroupAggregate", self._table
        part, code = part_array(batch), self.coder.encode(batch)
        order, starts = groups_of(part, code)
        sizes = np.diff(np.r_[starts, order.size])
        group = np.repeat(np.arange(starts.size), sizes)  # the group of every sorted row
        first = np.zeros(order.size, dtype=bool)
        first[starts] = True
        heads, ends = order[starts], starts + sizes - 1
        keys = None if table.keys is None else self.coder.keys(batch).take(pa.array(heads))
        found = table.find(part[heads], code[heads], keys=keys)
        present = found >= 0
        stored = None if table.payload is None else table.payload.take(
            pa.array(found[present]))
        # A carried value by index: stored ones of present groups first, then batch rows.
        slot_of_group = np.cumsum(present) - 1
        n_stored = int(present.sum())

        n = table.get("n", found)[group] + np.arange(order.size) - starts[group] + 1
        sn_order = np.argsort(order)  # sorted position of every batch row
        results: list[pa.Array] = []
        update: dict[str, np.ndarray] = {"n": n[ends]}
        carried_at_end: dict[str, np.ndarray] = {}  # per group: index of its carried value
        for name, (func, column, carried) in self.aggs.items():
            if func == "count":
                results.append(pa.array(n[sn_order]))
                continue
            if func == "last":
                results.append(batch.column(column))
                continue
            if func == "first":
                pick = np.where(present, slot_of_group, n_stored + heads)
                carried_at_end[name] = pick
                results.append(self._carried(name, stored, batch, str(column),
                                             pick[group][sn_order]))
                continue
            dtype = self._dtypes[name]
            v = value_array(op, batch, str(column), dtype)[order]
            if func in ("sum", "avg"):
                acc = running(np.add, table.get(f"v:{name}", found, 0), v, starts, sizes)
                update[f"v:{name}"] = acc[ends]
                results.append(pa.array((acc if func == "sum" else acc / n)[sn_order]))
                continue
            low, high = _extremes(dtype)
            if func in ("min", "max"):
                ufunc, fill = (np.minimum, high) if func == "min" else (np.maximum, low)
                acc = running(ufunc, table.get(f"v:{name}", found, fill), v, starts, sizes)
                update[f"v:{name}"] = acc[ends]
                results.append(pa.array(acc[sn_order]))
                continue
            # argmax / argmin: a row takes the lead when it beats the best before it.
            best, fill = (np.fmax, low) if func == "argmax" else (np.fmin, high)
            init = table.get(f"v:{name}", found, fill)
            acc = running(best, init, v, starts, sizes)
            before = np.r_[init[0], acc[:-1]]
            before[starts] = init
            leads = (v > before) if func == "argmax" else (v < before)
            leads |= first & ~present[group]
            lead = np.maximum.accumulate(np.where(leads, np.arange(order.size), -1))
            has = lead >= starts[group]
            pick = np.where(has, n_stored + order[np.maximum(lead, 0)], slot_of_group[group])
            update[f"v:{name}"] = acc[ends]
            carried_at_end[name] = pick[ends]
            results.append(self._carried(name, stored, batch, str(carried), pick[sn_order]))

        self._update(batch, found, present, heads, part, code, keys, update, stored,
                     carried_at_end)
        copied = [batch.column(c) for c in self.carry]
        return assemble(schema, [*(batch.column(c) for c in self.coder.columns), *results,
                                 *copied], batch)

    def _carried(self, name: str, stored: pa.Table | None, batch: pa.RecordBatch,
                 column: str, pick: np.ndarray) -> pa.Array:
        """Values of a carried aggregate: ``pick`` indexes the stored values, then the
        batch's column."""
        col = batch.column(column)
        both = col if stored is None or stored.num_rows == 0 else pa.chunked_array(
            [stored.column(name).cast(col.type), col]).combine_chunks()
        return both.take(pa.array(pick))

    def _update(self, batch: pa.RecordBatch, found: np.ndarray, present: np.ndarray,
                heads: np.ndarray, part: np.ndarray, code: np.ndarray,
                keys: pa.Table | None, update: dict[str, np.ndarray],
                stored: pa.Table | None, carried_at_end: dict[str, np.ndarray]) -> None:
        """Every group's state after its last row in the batch."""
        table = self._table
        for name, v in update.items():
            table.cols[name][found[present]] = v[present]
        payload = None
        if table.payload is not None:
            payload = pa.table({name: self._carried(name, stored, batch, _shown(self.aggs[name]),
                                                    carried_at_end[name])
                                for name in table.payload.column_names})
            changed = [name for name in payload.column_names if self.aggs[name].func != "first"]
            if changed:
                table.set_payload(found[present], payload.filter(pa.array(present)))
        new = ~present
        table.insert(part[heads[new]], code[heads[new]], None,
                     {name: v[new] for name, v in update.items()},
                     None if keys is None else keys.filter(pa.array(new)),
                     None if payload is None else payload.filter(pa.array(new)))


def _shown(a: Agg) -> str:
    """The input column whose values a first, last, argmax or argmin aggregate shows."""
    shown = a.carried if a.carried is not None else a.column
    assert shown is not None  # parse_aggs names it for every one of them
    return shown


def _extremes(dtype: np.dtype) -> tuple[Any, Any]:
    if dtype.kind == "f":
        return -np.inf, np.inf
    info = np.iinfo(dtype)
    return info.min, info.max
