"""The top rows of groups, held until the group closes: the machinery under the top-k operators.

A *group* is a ``(part, code, sub)`` of keyed state (``keyed.py``): the mini-partition, the
key code, and a sub-key (a window start, or 0). Two structures hold it:

- ``groups``: a ``KeyTable`` with one row per group: the ``(_sn, _snm, _t0)`` of its latest
  input (the SN its outputs descend from) and what the operator folds (a deadline, say);
- ``Ranked``: the group's best rows so far, at most ``k``, with every input user column. The
  order is a total one: the ``order`` keys (nulls and NaN last), then the earliest SN. A row
  outside a group's top k can never come back into it (rows are only added), so keeping k is
  exact.

With ``ties`` a group keeps every row whose *rank* is at most k, SQL's ``RANK() <= k``: a
row's rank is 1 + the number of rows strictly better by the ``order`` keys alone (peers,
equal in every key, share a rank; null equals null and NaN equals NaN). A rank only grows as
rows come, so a row ranked beyond k never comes back either: the state is the rows that can
still be in the top k with ties, k plus the peers of the k-th. Within a group the rows stay
in the total order (peers by SN), so the output is the same however the input is cut.

``Ranked`` is sorted by slot and, within a slot, by rank; a batch gathers the stored rows of
the groups it touches, ranks them with its own in one Arrow sort, and puts back the first k
of each group. Nothing loops over rows in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.model.errors import PlanError
from sparkflux.operators.base import PartitionInfo, require_columns
from sparkflux.operators.keyed import KeyTable, expand_ranges, runs, slot_of

_ARRAYS = {"part": np.int32, "code": np.int64, "sub": np.int64, "sn": np.int64,
           "snm": np.int64}
_DIRECTIONS = {"asc": "ascending", "desc": "descending"}


def check_order(op: str, order: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """``order`` as a list of (column, Arrow sort order), or PlanError saying the form."""
    form = 'a list of (column, "asc" | "desc") pairs, e.g. [("price", "desc")]'
    if isinstance(order, (str, tuple)) or not order:
        raise PlanError(f"{op}: order must be {form}; got {order!r}")
    out = []
    for item in order:
        if not (isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[0], str)
                and item[1] in _DIRECTIONS):
            raise PlanError(f"{op}: order must be {form}; {item!r} is not such a pair")
        out.append((item[0], _DIRECTIONS[item[1]]))
    names = [c for c, _ in out]
    if len(set(names)) < len(names):
        raise PlanError(f"{op}: order names a column twice ({names}); name each once")
    return out


def check_sortable(op: str, schema: pa.Schema, order: list[tuple[str, str]]) -> None:
    """PlanError when an order column is missing or of a type Arrow cannot sort."""
    require_columns(op, schema, [c for c, _ in order])
    for c, _ in order:
        try:
            pc.sort_indices(pa.table({c: pa.array([], schema.field(c).type)}),
                            sort_keys=[(c, "ascending")])
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise PlanError(f"{op}: order column {c!r} of type {schema.field(c).type} cannot be "
                            f"sorted; order by a number, string or time column") from e


class Ranked:
    """The best rows of every group, sorted by slot then rank (at most ``k`` per group)."""

    def __init__(self, schema: pa.Schema, order: list[tuple[str, str]], k: int,
                 ties: bool = False) -> None:
        self.schema, self.order, self.k, self.ties = schema, order, k, ties
        self.slot = np.zeros(0, dtype=np.int64)
        self.a = {name: np.zeros(0, dtype=t) for name, t in _ARRAYS.items()}
        self.rows = schema.empty_table()

    def __len__(self) -> int:
        return int(self.slot.size)

    def gather(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For sorted unique ``slots``: (which slot, stored row) of every stored row of
        them, slot by slot and by rank within a slot."""
        lo = np.searchsorted(self.slot, slots, side="left")
        hi = np.searchsorted(self.slot, slots, side="right")
        return expand_ranges(lo, hi)

    def offer(self, arrays: dict[str, np.ndarray], rows: pa.Table) -> None:
        """Rank new rows (``arrays`` as ``_ARRAYS``, in SN order) with the stored rows of
        their groups, and keep the first ``k`` of each group."""
        slot = slot_of(arrays["part"], arrays["code"], arrays["sub"])
        old = self.gather(np.unique(slot))[1]
        pool_slot = np.concatenate([self.slot[old], slot])
        pool = {n: np.concatenate([self.a[n][old], arrays[n]]) for n in _ARRAYS}
        pool_rows = pa.concat_tables([self.rows.take(pa.array(old)),
                                      rows.cast(self.schema)])
        keys = pa.table({"slot": pool_slot,
                         **{f"o{i}": pool_rows.column(c) for i, (c, _) in enumerate(self.order)},
                         "sn": pool["sn"], "snm": pool["snm"]})
        ranking = pc.sort_indices(keys, sort_keys=[
            ("slot", "ascending"), *((f"o{i}", d) for i, (_, d) in enumerate(self.order)),
            ("sn", "ascending"), ("snm", "ascending")]).to_numpy()
        ranked_slot = pool_slot[ranking]
        rank = self._ranks(ranked_slot, pool_rows, ranking)
        best = ranking[rank < self.k]
        keep = np.ones(len(self), dtype=bool)
        keep[old] = False
        self.keep(keep)
        self._add(pool_slot[best], {n: a[best] for n, a in pool.items()},
                  pool_rows.take(pa.array(best)))

    def ranks(self, owner: np.ndarray, member: np.ndarray) -> np.ndarray:
        """The 0-based rank of stored rows ``member`` of groups ``owner`` (as from
        ``gather``: group by group, in order): their position in the group, or with ``ties``
        the number of rows of the group strictly better."""
        return self._ranks(owner, self.rows, member)

    def _ranks(self, group: np.ndarray, rows: pa.Table, pick: np.ndarray) -> np.ndarray:
        """0-based ranks of the rows ``pick`` of ``rows``, given group by group (``group``
        of each, equal values adjacent) and in order within a group."""
        first = runs(group)
        sizes = np.diff(np.r_[first, group.size])
        position = np.arange(group.size) - np.repeat(first, sizes)
        if not self.ties or group.size == 0:
            return position
        # A row starts a run of peers unless it equals the row before it, of its group, in
        # every order key; a row's rank is the position of its run's first row.
        keys = rows.select([c for c, _ in self.order]).take(pa.array(pick))
        peer = np.r_[False, group[1:] == group[:-1]]
        for column, _ in self.order:
            peer[1:] &= _equal_neighbours(keys.column(column))
        run_head = np.maximum.accumulate(np.where(peer, 0, np.arange(group.size)))
        return position[run_head]

    def _add(self, slot: np.ndarray, arrays: dict[str, np.ndarray], rows: pa.Table) -> None:
        """Add the rows of groups that hold none yet, given slot by slot in rank order."""
        order = np.argsort(np.concatenate([self.slot, slot]), kind="stable")
        self.slot = np.concatenate([self.slot, slot])[order]
        self.a = {n: np.concatenate([self.a[n], np.asarray(arrays[n], dtype=t)])[order]
                  for n, t in _ARRAYS.items()}
        self.rows = pa.concat_tables([self.rows, rows.cast(self.schema)]).take(pa.array(order))

    def keep(self, mask: np.ndarray) -> None:
        if mask.all():
            return
        self.slot = self.slot[mask]
        self.a = {n: a[mask] for n, a in self.a.items()}
        self.rows = self.rows.filter(pa.array(mask))

    def export(self, part: int) -> dict[str, Any]:
        rows = np.flatnonzero(self.a["part"] == part)
        return {**{n: self.a[n][rows].copy() for n in _ARRAYS if n != "part"},
                "rows": self.rows.take(pa.array(rows))}

    def load(self, part: int, state: dict[str, Any]) -> None:
        n = len(state["code"])
        arrays = {name: np.asarray(state[name], dtype=t) for name, t in _ARRAYS.items()
                  if name != "part"}
        arrays["part"] = np.full(n, part, dtype=np.int32)
        slot = slot_of(arrays["part"], arrays["code"], arrays["sub"])
        self._add(slot, arrays, state["rows"])

    def nbytes(self, part: np.ndarray) -> np.ndarray:
        """Approximate bytes of the rows of each of ``part``."""
        per_row = sum(np.dtype(t).itemsize for t in _ARRAYS.values()) + 8
        if len(self):
            per_row += self.rows.nbytes / len(self)
        counts = np.array([np.count_nonzero(self.a["part"] == p) for p in part.tolist()])
        return (counts * per_row).astype(np.int64)


