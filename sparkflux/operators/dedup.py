"""Deduplication: the first row of every key passes, the later ones are dropped.

Without ``within`` a key is remembered for ever (the state grows with the number of keys).
With ``within`` and ``time`` a row passes when its key has not passed a row in the last
``within`` time units: its time is at least ``f + within``, ``f`` the time of the key's last
passed row, and it becomes the key's new ``f``. The rule reads the rows' times alone, so the
result does not depend on batch boundaries nor on when progress comes; the watermark only
bounds the state: a key is forgotten once its partition's watermark reaches ``f + within``
(no row still to come can be a duplicate of it). A row behind the watermark (late) of a
forgotten key passes.

Within a batch the rows of a key form chains (a passed row, the first later row ``within``
after it, ...). The next link of every row is found at once, with a sparse table of range
maxima of the times (rows need not come in time order), and the chain from each key's first
passing row is marked by pointer doubling: O(n log n) in O(log n) numpy steps, no loop over
rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from sparkflux.model.batch import empty
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import Frontier
from sparkflux.model.schema import user_fields
from sparkflux.operators.base import Operator, require_columns
from sparkflux.operators.keyed import (
    KeyCoder,
    KeyTable,
    TableState,
    assemble,
    check_time_type,
    groups_of,
    int64_column,
    output_schema,
    part_array,
    rebind,
)

_STATE = {"f": (np.int64, ())}  # the time of the key's last passed row


class Dedup(TableState, Operator):
    """Pass the first row of every key of ``by``; with ``within`` and ``time``, again once
    ``within`` time units passed since the key's last passed row.

    Output: the input's user columns, unchanged; a row keeps its ``_sn, _snm, _t0, _part``.

    >>> import pyarrow as pa
    >>> batch = pa.RecordBatch.from_pydict({"k": [1, 1, 2, 1, 1], "t": [0, 3, 4, 10, 12],
    ...     "_sn": [0, 1, 2, 3, 4], "_snm": [0] * 5, "_t0": [0.0] * 5,
    ...     "_part": pa.array([0] * 5, pa.int32())})
    >>> op = Dedup(by=["k"], within=10, time="t")
    >>> _ = op.bind(batch.schema)
    >>> op.process(batch).to_pydict()["_sn"]
    [0, 2, 3]
    """

    stateful = True

    def __init__(self, by: Sequence[str], within: int | None = None,
                 time: str | None = None) -> None:
        super().__init__()
        op = "Dedup"
        if (within is None) != (time is None):
            raise PlanError(f"{op}: give within and time together (a key is forgotten within "
                            f"time units after its row), or neither (remembered for ever)")
        if within is not None and (isinstance(within, bool) or not isinstance(within, int)
                                   or within < 1):
            raise PlanError(f"{op}: within must be an integer >= 1 (got {within!r})")
        self.coder = KeyCoder(op, by)
        self.within, self.time = within, time
        self._columns: list[str] = []
        self._table = KeyTable(_STATE)

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        op = "Dedup"
        self.coder.bind(input_schema)
        if self.time is not None:
            require_columns(op, input_schema, [self.time])
            check_time_type(op, input_schema, self.time)
        keys = None if self.coder.exact else self.coder.key_schema
        self._table = rebind(self._table, KeyTable(_STATE, keys, verify=True))
        fields = user_fields(input_schema)
        self._columns = [f.name for f in fields]
        return output_schema(fields)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        schema = self.output_schema
        if batch.num_rows == 0:
            return empty(schema)
        table = self._table
        part, code = part_array(batch), self.coder.encode(batch)
        order, starts = groups_of(part, code)
        n = order.size
        end = np.r_[starts[1:], n] - 1  # last position of every group
        heads = order[starts]
        keys = None if table.keys is None else self.coder.keys(batch).take(pa.array(heads))
        found = table.find(part[heads], code[heads], keys=keys)
        present = found >= 0

        if self.within is None:
            passes = np.zeros(n, dtype=bool)
            passes[starts[~present]] = True
            ts = np.zeros(n, dtype=np.int64)
        else:
            assert self.time is not None  # given with within (``__init__`` checks)
            ts = int64_column("Dedup", batch, self.time)[order]
            passes = self._chains(ts, starts, end, found, present)

        # The key's new f: the time of its last passed row in the batch.
        last = np.maximum.reduceat(np.where(passes, np.arange(n), -1), starts)
        moved = present & (last >= 0)
        table.cols["f"][found[moved]] = ts[last[moved]]
        new = ~present
        table.insert(part[heads[new]], code[heads[new]], None, {"f": ts[last[new]]},
                     None if keys is None else keys.filter(pa.array(new)))

        rows = np.sort(order[passes])  # back to SN order
        kept = batch.take(pa.array(rows))
        return assemble(schema, [kept.column(c) for c in self._columns], batch, rows)

    def _chains(self, ts: np.ndarray, starts: np.ndarray, end: np.ndarray, found: np.ndarray,
                present: np.ndarray) -> np.ndarray:
        """Which rows (in group order) pass: the chain from each group's first passing row."""
        assert self.within is not None
        n = ts.size
        group = np.repeat(np.arange(starts.size), np.diff(np.r_[starts, n]))
        table = _RangeMax(ts)
        # A group's first passing row: its first row if the key is new, else the first at
        # least `within` after the stored f.
        first = starts.copy()
        f = self._table.cols["f"][found[present]]
        first[present] = table.first_at_least(starts[present], end[present], f + self.within)
        # The next link of every row: the first later row of its group `within` after it.
        link = np.append(table.first_at_least(np.arange(n) + 1, end[group], ts + self.within), n)
        mark = np.zeros(n + 1, dtype=bool)
        mark[first] = True
        while True:  # after step s, every row up to 2 ** s links down a chain is marked
            mark[link[mark]] = True
            if (link == n).all():
                break
            link = link[link]
        return mark[:n]

    def advance(self, frontier: Frontier) -> tuple[pa.RecordBatch, Frontier]:
        """Forget the keys no row at or after their partition's watermark can repeat."""
        table = self._table
        if self.within is not None and len(table):
            table.keep(table.cols["f"] + self.within > frontier.wm[table.part])
        return empty(self.output_schema), frontier


class _RangeMax:
    """Maxima of ``values`` over power-of-two ranges, to find the first element >= x after a
    position in O(log n) vectorized steps."""

    def __init__(self, values: np.ndarray) -> None:
        self.levels = [values]
        width = 1
        while 2 * width <= values.size:
            prev = self.levels[-1]
            self.levels.append(np.maximum(prev[:-width], prev[width:]))
            width *= 2

    def first_at_least(self, lo: np.ndarray, hi: np.ndarray, x: np.ndarray) -> np.ndarray:
        """For every query, the first position p in ``[lo, hi]`` with ``values[p] >= x``, or
        ``n`` when there is none."""
        n = self.levels[0].size
        pos = lo.copy()
        for k in range(len(self.levels) - 1, -1, -1):  # skip whole ranges below x
            level = self.levels[k]
            span = 1 << k
            inside = pos + span - 1 <= hi
            below = level[np.minimum(pos, level.size - 1)] < x
            pos = np.where(inside & below, pos + span, pos)
        return np.where(pos <= hi, pos, n)
