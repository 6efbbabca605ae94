"""Windowed symmetric hash join over one stream that carries both sides.

Each tuple says its side in column ``side`` (0 = left, 1 = right). Taking tuples in SN order,
a tuple ``x`` joins every *stored* tuple ``y`` of the other side with the same ``on`` key and
``|x.time - y.time| <= window``, and is then stored itself. Stored tuples older than the
window are purged: those with ``time < H - window``, where ``H`` is the largest time seen so
far in the tuple's mini-partition (on arrival), or the watermark (on ``advance``). With time
non-decreasing along SN, as this operator assumes, the purge never removes a tuple that could
still match; when time does go back, ``H`` makes the result the same however the input is
cut into batches (a tuple purged by a per-tuple purge is not matched here either).

The batch is joined at once: the stored tuples of the batch's keys and the batch's own tuples
form one list; for a probe ``x`` its partners of the other side are a contiguous range of
that list sorted by (key slot, time), found with ``np.searchsorted``, less those that come
after ``x``. No Python loop runs per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.model.batch import child_minor, empty, rank_within_runs, sn_array, snm_array
from sparkflux.model.errors import PlanError
from sparkflux.model.progress import END_OF_STREAM, NO_WATERMARK, Frontier
from sparkflux.operators.base import Operator, PartitionInfo, require_columns
from sparkflux.operators.keyed import (
    KeyCoder,
    KeyCollision,
    TableState,
    assemble,
    check_output_names,
    check_time_type,
    collision,
    expand_ranges,
    int64_column,
    output_schema,
    part_array,
    rows_equal,
    slot_of,
)

_ARRAYS = {"part": np.int32, "code": np.int64, "side": np.int8, "time": np.int64,
           "sn": np.int64, "snm": np.int64}


class _Store:
    """The stored tuples of both sides, sorted by key slot and, within a slot, by SN."""

    def __init__(self, payload: pa.Schema) -> None:
        self.slot = np.zeros(0, dtype=np.int64)
        self.a = {name: np.zeros(0, dtype=t) for name, t in _ARRAYS.items()}
        self.rows = payload.empty_table()  # the columns the output takes from a stored tuple
        self.horizon: dict[int, int] = {}  # per partition: the largest time seen

    def __len__(self) -> int:
        return int(self.slot.size)

    def gather(self, slots: np.ndarray) -> np.ndarray:
        """Indices of the stored tuples whose slot is in the sorted unique ``slots``."""
        lo = np.searchsorted(self.slot, slots, side="left")
        hi = np.searchsorted(self.slot, slots, side="right")
        return expand_ranges(lo, hi)[1]

    def append(self, arrays: dict[str, np.ndarray], rows: pa.Table) -> None:
        """Add tuples (given in SN order); each goes after the stored tuples of its slot."""
        slot = slot_of(arrays["part"], arrays["code"])
        new = np.argsort(slot, kind="stable")
        order = np.argsort(np.concatenate([self.slot, slot[new]]), kind="stable")
        self.slot = np.concatenate([self.slot, slot[new]])[order]
        for name in _ARRAYS:
            self.a[name] = np.concatenate([self.a[name], arrays[name][new]])[order]
        both = pa.concat_tables([self.rows, rows.take(pa.array(new))])
        self.rows = both.take(pa.array(order))

    def keep(self, mask: np.ndarray) -> None:
        if mask.all():
            return
        self.slot = self.slot[mask]
        self.a = {name: a[mask] for name, a in self.a.items()}
        self.rows = self.rows.filter(pa.array(mask))

    def purge(self, window: int) -> None:
        """Drop the tuples that fell more than ``window`` behind their partition's horizon."""
        if not len(self):
            return
        parts = np.array(sorted(self.horizon), dtype=np.int64)
        limit = np.array([self.horizon[p] for p in parts.tolist()], dtype=np.int64) - window
        self.keep(self.a["time"] >= limit[np.searchsorted(parts, self.a["part"])])

    def export(self, part: int) -> dict[str, Any] | None:
        if part not in self.horizon:
            return None
        rows = np.flatnonzero(self.a["part"] == part)
        return {
            "horizon": self.horizon[part],
            **{name: self.a[name][rows].copy() for name in _ARRAYS if name != "part"},
            "rows": self.rows.take(pa.array(rows)),
        }

    def load(self, part: int, state: dict[str, Any] | None) -> None:
        self.drop(part)
        if state is None:
            return
        self.horizon[part] = int(state["horizon"])
        n = len(state["time"])
        arrays = {name: np.asarray(state[name], dtype=t) for name, t in _ARRAYS.items()
                  if name != "part"}
        arrays["part"] = np.full(n, part, dtype=np.int32)
        self.append(arrays, state["rows"].cast(self.rows.schema))

    def drop(self, part: int) -> None:
        self.horizon.pop(part, None)
        self.keep(self.a["part"] != part)

    def info(self) -> list[PartitionInfo]:
        part, code = self.a["part"], self.a["code"]
        per_row = sum(np.dtype(t).itemsize for t in _ARRAYS.values()) + 8
        if len(self):
            per_row += self.rows.nbytes / len(self)
        out = []
        for p in sorted(self.horizon):
            mine = part == p
            keys = np.unique(code[mine]).size
            out.append(PartitionInfo(p, int(keys), int(mine.sum() * per_row)))
        return out


