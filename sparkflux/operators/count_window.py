"""Count-window group-by aggregates (the GB2 of netmon).

Per group the tuples are counted ``n = 1, 2, ...``. Every ``slide``-th tuple is an *update*
(``u = n // slide``); the window of an update is the group's last ``min(history, n)`` values;
every ``every``-th update emits one row of aggregates over that window. The state of a group
is its count and its last ``history`` values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.model.batch import empty
from sparkflux.model.errors import PlanError
from sparkflux.operators.aggs import (
    agg_fields,
    one_value_column,
    parse_aggs,
    read_columns,
    value_array,
    value_dtype,
)
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


class CountWindowAggregate(TableState, Operator):
    """Aggregate the last ``history`` values of ``value`` per group of ``by``, by count.

    Output per emitting tuple: the ``by`` columns, then each of ``aggs`` in dict order
    (``out_name -> "count" | (func, column)``, func in max, min, sum, count, avg, the column
    ``value``; a bare ``func`` reads ``value`` too: ``aggs.py``). An output keeps its triggering
    row's ``_sn, _snm, _t0, _part``. ``history`` is a small number in practice; the window is
    evaluated with one vectorized step per offset ``0 .. history-1``.

    >>> import pyarrow as pa
    >>> batch = pa.RecordBatch.from_pydict({"g": [1, 1, 1, 1], "v": [4, 2, 7, 1],
    ...     "_sn": [0, 1, 2, 3], "_snm": [0] * 4, "_t0": [0.0] * 4,
    ...     "_part": pa.array([0] * 4, pa.int32())})
    >>> op = CountWindowAggregate(by=["g"], value="v", history=2, every=2,
    ...     aggs={"hi": "max", "mean": "avg"})
    >>> _ = op.bind(batch.schema)
    >>> op.process(batch).to_pydict()["mean"]
    [3.0, 4.0]
    """

    stateful = True

    def __init__(
        self,
        by: Sequence[str],
        value: str,
        history: int,
        slide: int = 1,
        every: int = 1,
        aggs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        op = "CountWindowAggregate"
        for name, v in (("history", history), ("slide", slide), ("every", every)):
            if not isinstance(v, int) or v < 1:
                raise PlanError(f"{op}: {name} must be an integer >= 1 (got {v!r})")
        self.coder = KeyCoder(op, by)
        self.value, self.history, self.slide, self.every = value, history, slide, every
        self.aggs = parse_aggs(op, aggs if aggs is not None else {}, value=value)
        one_value_column(op, self.aggs, value)  # the window holds one column's values
        self._dtype = np.dtype(np.float64)
        self._table = KeyTable(self._spec())

    def _spec(self) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
        # n: tuples seen; last: the last `history` values, most recent first.
        return {"n": (np.dtype(np.int64), ()), "last": (self._dtype, (self.history,))}

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        op = "CountWindowAggregate"
        require_columns(op, input_schema, [self.value, *read_columns(self.aggs)])
        self.coder.bind(input_schema)
        self._dtype = value_dtype(op, input_schema, self.value)
        keys = None if self.coder.exact else self.coder.key_schema
        self._table = rebind(self._table, KeyTable(self._spec(), keys, verify=True))
        fields = [*self.coder.key_schema, *agg_fields(self.aggs, {self.value: self._dtype})]
        check_output_names(op, fields)
        return output_schema(fields)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        schema = self.output_schema
        if batch.num_rows == 0:
            return empty(schema)
        part, code = part_array(batch), self.coder.encode(batch)
        values = value_array("CountWindowAggregate", batch, self.value, self._dtype)
        order, starts = groups_of(part, code)
        sizes = np.diff(np.r_[starts, order.size])
        group = np.repeat(np.arange(starts.size), sizes)  # group of every sorted row
        rank = np.arange(order.size) - starts[group]  # position within the group

        heads = order[starts]
        keys = None if self._table.keys is None else self.coder.keys(batch).take(
            pa.array(heads))
        found = self._table.find(part[heads], code[heads], keys=keys)
        n0 = self._table.get("n", found)
        last0 = self._table.get("last", found)
        v = values[order]

        n = n0[group] + rank + 1
        fires = (n % self.slide == 0) & ((n // self.slide) % self.every == 0)
        out_rows = self._emit_rows(fires, v, rank, group, n, last0)

        self._update(part, code, order, starts, sizes, found, n0, last0, v, keys)
        if not fires.any():
            return empty(schema)
        emitted = order[fires]
        out = np.argsort(emitted, kind="stable")  # back to SN order
        picked = batch.take(pa.array(emitted[out]))
        columns = [*(picked.column(c) for c in self.coder.columns),
                   *(pa.array(a[out]) for a in out_rows)]
        return assemble(schema, columns, batch, emitted[out])

    def _emit_rows(self, fires: np.ndarray, v: np.ndarray, rank: np.ndarray,
                   group: np.ndarray, n: np.ndarray, last0: np.ndarray) -> list[np.ndarray]:
        """The aggregates of every firing row (in sorted order)."""
        j = np.flatnonzero(fires)
        r, g = rank[j], group[j]
        size = np.minimum(n[j], self.history)
        window = np.zeros((j.size, self.history), dtype=self._dtype)
        valid = np.arange(self.history)[None, :] < size[:, None]
        for o in range(self.history):
            in_batch = o <= r
            window[in_batch, o] = v[j[in_batch] - o]
            old = ~in_batch
            window[old, o] = last0[g[old], np.maximum(o - r[old] - 1, 0)]
        low, high = _extremes(self._dtype)
        total = np.where(valid, window, 0).sum(axis=1)
        results = {
            "max": lambda: np.where(valid, window, low).max(axis=1),
            "min": lambda: np.where(valid, window, high).min(axis=1),
            "sum": lambda: total,
            "count": lambda: size.astype(np.int64),
            "avg": lambda: total / size,
        }
        return [results[a.func]() for a in self.aggs.values()]

    def _update(self, part: np.ndarray, code: np.ndarray, order: np.ndarray,
                starts: np.ndarray, sizes: np.ndarray, found: np.ndarray, n0: np.ndarray,
                last0: np.ndarray, v: np.ndarray, keys: pa.Table | None) -> None:
        """New count and last values of every group in the batch."""
        ends = starts + sizes - 1
        last = np.empty_like(last0)
        for o in range(self.history):
            recent = o < sizes
            last[recent, o] = v[ends[recent] - o]
            last[~recent, o] = last0[~recent, np.maximum(o - sizes[~recent], 0)]
        n = n0 + sizes
        present = found >= 0
        self._table.cols["n"][found[present]] = n[present]
        self._table.cols["last"][found[present]] = last[present]
        new = ~present
        heads = order[starts[new]]
        self._table.insert(part[heads], code[heads], None, {"n": n[new], "last": last[new]},
                           None if keys is None else keys.filter(pa.array(new)))


def _extremes(dtype: np.dtype) -> tuple[Any, Any]:
    if dtype.kind == "f":
        return -np.inf, np.inf
    info = np.iinfo(dtype)
    return info.min, info.max