def _equal_neighbours(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Whether each value but the first equals the one before it (null equals null, NaN
    equals NaN): which rows tie with the row ranked just above them."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    a, b = col.slice(1), col.slice(0, max(len(col) - 1, 0))
    same = pc.or_(pc.fill_null(pc.equal(a, b), False), pc.and_(pc.is_null(a), pc.is_null(b)))
    if pa.types.is_floating(col.type):
        same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(a), pc.is_nan(b)), False))
    flags: np.ndarray = same.to_numpy(zero_copy_only=False)
    return flags


class GroupsAndRows:
    """A top-k operator's state: its groups' table and their ranked rows, moved together."""

    def __init__(self, groups: KeyTable, ranked: Ranked) -> None:
        self.groups, self.ranked = groups, ranked

    def export(self, part: int) -> dict[str, Any] | None:
        groups = self.groups.export(part)
        if groups is None:
            return None
        return {"groups": groups, "rows": self.ranked.export(part)}

    def load(self, part: int, state: dict[str, Any] | None) -> None:
        self.drop(part)
        if state is not None:
            self.groups.load(part, state["groups"])
            self.ranked.load(part, state["rows"])

    def drop(self, part: int) -> None:
        self.groups.drop(part)
        self.ranked.keep(self.ranked.a["part"] != part)

    def info(self) -> list[PartitionInfo]:
        info = self.groups.info()
        extra = self.ranked.nbytes(np.array([i.part for i in info], dtype=np.int64))
        return [PartitionInfo(i.part, i.keys, i.nbytes + int(b))
                for i, b in zip(info, extra, strict=True)]
