"""Session reconstruction: pair each END event with its key's open START (the GB1 of netmon).

Per key, a START opens a session (a second START restarts it: the new start time replaces the
old one); an END on an open session emits one row and closes it; an END with no open session
and rows of any other kind change nothing. The state is one start time per open key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.model.batch import empty
from sparkflux.model.errors import PlanError
from sparkflux.operators.base import Operator, require_columns
from sparkflux.operators.keyed import (
    KeyCoder,
    KeyTable,
    TableState,
    assemble,
    check_output_names,
    check_time_type,
    groups_of,
    int64_column,
    output_schema,
    part_array,
    rebind,
)

_STATE = {"start": (np.int64, ())}  # the start time of every open session


class SessionReconstruction(TableState, Operator):
    """Emit ``carry`` columns of each END row and ``dur = END.time - START.time`` (int64).

    ``key`` are the grouping columns, ``kind`` the column telling START (value ``start``) from
    END (value ``end``), ``time`` an integer or timestamp column. An output keeps its END row's
    ``_sn, _snm, _t0, _part`` (at most one output per input).

    Within a batch the work is vectorized: rows are grouped by key (stably, so each group is in
    SN order), an END's session is open iff the row before it in its group is a START, and
    only the first row of a group consults the state.

    >>> import pyarrow as pa
    >>> batch = pa.RecordBatch.from_pydict({"k": [1, 2, 1, 2], "kind": [0, 0, 1, 1],
    ...     "ts": [10, 11, 15, 30], "_sn": [0, 1, 2, 3], "_snm": [0] * 4, "_t0": [0.0] * 4,
    ...     "_part": pa.array([0] * 4, pa.int32())})
    >>> op = SessionReconstruction(key=["k"], kind="kind", start=0, end=1, time="ts",
    ...     carry=["k"])
    >>> _ = op.bind(batch.schema)
    >>> out = op.process(batch).to_pydict()
    >>> out["k"], out["dur"], out["_sn"]
    ([1, 2], [5, 19], [2, 3])
    """

    stateful = True

    def __init__(
        self,
        key: Sequence[str],
        kind: str,
        start: Any,
        end: Any,
        time: str,
        carry: Sequence[str],
    ) -> None:
        super().__init__()
        self.coder = KeyCoder("SessionReconstruction", key)
        self.kind, self.start, self.end, self.time = kind, start, end, time
        self.carry = list(carry)
        if isinstance(carry, str):
            raise PlanError("SessionReconstruction: carry must be a list of column names")
        self._table = KeyTable(_STATE)

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        op = "SessionReconstruction"
        require_columns(op, input_schema, [self.kind, self.time, *self.carry])
        self.coder.bind(input_schema)
        check_time_type(op, input_schema, self.time)
        fields = [*(input_schema.field(c) for c in self.carry), pa.field("dur", pa.int64())]
        check_output_names(op, fields)
        for value in (self.start, self.end):
            try:
                pc.equal(pa.array([], input_schema.field(self.kind).type), value)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise PlanError(
                    f"{op}: kind value {value!r} cannot be compared with column {self.kind!r} "
                    f"of type {input_schema.field(self.kind).type}"
                ) from e
        # Keep key values only to verify hashed codes; the output takes them from END rows.
        keys = None if self.coder.exact else self.coder.key_schema
        self._table = rebind(self._table, KeyTable(_STATE, keys, verify=True))
        return output_schema(fields)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        schema = self.output_schema
        kind = batch.column(self.kind)
        is_start = pc.fill_null(pc.equal(kind, self.start), False).to_numpy(zero_copy_only=False)
        is_end = pc.fill_null(pc.equal(kind, self.end), False).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(is_start | is_end)  # other kinds are ignored entirely
        if rows.size == 0:
            return empty(schema)
        sub = batch if rows.size == batch.num_rows else batch.take(pa.array(rows))
        start = is_start[rows]
        time = int64_column("SessionReconstruction", sub, self.time)
        part, code = part_array(sub), self.coder.encode(sub)

        order, starts = groups_of(part, code)
        s_start, s_time = start[order], time[order]

        # State before each row: the previous row of its group, or the table for a first row.
        heads = order[starts]
        keys = None if self._table.keys is None else self.coder.keys(sub).take(pa.array(heads))
        found = self._table.find(part[heads], code[heads], keys=keys)
        open_before = np.r_[False, s_start[:-1]]
        opened_at = np.r_[0, s_time[:-1]]
        open_before[starts] = found >= 0
        opened_at[starts] = self._table.get("start", found)

        emit = ~s_start & open_before
        out = np.sort(order[emit])  # back to SN order
        dur = np.empty(rows.size, dtype=np.int64)
        dur[order[emit]] = s_time[emit] - opened_at[emit]

        self._update(sub, part, code, order, starts, s_start, s_time, found)
        if out.size == 0:
            return empty(schema)
        carried = sub.take(pa.array(out))
        columns = [*(carried.column(c) for c in self.carry), pa.array(dur[out])]
        return assemble(schema, columns, sub, out)

    def _update(self, sub: pa.RecordBatch, part: np.ndarray, code: np.ndarray,
                order: np.ndarray, starts: np.ndarray, s_start: np.ndarray,
                s_time: np.ndarray, found: np.ndarray) -> None:
        """A group's last row decides its state: START leaves it open, END closed."""
        last = np.r_[starts[1:], order.size] - 1
        ends_open = s_start[last]
        present = found >= 0
        self._table.cols["start"][found[present & ends_open]] = s_time[last[present & ends_open]]
        self._table.delete(found[present & ~ends_open])
        new = ~present & ends_open
        rows = order[last[new]]
        keys = None if self._table.keys is None else self.coder.keys(sub).take(pa.array(rows))
        self._table.insert(part[rows], code[rows], None, {"start": s_time[last[new]]}, keys)
