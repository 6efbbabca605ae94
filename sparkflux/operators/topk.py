"""Top-k rows per group, emitted when the group closes: per event-time window, or per key at
its deadline.

``WindowTopK`` ranks the rows of every (group of ``by``, window) and emits the best ``k``
when the watermark reaches the window's end (Nexmark's "hot items": the auction with the most
bids per window; "highest bid": the bid with the top price per window). ``KeyedTopK`` ranks
the rows of every key and emits the best ``k`` when the watermark reaches the key's deadline,
then forgets the key (Nexmark's "winning bid": the top bid of an auction, final when it
expires).

Ranking. ``order`` is a list of ``(column, "asc" | "desc")``: the first key decides, ties go
to the next one, rows still tied to the earliest SN; nulls and NaN rank last. Only the best
``k`` rows of a group are kept (``ranked.py``). With ``ties=True`` every row tied with the
k-th by the ``order`` keys is kept too (SQL's ``RANK() <= k``: a row's rank is 1 + the number
of rows strictly better; peers share it): the state holds k rows plus the k-th's peers.

Output. Every input user column of the ranked row, then (``WindowTopK``) the window's start
and end, then ``rank`` (int64: 1..k; with ties the SQL rank, 1, 1, 3, ...). A group's rows
descend from its latest input, as ``TimeWindowAggregate``'s do: ``(_sn, child_minor(_snm, j *
k + i))`` with ``i`` the row's position in the group (0..k-1) and ``j`` the window's index
among the windows a tuple falls in (0 for a key), so windows and ranks get distinct minors,
increasing along the ranks. With ties a group may hold more than k rows: the stride is then
``MINOR_FANOUT // windows`` instead of k (a group of more rows than that is refused at
output). A closed group is released only once its SN is at most the output progress
``min(input progress, lowest SN an open group will carry - 1)``; the output stream is
therefore in SN order across ``advance`` calls, and everything is per mini-partition.

Output watermark. ``WindowTopK``: the lowest start of a window not yet emitted (a row's
time, its window's start and end all lie at or after it). ``KeyedTopK``: the lowest ``until``
among the rows of a key not yet emitted, in the units of ``until``; a key that opens later
has rows whose ``until`` is beyond their time, so beyond the input watermark.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from sparkflux.model.batch import child_minor, empty, sn_array, snm_array
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import END_OF_STREAM, NO_WATERMARK, Frontier, release_closed
from sparkflux.model.schema import MINOR_FANOUT, T0, user_fields
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
    time_type,
)
from sparkflux.operators.ranked import GroupsAndRows, Ranked, check_order, check_sortable

Spec = dict[str, tuple[np.dtype, tuple[int, ...]]]


class _TopK(TableState, Operator):
    """What both top-k operators share: groups of ``(part, key, sub)``, their ranked rows,
    and the release of closed groups in SN order. Subclasses say which groups a row joins
    (``_entries``), what a group folds (``_partial``, ``_fold``), when it closes
    (``_closed``) and the lowest event time its output may carry (``_floor``)."""

    stateful = True

    def __init__(self, by: Sequence[str], order: Sequence[tuple[str, str]], k: int,
                 rank: str, ties: bool, windows: int = 1, empty_key: bool = False) -> None:
        super().__init__()
        op = self.name
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise PlanError(f"{op}: k must be an integer >= 1 (got {k!r})")
        if not isinstance(rank, str) or not rank:
            raise PlanError(f"{op}: rank must be a column name (got {rank!r})")
        if not isinstance(ties, bool):
            raise PlanError(f"{op}: ties must be True (keep every row tied with the k-th) or "
                            f"False (exactly k rows, ties to the earliest); got {ties!r}")
        self.coder = KeyCoder(op, by, empty_ok=empty_key)
        self.order = check_order(op, order)
        self.k, self.rank, self.ties = k, rank, ties
        # Output minors: j * stride + the row's position in its group (module docstring).
        self._stride = MINOR_FANOUT // windows if ties else k
        self._user: list[str] = []
        self._held = GroupsAndRows(KeyTable(self._spec()),
                                   Ranked(pa.schema([]), self.order, k, ties))
        self._seen_t0 = 0.0  # the newest input's ``_t0``: a group is timed from its close

    # -- what a subclass decides ---------------------------------------------------------------
    def _extra_spec(self) -> Spec:
        return {}

    def _entries(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        """(row, sub-key) of every group membership of the batch's rows, by row."""
        raise NotImplementedError

    def _partial(self, batch: pa.RecordBatch, rows: np.ndarray,
                 starts: np.ndarray) -> dict[str, np.ndarray]:
        """Per group, what the rows ``rows`` (group by group from ``starts``) fold into it."""
        return {}

    def _fold(self, cols: dict[str, np.ndarray], at: np.ndarray,
              partial: dict[str, np.ndarray]) -> None:
        """Fold ``partial`` into the stored groups ``at``."""

    def _closed(self, wm: np.ndarray) -> np.ndarray:
        """Which stored groups the watermark per partition ``wm`` closes."""
        raise NotImplementedError

    def _floor(self) -> np.ndarray:
        """Per stored group, the lowest event time its output rows may carry."""
        raise NotImplementedError

    def _future_wm(self, wm: np.ndarray) -> np.ndarray:
        """The lowest event time an output of a group not yet opened may carry (a copy)."""
        return wm.copy()

    def _window(self, rows: np.ndarray) -> tuple[list[pa.Array], np.ndarray]:
        """The extra output columns of the given groups and the index j of their minors."""
        return [], np.zeros(rows.size, dtype=np.int64)

    # -- shared ------------------------------------------------------------------------------
    def _spec(self) -> Spec:
        # The latest input of the group: its output rows descend from it.
        return {"sn": (np.dtype(np.int64), ()), "snm": (np.dtype(np.int64), ()),
                "t0": (np.dtype(np.float64), ()), **self._extra_spec()}

    def _state(self) -> GroupsAndRows:
        return self._held

    def _bind_rows(self, input_schema: pa.Schema, extra: list[pa.Field]) -> pa.Schema:
        op = self.name
        self.coder.bind(input_schema)
        check_sortable(op, input_schema, self.order)
        user = user_fields(input_schema)
        fields = [*user, *extra, pa.field(self.rank, pa.int64())]
        check_output_names(op, fields)
        self._user = [f.name for f in user]
        if len(self._held.groups) == 0:
            keys = None if self.coder.exact else self.coder.key_schema
            self._held = GroupsAndRows(KeyTable(self._spec(), keys, verify=True),
                                       Ranked(pa.schema(user), self.order, self.k, self.ties))
        return output_schema(fields)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Fold the rows into their groups and rank them; nothing is emitted here."""
        if batch.num_rows == 0:
            return empty(self.output_schema)
        row, sub = self._entries(batch)
        part_b, code_b = part_array(batch), self.coder.encode(batch)
        part, code = part_b[row], code_b[row]
        sn, snm = sn_array(batch), snm_array(batch)
        order, starts = groups_of(part, code, sub)
        ends = np.r_[starts[1:], order.size] - 1
        head, tail = row[order[starts]], row[order[ends]]  # first and latest row of a group
        gsub = sub[order[starts]]
        t0 = batch.column(T0).to_numpy()
        self._seen_t0 = max(self._seen_t0, float(t0.max()))
        latest = {"sn": sn[tail], "snm": snm[tail], "t0": t0[tail]}
        partial = self._partial(batch, row[order], starts)

        table = self._held.groups
        keys = None if table.keys is None else self.coder.keys(batch).take(pa.array(head))
        found = table.find(part_b[head], code_b[head], gsub, keys)
        hit, at = found >= 0, found[found >= 0]
        for name, v in latest.items():  # the batch's rows come after the stored ones
            table.cols[name][at] = v[hit]
        self._fold(table.cols, at, {n: v[hit] for n, v in partial.items()})
        new = ~hit
        table.insert(part_b[head[new]], code_b[head[new]], gsub[new],
                     {n: v[new] for n, v in {**latest, **partial}.items()},
                     None if keys is None else keys.filter(pa.array(new)))

        rows = pa.Table.from_batches([batch.select(self._user)]).take(pa.array(row))
        self._held.ranked.offer({"part": part, "code": code, "sub": sub, "sn": sn[row],
                                 "snm": snm[row]}, rows)
        return empty(self.output_schema)

    def advance(self, frontier: Frontier) -> tuple[pa.RecordBatch, Frontier]:
        """Close, per partition, the groups its watermark closes; release those at or below
        its output claim; hold the output frontier back with the rest."""
        table = self._held.groups
        if len(table) == 0:
            return empty(self.output_schema), Frontier(frontier.sn, self._future_wm(frontier.wm))
        part, sn = table.part, table.cols["sn"]
        release, claim = release_closed(frontier.sn, part, sn, self._closed(frontier.wm))
        wm = self._future_wm(frontier.wm)
        np.minimum.at(wm, part[~release], self._floor()[~release])
        out = self._release(np.flatnonzero(release))
        return out, Frontier(claim, np.minimum(wm, frontier.wm))

    def _release(self, rows: np.ndarray) -> pa.RecordBatch:
        """The output rows of the given groups, in SN order, each timed (``_t0``) from the
        group's close (the newest input seen, or its latest row if later); the groups are
        forgotten."""
        schema = self.output_schema
        if rows.size == 0:
            return empty(schema)
        table, ranked = self._held.groups, self._held.ranked
        slots = table.slot[rows]  # sorted: the table is
        owner, member = ranked.gather(slots)
        position = member - np.searchsorted(ranked.slot, slots)[owner]
        rank = ranked.ranks(owner, member) if self.ties else position
        if position.size and int(position.max()) >= self._stride:
            raise ValueError(f"{self.name}: {int(position.max()) + 1} rows tie for the top "
                             f"{self.k} of one group, more outputs than one input's sequence "
                             f"numbers can tell apart ({self._stride}); rank by one more order "
                             f"column so that fewer rows tie, or use ties=False")
        group = rows[owner]
        extra, j = self._window(group)
        minor = child_minor(table.cols["snm"][group], j * self._stride + position)
        sn = table.cols["sn"][group]
        o = np.lexsort((minor, sn))
        data = ranked.rows.take(pa.array(member[o]))
        arrays = [*(c.combine_chunks() for c in data.columns), *(e.take(pa.array(o))
                                                                 for e in extra),
                  pa.array(rank[o] + 1), pa.array(sn[o]), pa.array(minor[o]),
                  pa.array(np.maximum(table.cols["t0"][group[o]], self._seen_t0)),
                  pa.array(table.part[group[o]])]
        arrays = [a if a.type == f.type else a.cast(f.type)
                  for a, f in zip(arrays, schema, strict=True)]
        keep = np.ones(len(ranked), dtype=bool)
        keep[member] = False
        ranked.keep(keep)
        table.delete(rows)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


class WindowTopK(_TopK):
    """The top ``k`` rows by ``order`` per group of ``by`` and event-time window of ``time``.

    Windows are ``TimeWindowAggregate``'s: ``[start, start + size)`` with ``start`` a
    multiple of ``slide`` (``slide=None``: tumbling; ``size`` a multiple of ``slide``), in
    ``time``'s units. A window's rows come out once the watermark reaches its end: every input
    user column, ``names`` (window start and end: int64, or ``time``'s timestamp type), then
    ``rank``. ``ties=True`` keeps every row tied with the k-th by ``order`` (SQL's ``RANK()
    <= k``; ``rank`` is then the SQL rank). A row that comes behind the watermark into a
    window already emitted opens it again (emitted once more).

    ``by=[]``: no key, the top of all the rows of a window in a mini-partition. For the top
    of the whole stream per window put ``exchange(by=[])`` before it (every row to one
    mini-partition), or an exchange on a column all the rows of a window share (the window
    start of an earlier window step, a tumbling window's start).

    >>> import pyarrow as pa
    >>> from sparkflux.model.progress import Frontier, Progress
    >>> batch = pa.RecordBatch.from_pydict({"g": [1, 1, 1], "t": [1, 4, 12],
    ...     "price": [5, 7, 1], "_sn": [0, 1, 2], "_snm": [0] * 3, "_t0": [0.0] * 3,
    ...     "_part": pa.array([0] * 3, pa.int32())})
    >>> op = WindowTopK(by=["g"], time="t", size=10, order=[("price", "desc")], k=2)
    >>> _ = op.bind(batch.schema)
    >>> op.process(batch).num_rows
    0
    >>> out, frontier = op.advance(Frontier.every(Progress(sn=2, wm=10), 1))
    >>> rows = out.to_pydict()
    >>> rows["price"], rows["rank"], rows["window_start"], rows["_sn"]
    ([7, 5], [1, 2], [0, 0], [1, 1])
    >>> frontier.of(0)
    Progress(sn=1, wm=10)
    """

    def __init__(
        self,
        by: Sequence[str],
        time: str,
        size: int,
        order: Sequence[tuple[str, str]],
        k: int = 1,
        slide: int | None = None,
        names: tuple[str, str] = ("window_start", "window_end"),
        rank: str = "rank",
        ties: bool = False,
    ) -> None:
        op = "WindowTopK"
        slide = size if slide is None else slide
        for name, v in (("size", size), ("slide", slide)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise PlanError(f"{op}: {name} must be an integer >= 1 (got {v!r})")
        if size % slide:
            raise PlanError(f"{op}: size ({size}) must be a multiple of slide ({slide})")
        if len(names) != 2 or not all(isinstance(n, str) and n for n in names):
            raise PlanError(f"{op}: names must be two column names (start, end); got {names!r}")
        self.time, self.size, self.slide = time, size, slide
        self.windows = size // slide  # windows per row
        self.names = tuple(names)
        super().__init__(by, order, k, rank, ties, self.windows, empty_key=True)
        if self.windows * k > MINOR_FANOUT:
            raise PlanError(f"{op}: size // slide * k ({self.windows * k}) outputs could "
                            f"descend from one row, more than {MINOR_FANOUT}; lower k or "
                            f"make slide larger")

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        require_columns(self.name, input_schema, [self.time])
        check_time_type(self.name, input_schema, self.time)
        bounds = time_type(input_schema, self.time)
        return self._bind_rows(input_schema, [pa.field(self.names[0], bounds),
                                              pa.field(self.names[1], bounds)])

    def _entries(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        w, n = self.windows, batch.num_rows
        time = int64_column(self.name, batch, self.time)
        row = np.repeat(np.arange(n), w)
        start = np.repeat((time // self.slide) * self.slide, w) - np.tile(
            np.arange(w, dtype=np.int64) * self.slide, n)
        return row, start

    def _closed(self, wm: np.ndarray) -> np.ndarray:
        table = self._held.groups
        return table.sub + self.size <= wm[table.part]

    def _floor(self) -> np.ndarray:
        return self._held.groups.sub

    def _future_wm(self, wm: np.ndarray) -> np.ndarray:
        """The lowest start of a window a row at or after ``wm`` can fall into."""
        first = (np.floor_divide(wm - self.size, self.slide) + 1) * self.slide
        return np.where((wm >= END_OF_STREAM) | (wm <= NO_WATERMARK), wm, first)

    def _window(self, rows: np.ndarray) -> tuple[list[pa.Array], np.ndarray]:
        start = self._held.groups.sub[rows]
        return ([pa.array(start), pa.array(start + self.size)],
                (start // self.slide) % self.windows)


class KeyedTopK(_TopK):
    """The top ``k`` rows by ``order`` of every key of ``by``, once the key's deadline passed.

    ``until`` is an integer or timestamp column; a key's deadline is the largest ``until`` of
    its rows. When the partition's watermark reaches it, the key's best ``k`` rows come out
    (every input user column, then ``rank``; ``ties=True``: with every row tied with the k-th,
    as ``WindowTopK``'s) and the key is forgotten, so the state holds only keys still open.

    A row of a key already emitted opens a new group of that key (emitted at its own
    deadline, or at the next ``advance`` if that passed): the operator keeps no memory of
    emitted keys. The input should therefore bring every row of a key before the watermark
    reaches the key's deadline, with its event time below its ``until`` (Nexmark: a bid comes
    before its auction expires and carries that expiry). Then the result does not depend on
    batch boundaries; a row that comes later is reported, as a group of its own, rather than
    lost.

    A closed key comes out once no open key of its partition has an earlier latest row (the
    SN order of the output): a key that stays open long without new rows delays the keys
    that close after its last row was seen, never their result.

    >>> import pyarrow as pa
    >>> from sparkflux.model.progress import Frontier, Progress
    >>> batch = pa.RecordBatch.from_pydict({"auction": [7, 7, 8], "price": [5, 9, 3],
    ...     "expires": [20, 20, 30], "_sn": [0, 1, 2], "_snm": [0] * 3, "_t0": [0.0] * 3,
    ...     "_part": pa.array([0] * 3, pa.int32())})
    >>> op = KeyedTopK(by=["auction"], order=[("price", "desc")], until="expires")
    >>> _ = op.bind(batch.schema)
    >>> op.process(batch).num_rows
    0
    >>> out, frontier = op.advance(Frontier.every(Progress(sn=2, wm=25), 1))
    >>> out.to_pydict()["price"], out.to_pydict()["_sn"], frontier.of(0)
    ([9], [1], Progress(sn=1, wm=25))
    """

    def __init__(
        self,
        by: Sequence[str],
        order: Sequence[tuple[str, str]],
        until: str,
        k: int = 1,
        rank: str = "rank",
        ties: bool = False,
    ) -> None:
        self.until = until
        super().__init__(by, order, k, rank, ties)

    def _extra_spec(self) -> Spec:
        # deadline: the largest `until` of the key's rows; low: the smallest (the floor of
        # the output watermark).
        return {"deadline": (np.dtype(np.int64), ()), "low": (np.dtype(np.int64), ())}

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        require_columns(self.name, input_schema, [self.until])
        check_time_type(self.name, input_schema, self.until)
        return self._bind_rows(input_schema, [])

    def _entries(self, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        n = batch.num_rows
        return np.arange(n), np.zeros(n, dtype=np.int64)

    def _partial(self, batch: pa.RecordBatch, rows: np.ndarray,
                 starts: np.ndarray) -> dict[str, np.ndarray]:
        until = int64_column(self.name, batch, self.until)[rows]
        return {"deadline": np.maximum.reduceat(until, starts),
                "low": np.minimum.reduceat(until, starts)}

    def _fold(self, cols: dict[str, np.ndarray], at: np.ndarray,
              partial: dict[str, np.ndarray]) -> None:
        cols["deadline"][at] = np.maximum(cols["deadline"][at], partial["deadline"])
        cols["low"][at] = np.minimum(cols["low"][at], partial["low"])

    def _closed(self, wm: np.ndarray) -> np.ndarray:
        table = self._held.groups
        return table.cols["deadline"] <= wm[table.part]

    def _floor(self) -> np.ndarray:
        return self._held.groups.cols["low"]
