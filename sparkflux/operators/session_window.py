"""Event-time session windows per key, closed by watermarks.

A row with time ``t`` opens the interval ``[t, t + gap)``; the rows of a key whose intervals
overlap form one session ``[first time, last time + gap)``. Rows may come in any time order
the watermark allows: a row that falls between two sessions of its key merges them. A session
closes once its partition's watermark reaches its end ``last + gap``: no row still to come
(time at or after the watermark) can touch it.

State: per key its open (and closed, not yet released) sessions with their partial
aggregates, kept sorted by key and start. A batch gathers the sessions of its keys, sorts them
with its rows as one-row sessions, and merges overlapping neighbours (a segmented running
maximum of the ends); no Python loop runs per row or per key.

Output order. A session's row keeps the ``(_sn, _snm)`` of its latest row: a row belongs to
one session, so no two outputs share it. As in ``TimeWindowAggregate`` a closed session is
released only once its SN is at most ``min(input progress, lowest SN an open session will
carry - 1)``, so the output is in SN order across ``advance`` calls, and its watermark is the
lowest start of a session not yet emitted (or the input's).

Sums and averages of floating values may differ in the last bits with batch boundaries (the
order partial sums are added in); integer values, counts, minima and maxima are exact. A row
behind the watermark may open a session again after it was emitted (emitted once more).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.model.batch import empty, sn_array, snm_array
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import Frontier, release_closed
from sparkflux.model.schema import T0
from sparkflux.operators.aggs import (
    agg_fields,
    one_value_column,
    parse_aggs,
    read_columns,
    value_array,
    value_dtype,
)
from sparkflux.operators.base import Operator, PartitionInfo, require_columns
from sparkflux.operators.group import running
from sparkflux.operators.keyed import (
    KeyCoder,
    KeyCollision,
    TableState,
    check_output_names,
    check_time_type,
    collision,
    expand_ranges,
    int64_column,
    output_schema,
    part_array,
    rows_equal,
    runs,
    slot_of,
    time_type,
)

_INTS = ("part", "code", "start", "last", "count", "sn", "snm")


class _Sessions:
    """Every session held: sorted by key slot, then start. ``a`` holds the arrays (the
    partial aggregates in the value dtype), ``keys`` the key values (the output's)."""

    def __init__(self, keys: pa.Schema, dtype: np.dtype) -> None:
        self.dtypes: dict[str, np.dtype] = {
            **{n: np.dtype(np.int64) for n in _INTS}, "part": np.dtype(np.int32),
            "sum": dtype, "min": dtype, "max": dtype, "t0": np.dtype(np.float64)}
        self.kslot = np.zeros(0, dtype=np.int64)
        self.a = {n: np.zeros(0, dtype=t) for n, t in self.dtypes.items()}
        self.keys = keys.empty_table()

    def __len__(self) -> int:
        return int(self.kslot.size)

    def gather(self, kslots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which of the sorted unique ``kslots``, stored session) of their sessions."""
        lo = np.searchsorted(self.kslot, kslots, side="left")
        hi = np.searchsorted(self.kslot, kslots, side="right")
        return expand_ranges(lo, hi)

    def add(self, arrays: dict[str, np.ndarray], keys: pa.Table) -> None:
        """Add sessions of keys that hold none now, each key's in start order."""
        kslot = slot_of(arrays["part"], arrays["code"])
        order = np.argsort(np.concatenate([self.kslot, kslot]), kind="stable")
        self.kslot = np.concatenate([self.kslot, kslot])[order]
        self.a = {n: np.concatenate([self.a[n], np.asarray(arrays[n], dtype=t)])[order]
                  for n, t in self.dtypes.items()}
        both = pa.concat_tables([self.keys, keys.cast(self.keys.schema)])
        self.keys = both.take(pa.array(order))

    def keep(self, mask: np.ndarray) -> None:
        if mask.all():
            return
        self.kslot = self.kslot[mask]
        self.a = {n: a[mask] for n, a in self.a.items()}
        self.keys = self.keys.filter(pa.array(mask))

    def export(self, part: int) -> dict[str, Any] | None:
        rows = np.flatnonzero(self.a["part"] == part)
        if rows.size == 0:
            return None
        return {**{n: self.a[n][rows].copy() for n in self.dtypes if n != "part"},
                "keys": self.keys.take(pa.array(rows))}

    def load(self, part: int, state: dict[str, Any] | None) -> None:
        self.drop(part)
        if state is None:
            return
        arrays = {n: np.asarray(state[n]) for n in self.dtypes if n != "part"}
        arrays["part"] = np.full(len(arrays["code"]), part, dtype=np.int32)
        self.add(arrays, state["keys"])

    def drop(self, part: int) -> None:
        self.keep(self.a["part"] != part)

    def info(self) -> list[PartitionInfo]:
        per_row = 8 + sum(t.itemsize for t in self.dtypes.values())
        if len(self):
            per_row += self.keys.nbytes / len(self)
        out = []
        for p in np.unique(self.a["part"]).tolist():
            mine = self.a["part"] == p
            keys = np.unique(self.a["code"][mine]).size
            out.append(PartitionInfo(p, int(keys), int(mine.sum() * per_row)))
        return out


class SessionWindowAggregate(TableState, Operator):
    """Aggregate one value column per session of ``by``: rows of a key within ``gap`` of
    each other in event time ``time``.

    ``aggs`` maps an output name to ``"count"`` or ``(func, column)``, func in max, min, sum,
    count, avg, all of one column (default ``{"count": "count"}``; the spelling of
    ``aggs.py``); a bare ``func`` reads ``value=``. Output per closed session: the ``by``
    columns, ``names`` (the session's start, its first row's time, and its end, last time +
    gap; of ``time``'s type: int64, or its timestamp type), then ``aggs``.

    >>> import pyarrow as pa
    >>> from sparkflux.model.progress import Frontier, Progress
    >>> batch = pa.RecordBatch.from_pydict({"u": [1, 1, 1, 1], "t": [0, 12, 3, 30],
    ...     "v": [1, 2, 3, 4], "_sn": [0, 1, 2, 3], "_snm": [0] * 4, "_t0": [0.0] * 4,
    ...     "_part": pa.array([0] * 4, pa.int32())})
    >>> op = SessionWindowAggregate(by=["u"], time="t", gap=10, value="v",
    ...     aggs={"n": "count", "total": "sum"})
    >>> _ = op.bind(batch.schema)
    >>> op.process(batch).num_rows
    0
    >>> out, frontier = op.advance(Frontier.every(Progress(sn=3, wm=25), 1))
    >>> rows = out.to_pydict()
    >>> rows["session_start"], rows["session_end"], rows["n"], rows["total"], rows["_sn"]
    ([0], [22], [3], [6], [2])
    >>> frontier.of(0)
    Progress(sn=2, wm=25)
    """

    stateful = True

    def __init__(
        self,
        by: Sequence[str],
        time: str,
        gap: int,
        value: str | None = None,
        aggs: Mapping[str, Any] | None = None,
        names: tuple[str, str] = ("session_start", "session_end"),
    ) -> None:
        super().__init__()
        self._seen_t0 = 0.0  # the newest input's ``_t0``: a session is timed from its close
        op = "SessionWindowAggregate"
        if isinstance(gap, bool) or not isinstance(gap, int) or gap < 1:
            raise PlanError(f"{op}: gap must be an integer >= 1 in the units of {time!r} "
                            f"(got {gap!r})")
        if len(names) != 2 or not all(isinstance(n, str) and n for n in names):
            raise PlanError(f"{op}: names must be two column names (start, end); got {names!r}")
        self.coder = KeyCoder(op, by)
        self.time, self.gap = time, gap
        self.aggs = parse_aggs(op, aggs if aggs is not None else {"count": "count"},
                               value=value)
        self.value = one_value_column(op, self.aggs, value)  # None: counts only
        self.names = tuple(names)
        self._dtype: np.dtype = np.dtype(np.float64)
        self._held = _Sessions(pa.schema([]), self._dtype)

    def _state(self) -> _Sessions:
        return self._held

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        op = "SessionWindowAggregate"
        value = [] if self.value is None else [self.value]
        require_columns(op, input_schema, [self.time, *value, *read_columns(self.aggs)])
        self.coder.bind(input_schema)
        check_time_type(op, input_schema, self.time)
        self._dtype = (np.dtype(np.int64) if self.value is None
                       else value_dtype(op, input_schema, self.value))
        if len(self._held) == 0:
            self._held = _Sessions(self.coder.key_schema, self._dtype)
        bounds = time_type(input_schema, self.time)
        fields = [*self.coder.key_schema, pa.field(self.names[0], bounds),
                  pa.field(self.names[1], bounds),
                  *agg_fields(self.aggs, {c: self._dtype for c in value})]
        check_output_names(op, fields)
        return output_schema(fields)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Merge the rows into their keys' sessions; nothing is emitted here."""
        if batch.num_rows == 0:
            return empty(self.output_schema)
        op, held = "SessionWindowAggregate", self._held
        time = int64_column(op, batch, self.time)
        values = (np.zeros(batch.num_rows, dtype=self._dtype) if self.value is None
                  else value_array(op, batch, self.value, self._dtype))
        part, code = part_array(batch), self.coder.encode(batch)
        kslot = slot_of(part, code)
        ukeys, first_row = np.unique(kslot, return_index=True)
        owner, old = held.gather(ukeys)
        keys = self.coder.keys(batch)
        self._verify(old, first_row[owner], part, code, keys)

        # Every stored session of the batch's keys, then every row as a one-row session.
        rows = {"part": part, "code": code, "start": time, "last": time,
                "count": np.ones(time.size, dtype=np.int64), "sum": values, "min": values,
                "max": values, "sn": sn_array(batch), "snm": snm_array(batch),
                "t0": batch.column(T0).to_numpy()}
        self._seen_t0 = max(self._seen_t0, float(rows["t0"].max(initial=0.0)))
        pool = {n: np.concatenate([held.a[n][old], rows[n]]) for n in held.dtypes}
        pool_keys = pa.concat_tables([held.keys.take(pa.array(old)),
                                      keys.cast(held.keys.schema)])
        pool_slot = np.concatenate([held.kslot[old], kslot])
        order = np.lexsort((pool["start"], pool_slot))
        p = {n: a[order] for n, a in pool.items()}
        s = pool_slot[order]
        key_starts = runs(s)
        sizes = np.diff(np.r_[key_starts, s.size])
        if ((p["part"][1:] != p["part"][:-1]) | (p["code"][1:] != p["code"][:-1]))[
                s[1:] == s[:-1]].any():
            raise KeyCollision("two mini-partition/key pairs share a state slot; please report it")

        # A piece opens a session unless it starts before the end of the ones before it.
        reach = running(np.maximum, np.full(key_starts.size, np.iinfo(np.int64).min),
                        p["last"], key_starts, sizes)
        before = np.r_[0, reach[:-1]]
        opens = np.ones(s.size, dtype=bool)
        opens[1:] = p["start"][1:] >= before[1:] + self.gap
        opens[key_starts] = True
        heads = np.flatnonzero(opens)
        session = np.cumsum(opens) - 1
        latest = np.lexsort((p["snm"], p["sn"], session))[np.r_[heads[1:], s.size] - 1]
        merged = {
            "part": p["part"][heads], "code": p["code"][heads], "start": p["start"][heads],
            "last": np.maximum.reduceat(p["last"], heads),
            "count": np.add.reduceat(p["count"], heads),
            "sum": np.add.reduceat(p["sum"], heads),
            "min": np.minimum.reduceat(p["min"], heads),
            "max": np.maximum.reduceat(p["max"], heads),
            **{n: p[n][latest] for n in ("sn", "snm", "t0")},
        }
        keep = np.ones(len(held), dtype=bool)
        keep[old] = False
        held.keep(keep)
        held.add(merged, pool_keys.take(pa.array(order[heads])))
        return empty(self.output_schema)

    def _verify(self, old: np.ndarray, rows: np.ndarray, part: np.ndarray, code: np.ndarray,
                keys: pa.Table) -> None:
        """The stored sessions gathered for batch ``rows`` belong to their keys."""
        held = self._held
        if ((held.a["part"][old] != part[rows]) | (held.a["code"][old] != code[rows])).any():
            raise KeyCollision("two mini-partition/key pairs share a state slot; please report it")
        if not self.coder.exact and old.size:
            mine, theirs = held.keys.take(pa.array(old)), keys.take(pa.array(rows))
            bad = ~rows_equal(mine, theirs.cast(mine.schema))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise collision(self.coder.columns, mine.slice(i, 1), theirs.slice(i, 1))

    def advance(self, frontier: Frontier) -> tuple[pa.RecordBatch, Frontier]:
        """Close, per partition, the sessions that end at or before its watermark; release
        those at or below its output claim; hold the output frontier back with the rest."""
        held = self._held
        if len(held) == 0:
            return empty(self.output_schema), frontier
        part = held.a["part"]
        closed = held.a["last"] + self.gap <= frontier.wm[part]
        release, claim = release_closed(frontier.sn, part, held.a["sn"], closed)
        wm = frontier.wm.copy()
        np.minimum.at(wm, part[~release], held.a["start"][~release])
        out = self._rows(np.flatnonzero(release))
        held.keep(~release)
        return out, Frontier(claim, wm)

    def _rows(self, rows: np.ndarray) -> pa.RecordBatch:
        """Output rows for the given sessions, in SN order, each timed (``_t0``) from its
        close: the newest input seen, or the session's latest tuple if later."""
        schema = self.output_schema
        if rows.size == 0:
            return empty(schema)
        a = self._held.a
        rows = rows[np.lexsort((a["snm"][rows], a["sn"][rows]))]
        count, total = a["count"][rows], a["sum"][rows]
        results = {"max": a["max"][rows], "min": a["min"][rows], "sum": total, "count": count,
                   "avg": total / count}
        keys = self._held.keys.take(pa.array(rows))
        arrays = [*(keys.column(c).combine_chunks() for c in self.coder.columns),
                  pa.array(a["start"][rows]), pa.array(a["last"][rows] + self.gap),
                  *(pa.array(results[a.func]) for a in self.aggs.values()),
                  pa.array(a["sn"][rows]), pa.array(a["snm"][rows]),
                  pa.array(np.maximum(a["t0"][rows], self._seen_t0)),
                  pa.array(a["part"][rows])]
        arrays = [x if x.type == f.type else x.cast(f.type)
                  for x, f in zip(arrays, schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
