"""The symmetric hash join of two streams, within a time bound.

``left.join(right, ...)`` repartitions both inputs on their join keys (two ports of one
exchange, ``dataflow/ports.py``) and runs this operator on each mini-partition. It takes
both sides' rows in their merged order, ``(_sn, _snm)`` then left before right, and works as
the one-stream ``WindowJoin`` does on that order: an arriving tuple joins every stored tuple
of the other side with the same key whose time is within ``window`` of its own, then is
stored; stored tuples more than ``window`` behind the partition's watermark are purged. The
two sides' times need not follow their SN order (an aggregate's rows come out when their
window closes, long after the input that made them): matching and purging read each tuple's
own time and the watermark only, so the result is exact in any order the watermark allows. A
match carries the SN of the later tuple of the pair (its k-th match gets minor ``k``).

``window`` is the state bound. A join "without a window" is one whose window is as long as a
row stays relevant (the retention: how long after a person registers an auction of theirs
may come, say); rows outside it are never matched, and the state never grows beyond it.

Output: the key columns (with the left side's names), the left's other columns, the right's
other columns (a name the output already has gets ``suffix``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.model.batch import concat, empty
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import Frontier
from sparkflux.model.schema import PART, SN, SNM, T0, user_fields
from sparkflux.operators.base import Operator, PartitionInfo, require_columns
from sparkflux.operators.join import WindowJoin
from sparkflux.operators.keyed import check_time_type

SIDE, TIME = "join_side", "join_time"  # helper columns of the merged stream


class StreamJoin(Operator):
    """Join a left and a right stream on ``left_on`` = ``right_on`` within ``window``.

    >>> import pyarrow as pa
    >>> def rows(d, sn):
    ...     n = len(sn)
    ...     return pa.RecordBatch.from_pydict({**d, "_sn": sn, "_snm": [0] * n,
    ...         "_t0": [0.0] * n, "_part": pa.array([0] * n, pa.int32())})
    >>> people = rows({"id": [1, 2], "name": ["ann", "bo"], "t": [0, 1]}, [0, 1])
    >>> bids = rows({"who": [2, 1, 2], "price": [5, 7, 9], "t": [3, 4, 40]}, [2, 3, 4])
    >>> op = StreamJoin(left_on=["id"], right_on=["who"], time=("t", "t"), window=10)
    >>> _ = op.bind_sides(people.schema, bids.schema)
    >>> out = op.process_sides(people, bids).to_pydict()
    >>> out["id"], out["name"], out["price"], out["_sn"]
    ([2, 1], ['bo', 'ann'], [5, 7], [2, 3])
    """

    stateful = True
    inputs = 2

    def __init__(self, left_on: Sequence[str], right_on: Sequence[str],
                 time: tuple[str, str], window: int, suffix: str = "_right") -> None:
        super().__init__()
        op = "join"
        if isinstance(left_on, str) or isinstance(right_on, str) or not left_on:
            raise PlanError(f"{op}: on / left_on / right_on must be non-empty lists of columns")
        if len(left_on) != len(right_on):
            raise PlanError(f"{op}: left_on has {len(left_on)} columns but right_on "
                            f"{len(right_on)}; give one right column per left column")
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise PlanError(f"{op}: window must be an integer >= 0 in the units of the time "
                            f"columns (got {window!r})")
        self.left_on, self.right_on = list(left_on), list(right_on)
        self.time = time
        self.window = window
        self.suffix = suffix
        self._left_cols: list[str] = []
        self._right_cols: list[str] = []
        self._right_names: list[str] = []
        self._merged: pa.Schema = pa.schema([])
        self._inner: WindowJoin | None = None

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        raise PlanError("join takes two inputs (left.join(right, ...))")

    def bind_sides(self, left: pa.Schema, right: pa.Schema) -> pa.Schema:
        """Check both inputs' columns; returns (and remembers) the output schema."""
        op = "join"
        lt, rt = self.time
        require_columns(f"{op} (left)", left, [*self.left_on, lt])
        require_columns(f"{op} (right)", right, [*self.right_on, rt])
        check_time_type(op, left, lt)
        check_time_type(op, right, rt)
        for a, b in zip(self.left_on, self.right_on, strict=True):
            ta, tb = left.field(a).type, right.field(b).type
            if ta != tb and not (pa.types.is_integer(ta) and pa.types.is_integer(tb)):
                raise PlanError(f"{op}: key {a!r} is {ta} on the left but {b!r} is {tb} on "
                                f"the right; cast one of them")
        self._left_cols = [f.name for f in user_fields(left) if f.name not in self.left_on]
        self._right_cols = [f.name for f in user_fields(right) if f.name not in self.right_on]
        taken = set(self.left_on) | set(self._left_cols)
        self._right_names = [c + self.suffix if c in taken else c for c in self._right_cols]
        for name in (SIDE, TIME):
            if name in taken or name in self._right_names:
                raise PlanError(f"{op}: column {name!r} is reserved by the join; rename it")
        fields = [left.field(c) for c in self.left_on]
        fields += [left.field(c).with_nullable(True) for c in self._left_cols]
        fields += [right.field(c).with_name(n).with_nullable(True)
                   for c, n in zip(self._right_cols, self._right_names, strict=True)]
        fields += [pa.field(SIDE, pa.int8(), False), pa.field(TIME, pa.int64(), False)]
        self._merged = pa.schema([*fields, *(f for f in left if f.name in (SN, SNM, T0, PART))])
        self._inner = WindowJoin(on=self.left_on, side=SIDE, time=TIME, window=self.window,
                                 left=self._left_cols, right=self._right_names,
                                 by_watermark=True)
        self._output_schema = self._inner.bind(self._merged)
        return self._output_schema

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        raise TypeError("join takes its two inputs through process_sides")

    def process_sides(self, left: pa.RecordBatch | None, right: pa.RecordBatch | None
                      ) -> pa.RecordBatch:
        """Both sides' rows of one pass (each in SN order): the matches, in SN order."""
        assert self._inner is not None
        parts = []
        if left is not None and left.num_rows:
            parts.append(self._side(left, 0))
        if right is not None and right.num_rows:
            parts.append(self._side(right, 1))
        if not parts:
            return empty(self.output_schema)
        both = parts[0] if len(parts) == 1 else concat(parts, self._merged)
        if len(parts) > 1:
            order = np.lexsort((both.column(SIDE).to_numpy(), both.column(SNM).to_numpy(),
                                both.column(SN).to_numpy()))
            both = both.take(pa.array(order))
        return self._inner.process(both)

    def _side(self, rows: pa.RecordBatch, side: int) -> pa.RecordBatch:
        """One side's rows as the merged stream's (the other side's columns null)."""
        n = rows.num_rows
        keys = self.left_on if side == 0 else self.right_on
        mine = dict(zip(self._left_cols, self._left_cols, strict=True)) if side == 0 else \
            dict(zip(self._right_names, self._right_cols, strict=True))
        arrays = []
        for f in self._merged:
            if f.name in self.left_on:
                col = rows.column(keys[self.left_on.index(f.name)])
            elif f.name == SIDE:
                col = pa.array(np.full(n, side, dtype=np.int8))
            elif f.name == TIME:
                col = rows.column(self.time[side]).cast(pa.int64())
            elif f.name in (SN, SNM, T0, PART):
                col = rows.column(f.name)
            elif f.name in mine:
                col = rows.column(mine[f.name])
            else:
                col = pa.nulls(n, f.type)
            arrays.append(col if col.type == f.type else col.cast(f.type))
        return pa.RecordBatch.from_arrays(arrays, schema=self._merged)

    def advance(self, frontier: Frontier) -> tuple[pa.RecordBatch, Frontier]:
        assert self._inner is not None
        return self._inner.advance(frontier)

    def get_partition_state(self, part: int) -> Any:
        assert self._inner is not None
        return self._inner.get_partition_state(part)

    def install_partition_state(self, part: int, state: Any) -> None:
        assert self._inner is not None
        self._inner.install_partition_state(part, state)

    def drop_partition(self, part: int) -> None:
        assert self._inner is not None
        self._inner.drop_partition(part)

    def partition_info(self) -> list[PartitionInfo]:
        return [] if self._inner is None else self._inner.partition_info()