class WindowJoin(TableState, Operator):
    """Join the left and right tuples of one stream on ``on`` within ``window`` time units.

    Output per match: the ``on`` columns, then ``left`` (from the left tuple), then ``right``
    (from the right tuple; a name already in the output gets the suffix ``_right``). The k-th
    match of an arriving tuple x (k in SN order of the stored partners) gets SN ``(x._sn,
    child_minor(x._snm, k))`` and x's ``_t0, _part``. Rows whose side is neither 0 nor 1 are
    ignored.

    >>> import pyarrow as pa
    >>> batch = pa.RecordBatch.from_pydict({"k": [7, 7, 7], "s": [0, 0, 1], "t": [1, 5, 6],
    ...     "a": ["x", "y", "z"], "_sn": [0, 1, 2], "_snm": [0] * 3, "_t0": [0.0] * 3,
    ...     "_part": pa.array([0] * 3, pa.int32())})
    >>> op = WindowJoin(on=["k"], side="s", time="t", window=2, left=["a"], right=["a"])
    >>> _ = op.bind(batch.schema)
    >>> out = op.process(batch).to_pydict()
    >>> out["a"], out["a_right"], out["_snm"]
    (['y'], ['z'], [0])
    """

    stateful = True

    def __init__(
        self,
        on: Sequence[str],
        side: str,
        time: str,
        window: int,
        left: Sequence[str],
        right: Sequence[str],
        by_watermark: bool = False,
    ) -> None:
        """``by_watermark``: match within ``window`` of each tuple's own time and purge on
        the watermark alone (``advance``), for inputs whose time is not ordered along SN (a
        join of an aggregate, released late, with its input): exact whatever the order, as
        long as no tuple comes behind its partition's watermark."""
        super().__init__()
        op = "WindowJoin"
        self.by_watermark = by_watermark
        if not isinstance(window, int) or window < 0:
            raise PlanError(f"{op}: window must be an integer >= 0 (got {window!r})")
        if isinstance(left, str) or isinstance(right, str):
            raise PlanError(f"{op}: left and right must be lists of column names")
        self.coder = KeyCoder(op, on)
        self.side, self.time, self.window = side, time, window
        self.left, self.right = list(left), list(right)
        self._right_names: list[str] = []
        self._payload: list[str] = []
        self._store = _Store(pa.schema([]))

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        op = "WindowJoin"
        require_columns(op, input_schema, [self.side, self.time, *self.left, *self.right])
        self.coder.bind(input_schema)
        check_time_type(op, input_schema, self.time)
        if not pa.types.is_integer(input_schema.field(self.side).type):
            raise PlanError(f"{op}: side column {self.side!r} must be an integer (0 = left, "
                            f"1 = right), not {input_schema.field(self.side).type}")
        on = list(self.coder.key_schema)
        clash = [c for c in self.left if c in self.coder.columns]
        if clash:
            raise PlanError(f"{op}: left column {clash[0]!r} is a join key, which the output "
                            f"already carries; leave it out of left")
        fields = [*on, *(input_schema.field(c) for c in self.left)]
        taken = {f.name for f in fields}
        self._right_names = [f"{c}_right" if c in taken else c for c in self.right]
        fields += [input_schema.field(c).with_name(n)
                   for c, n in zip(self.right, self._right_names, strict=True)]
        check_output_names(op, fields)
        self._payload = list(dict.fromkeys([*self.coder.columns, *self.left, *self.right]))
        payload = pa.schema([input_schema.field(c) for c in self._payload])
        if len(self._store) == 0 and not self._store.horizon:
            self._store = _Store(payload)
        return output_schema(fields)

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        schema = self.output_schema
        side = batch.column(self.side)
        right = pc.fill_null(pc.equal(side, 1), False).to_numpy(zero_copy_only=False)
        valid = right | pc.fill_null(pc.equal(side, 0), False).to_numpy(zero_copy_only=False)
        if not valid.all():
            batch, right = batch.filter(pa.array(valid)), right[valid]
        if batch.num_rows == 0:
            return empty(schema)
        new = {"part": part_array(batch), "code": self.coder.encode(batch),
               "side": right.astype(np.int8), "time": int64_column("WindowJoin", batch,
                                                                    self.time),
               "sn": sn_array(batch), "snm": snm_array(batch)}
        horizon = self._horizons(new["part"], new["time"])
        x, y, pool = self._match(new, horizon)
        rows = pa.Table.from_batches([batch.select(self._payload)])

        out = empty(schema)
        if x.size:
            n_stored = pool.num_rows
            payload = pa.concat_tables([pool, rows])
            if not self.coder.exact:
                on = self.coder.columns
                mine = payload.select(on).take(pa.array(y))
                theirs = rows.select(on).take(pa.array(x))
                bad = ~rows_equal(mine, theirs)
                if bad.any():
                    i = int(np.flatnonzero(bad)[0])
                    raise collision(on, mine.slice(i, 1), theirs.slice(i, 1))
            is_left = new["side"][x] == 0
            left = payload.take(pa.array(np.where(is_left, n_stored + x, y)))
            right_t = payload.take(pa.array(np.where(is_left, y, n_stored + x)))
            k = rank_within_runs(x)
            columns = [*(rows.column(c).take(pa.array(x)) for c in self.coder.columns),
                       *(left.column(c) for c in self.left),
                       *(right_t.column(c) for c in self.right)]
            out = assemble(schema, columns, batch, x, child_minor(new["snm"][x], k))

        self._store.append(new, rows)
        if not self.by_watermark:
            self._store.purge(self.window)
        return out

    def _horizons(self, part: np.ndarray, time: np.ndarray) -> np.ndarray:
        """For every row, the largest time seen in its partition up to and including it."""
        out = np.empty_like(time)
        order = np.argsort(part, kind="stable")
        ps = part[order]
        bounds = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1], True])
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            p, rows = int(ps[a]), order[a:b]
            h = np.maximum.accumulate(time[rows])
            if p in self._store.horizon:
                h = np.maximum(h, self._store.horizon[p])
            out[rows] = time[rows] if self.by_watermark else h
            self._store.horizon[p] = int(h[-1])
        return out

    def _match(self, new: dict[str, np.ndarray],
               horizon: np.ndarray) -> tuple[np.ndarray, np.ndarray, pa.Table]:
        """Matches (batch row x, pool row y) sorted by x then y, and the stored part of the pool.

        The pool is the stored tuples of the batch's keys followed by the batch itself, so a
        pool index orders tuples of one key by SN.
        """
        store = self._store
        slot = slot_of(new["part"], new["code"])
        g = store.gather(np.unique(slot))
        n_stored = g.size
        p_slot = np.concatenate([store.slot[g], slot])
        p = {name: np.concatenate([store.a[name][g], new[name]]) for name in _ARRAYS}
        xs, ys = [], []
        for s in (0, 1):
            probe = np.flatnonzero(new["side"] == 1 - s)
            build = np.flatnonzero(p["side"] == s)
            if probe.size == 0 or build.size == 0:
                continue
            build = build[np.lexsort((build, p["time"][build], p_slot[build]))]
            # Rank (slot, time) into one sortable int64 so that a probe's partners, same slot
            # and time in [H - window, time + window], are one searchsorted range.
            slots = np.unique(p_slot[build])
            times = np.unique(p["time"][build])
            width = times.size + 1
            key = np.searchsorted(slots, p_slot[build]) * width + np.searchsorted(
                times, p["time"][build])
            rank = np.searchsorted(slots, slot[probe])
            known = slots[np.minimum(rank, slots.size - 1)] == slot[probe]
            probe, rank = probe[known], rank[known]
            base = rank * width
            lo = np.searchsorted(key, base + np.searchsorted(times, horizon[probe] - self.window))
            hi = np.searchsorted(key, base + np.searchsorted(
                times, new["time"][probe] + self.window, side="right"))
            owner, member = expand_ranges(lo, hi)
            x, y = probe[owner], build[member]
            earlier = y < n_stored + x
            xs.append(x[earlier])
            ys.append(y[earlier])
        if not xs:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), store.rows.slice(0, 0)
        x, y = np.concatenate(xs), np.concatenate(ys)
        order = np.lexsort((y, x))
        x, y = x[order], y[order]
        if ((p["part"][y] != new["part"][x]) | (p["code"][y] != new["code"][x])).any():
            raise KeyCollision("two mini-partition/key pairs share a state slot; please report it")
        return x, y, store.rows.take(pa.array(g))

    def advance(self, frontier: Frontier) -> tuple[pa.RecordBatch, Frontier]:
        """Purge, per partition, the stored tuples no future tuple (time >= the partition's
        watermark) can match. A future output pairs such a tuple with a stored one as old as
        ``watermark - window``, so that is the output watermark."""
        store = self._store
        if len(store):
            wm = frontier.wm[store.a["part"]]
            store.keep((wm <= NO_WATERMARK) | (store.a["time"] >= wm - self.window))
        edge = (frontier.wm <= NO_WATERMARK) | (frontier.wm >= END_OF_STREAM)
        held = np.where(edge, frontier.wm, np.maximum(frontier.wm - self.window, NO_WATERMARK))
        return empty(self.output_schema), Frontier(frontier.sn, held)

    def _state(self) -> Any:
        return self._store
