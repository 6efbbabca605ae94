"""Event-time window group-by aggregates, closed by watermarks.

A tuple with time ``t`` belongs to every window ``[start, start + size)`` with ``start`` a
multiple of ``slide`` and ``start <= t < start + size`` (``size // slide`` windows; one when
tumbling). ``process`` only folds tuples into per-(group, window) partial aggregates; windows
close in ``advance`` once the watermark reaches their end (no later tuple can fall into them).

Output order. A window's row carries the SN of its latest tuple, ``(_sn, child_minor(_snm,
j))`` with ``j = (start // slide) % (size // slide)`` so that the overlapping windows that a
tuple ends get distinct minors. A window that closes later can end on an *earlier* tuple than
one that closes now (another group, or a longer-open overlapping window), so a closed window
is released only once its SN is at most the output progress ``min(input progress, lowest SN
an open window will carry - 1)``; until then it waits, closed, in the state. Every output of
the operator is therefore above every progress it claimed before, and the output stream is
in SN order across ``advance`` calls.

Output watermark. Downstream operators read the output's ``window_start`` (or
``window_end``) as their event time, so the watermark a partition claims is the lowest start
of a window it has not emitted yet: a held or open window's, or the first window a tuple at or
after the input watermark can open. Passing the input watermark on instead would let a
downstream window close before the rows that fall into it are released, and re-open when
they come.

Everything is per mini-partition: a window closes when *its* partition's watermark passes
its end, whatever the other partitions of the shell (the site hosts only some of them).

Input in any order (the racing-replicas paper's Algorithm 3, ``arrival_input``): the partial
aggregates fold the same whatever order the tuples come in, a window is numbered after its
highest ``(_sn, _snm)``, not its last-folded tuple, and windows close and leave only in
``advance``, by the watermark and at or below the output claim. So racing copies may feed it
rows as they arrive, above the input's SN frontier, and it emits the rows it would have
emitted from the SN-ordered input. This rests on the watermark being true (no tuple of a
window comes after the watermark passed its end): the ingress makes it so for sources
(late records go to the dead letters); floating sums differ in their last bits with the
order of additions, as they do with batch boundaries.

A tuple that arrives for a window already released (a watermark that was wrong) opens that
window again, and it is emitted once more at the next ``advance``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.model.batch import child_minor, empty, sn_array, snm_array, sort_by_sn
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import END_OF_STREAM, NO_WATERMARK, Frontier, release_closed
from sparkflux.model.schema import T0
from sparkflux.operators.aggs import (
    AGGREGATES,
    agg_fields,
    parse_aggs,
    read_columns,
    value_array,
    value_columns,
    value_dtype,
)
from sparkflux.operators.base import Operator, require_columns
from sparkflux.operators.keyed import (
    KeyCoder,
    KeyTable,
    TableState,
    check_output_names,
    check_time_type,
    groups_of,
    int64_column,
    output_schema,
    part_array,
    rebind,
    time_type,
)

Spec = dict[str, tuple[np.dtype, tuple[int, ...]]]
# The partial aggregates of a column that each function needs.
_PARTIALS = {"sum": ("sum",), "avg": ("sum",), "min": ("min",), "max": ("max",), "count": ()}


def after(sn: np.ndarray, snm: np.ndarray, than_sn: np.ndarray, than_snm: np.ndarray
          ) -> np.ndarray:
    """Which ``(sn, snm)`` come after ``(than_sn, than_snm)``: a window is numbered after
    the highest of its tuples, whichever came last."""
    later: np.ndarray = (sn > than_sn) | ((sn == than_sn) & (snm > than_snm))
    return later


class TimeWindowAggregate(TableState, Operator):
    """Aggregates per group of ``by`` over event-time windows of ``time``.

    ``aggs`` maps an output name to ``"count"`` or ``(func, column)``, func in max, min, sum,
    count, avg (default ``{"count": "count"}``; ``aggs.py`` has the spelling, shared with
    ``GroupAggregate``): ``{"n": "count", "bytes": ("sum", "bytes"), "slowest": ("max",
    "dwell_ms")}``. A bare ``"sum"`` reads ``value=`` (the older spelling, still accepted).

    Output per closed window: the ``by`` columns, ``window_start``, ``window_end``, then each
    of ``aggs`` (count int64, avg float64, max/min/sum int64 or float64 as their column).
    The window bounds have ``time``'s type: int64 for an integer column, the same timestamp
    type for a timestamp one; ``size`` and ``slide`` are in ``time``'s units (microseconds
    for ``timestamp("us")``). ``names`` renames the bounds, e.g. for a second windowed step
    over the first one's output. ``slide=None`` means tumbling windows; ``size`` must be a
    multiple of ``slide``. ``by=[]`` aggregates each partition's rows as one group: put
    ``exchange(by=[])`` (or an exchange on a column every row of a window shares) before it
    for one global row per window.

    >>> import pyarrow as pa
    >>> from sparkflux.model.progress import Frontier, Progress
    >>> batch = pa.RecordBatch.from_pydict({"g": [1, 1, 1], "t": [1, 4, 12], "v": [5, 7, 1],
    ...     "_sn": [0, 1, 2], "_snm": [0] * 3, "_t0": [0.0] * 3,
    ...     "_part": pa.array([0] * 3, pa.int32())})
    >>> op = TimeWindowAggregate(by=["g"], time="t", size=10,
    ...     aggs={"n": "count", "s": ("sum", "v")})
    >>> _ = op.bind(batch.schema)
    >>> op.process(batch).num_rows
    0
    >>> out, frontier = op.advance(Frontier.every(Progress(sn=2, wm=10), 1))
    >>> out.to_pydict()["n"], out.to_pydict()["s"], out.to_pydict()["_sn"], frontier.of(0)
    ([2], [12], [1], Progress(sn=1, wm=10))
    """

    stateful = True
    arrival_input = True

    def __init__(
        self,
        by: Sequence[str],
        time: str,
        *,
        size: int,
        value: str | None = None,
        slide: int | None = None,
        aggs: Mapping[str, Any] | None = None,
        names: tuple[str, str] = ("window_start", "window_end"),
    ) -> None:
        super().__init__()
        op = "TimeWindowAggregate"
        if len(names) != 2 or not all(isinstance(n, str) and n for n in names):
            raise PlanError(f"{op}: names must be two column names (start, end); got {names!r}")
        self.names = tuple(names)
        slide = size if slide is None else slide
        for name, v in (("size", size), ("slide", slide)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise PlanError(f"{op}: {name} must be an integer >= 1 (got {v!r})")
        if size % slide:
            raise PlanError(f"{op}: size ({size}) must be a multiple of slide ({slide})")
        self.coder = KeyCoder(op, by, empty_ok=True)
        self.time, self.value, self.size, self.slide = time, value, size, slide
        self.windows = size // slide  # windows per tuple
        self.aggs = parse_aggs(op, aggs if aggs is not None else {"count": "count"},
                               AGGREGATES, value)
        self._dtypes: dict[str, np.dtype] = {}
        self._bounds: pa.DataType = pa.int64()
        self._table = KeyTable(self._spec())
        # the admission time (``_t0``) of the newest input seen: a window's row is timed from
        # its close, the input that moved the watermark past its end, of which this is the
        # latest a pass can name (timing only: ``_t0`` is in no digest and no row's identity)
        self._seen_t0 = 0.0

    def _partials(self) -> dict[str, np.dtype]:
        """The partial aggregates a window keeps per value column (``sum:bytes``, ...), with
        their dtypes."""
        out = {}
        for a in self.aggs.values():
            for p in _PARTIALS[a.func]:
                out[f"{p}:{a.column}"] = self._dtypes.get(str(a.column), np.dtype(np.float64))
        return out

    def _spec(self) -> Spec:
        # Partial aggregates of one (group, window); sub-key = window start. sn, snm and t0
        # are those of the window's latest tuple, which the output row descends from (its t0
        # at least the newest input's at the close: ``_rows``).
        return {"count": (np.dtype(np.int64), ()),
                **{name: (d, ()) for name, d in self._partials().items()},
                "sn": (np.dtype(np.int64), ()), "snm": (np.dtype(np.int64), ()),
                "t0": (np.dtype(np.float64), ()), "closed": (np.dtype(bool), ())}

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        op = "TimeWindowAggregate"
        require_columns(op, input_schema, [self.time, *([self.value] if self.value else []),
                                           *read_columns(self.aggs)])
        self.coder.bind(input_schema)
        check_time_type(op, input_schema, self.time)
        self._bounds = time_type(input_schema, self.time)
        self._dtypes = {c: value_dtype(op, input_schema, c) for c in value_columns(self.aggs)}
        # The key values are kept for every window: the output carries them.
        keys = self.coder.key_schema if self.coder.columns else None
        fresh = KeyTable(self._spec(), keys, verify=not self.coder.exact)
        self._table = rebind(self._table, fresh)
        fields = [*self.coder.key_schema, pa.field(self.names[0], self._bounds),
                  pa.field(self.names[1], self._bounds), *agg_fields(self.aggs, self._dtypes)]
        rename = ("a key column (by) has that name too (from a window step before this one?): "
                  f"name this step's window columns otherwise, e.g. names=(\"{self.names[0]}2\", "
                  f"\"{self.names[1]}2\")")
        check_output_names(op, fields, dict.fromkeys(self.names, rename))
        return output_schema(fields)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if batch.num_rows == 0:
            return empty(self.output_schema)
        batch = sort_by_sn(batch)  # (in arrival order under racing copies: Algorithm 3)
        op = "TimeWindowAggregate"
        w, n = self.windows, batch.num_rows
        time = int64_column(op, batch, self.time)
        part, code = part_array(batch), self.coder.encode(batch)

        # One entry per (tuple, window it belongs to), folded per (part, key, window start).
        row = np.repeat(np.arange(n), w)
        start = np.repeat((time // self.slide) * self.slide, w) - np.tile(
            np.arange(w, dtype=np.int64) * self.slide, n)
        order, starts = groups_of(part[row], code[row], start)
        ends = np.r_[starts[1:], order.size] - 1
        head, tail = row[order[starts]], row[order[ends]]  # first and latest tuple
        wstart = start[order[starts]]
        partial: dict[str, np.ndarray] = {"count": np.diff(np.r_[starts, order.size])}
        folds = {"sum": np.add, "min": np.minimum, "max": np.maximum}
        values: dict[str, np.ndarray] = {}
        for name, dtype in self._partials().items():
            fn, column = name.split(":", 1)
            if column not in values:
                values[column] = value_array(op, batch, column, dtype)[row[order]]
            partial[name] = folds[fn].reduceat(values[column], starts)
        t0 = batch.column(T0).to_numpy()
        self._seen_t0 = max(self._seen_t0, float(t0.max()))
        partial.update({"sn": sn_array(batch)[tail], "snm": snm_array(batch)[tail],
                        "t0": t0[tail],
                        "closed": np.zeros(starts.size, dtype=bool)})

        table = self._table
        keys = None if table.keys is None else self.coder.keys(batch).take(pa.array(head))
        found = table.find(part[head], code[head], wstart, keys)
        hit, at = found >= 0, found[found >= 0]
        cols = table.cols
        cols["count"][at] += partial["count"][hit]
        for name in self._partials():
            fold = folds[name.split(":", 1)[0]]
            cols[name][at] = fold(cols[name][at], partial[name][hit])
        # a window is numbered after its highest (SN, SNM): the batch's latest tuple, unless
        # the window holds a later one already (input in arrival order)
        later = after(partial["sn"][hit], partial["snm"][hit], cols["sn"][at], cols["snm"][at])
        for name in ("sn", "snm", "t0"):
            cols[name][at[later]] = partial[name][hit][later]
        new = ~hit
        table.insert(part[head[new]], code[head[new]], wstart[new],
                     {k: a[new] for k, a in partial.items()},
                     None if keys is None else keys.filter(pa.array(new)))
        return empty(self.output_schema)

    def advance(self, frontier: Frontier) -> tuple[pa.RecordBatch, Frontier]:
        """Close, per partition, the windows that end at or before its watermark; release
        those at or below its output claim; hold the output frontier back with the rest."""
        table = self._table
        if len(table) == 0:
            return empty(self.output_schema), Frontier(frontier.sn, self._future_wm(frontier.wm))
        part = table.part
        closed = table.cols["closed"]
        closed |= table.sub + self.size <= frontier.wm[part]
        release, claim = release_closed(frontier.sn, part, table.cols["sn"], closed)
        # The output watermark: no window not yet emitted starts before it.
        wm = self._future_wm(frontier.wm)
        np.minimum.at(wm, part[~release], table.sub[~release])
        out = self._rows(np.flatnonzero(release))
        table.keep(~release)
        return out, Frontier(claim, wm)

    def _future_wm(self, wm: np.ndarray) -> np.ndarray:
        """The lowest start of a window a tuple at or after ``wm`` can fall into, per
        partition (a copy; the end of the stream stays the end)."""
        first = (np.floor_divide(wm - self.size, self.slide) + 1) * self.slide
        return np.where((wm >= END_OF_STREAM) | (wm <= NO_WATERMARK), wm, first)

    def _rows(self, rows: np.ndarray) -> pa.RecordBatch:
        """Output rows for the given state rows, in SN order, each timed (``_t0``) from the
        window's close: the newest input this operator had seen, or the window's latest
        tuple if later (a copy rebuilt by catch-up starts with no input seen)."""
        schema = self.output_schema
        if rows.size == 0:
            return empty(schema)
        t = self._table
        start = t.sub[rows]
        minor = child_minor(t.cols["snm"][rows], (start // self.slide) % self.windows)
        order = np.lexsort((minor, t.cols["sn"][rows]))
        rows, start, minor = rows[order], start[order], minor[order]
        count = t.cols["count"][rows]

        def result(func: str, column: str | None) -> np.ndarray:
            if func == "count":
                return count
            if func == "avg":
                return t.cols[f"sum:{column}"][rows] / count
            return t.cols[f"{func}:{column}"][rows]

        keys = [] if t.keys is None else [
            t.keys.take(pa.array(rows)).column(c).combine_chunks() for c in self.coder.columns]
        arrays = [*keys, pa.array(start), pa.array(start + self.size),
                  *(pa.array(result(a.func, a.column)) for a in self.aggs.values()),
                  pa.array(t.cols["sn"][rows]), pa.array(minor),
                  pa.array(np.maximum(t.cols["t0"][rows], self._seen_t0)),
                  pa.array(t.part[rows])]
        arrays = [a if a.type == f.type else a.cast(f.type)
                  for a, f in zip(arrays, schema, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=schema)
