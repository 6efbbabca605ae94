"""Keyed state shared by the stateful operators, and the output-batch helpers they all use.

Group state lives in one table per operator shell, not one per mini-partition: a state row is
identified by ``(part, code, sub)`` (the mini-partition, the key code of the grouping columns,
and an optional int64 sub-key such as a window start). The three are mixed into one 64-bit
*slot* so that a lookup is a single ``np.searchsorted`` over a sorted array, and a whole batch
is looked up or inserted at once, without a Python loop over rows or partitions. The mix is
not injective, so every hit is verified against the stored ``(part, code, sub)``; a clash
raises ``KeyCollision`` rather than silently merging two groups.

Key codes come from ``KeyCoder``: the injective ``exact_codes`` when the key columns are
integers that pack into 64 bits, otherwise the hashed ``key_codes``. Hashed codes can collide,
so then the table also stores the key values and compares them on every hit, and ``encode``
checks that equal codes within a batch carry equal values.

Moving a mini-partition (thesis Fig 3.9) selects its rows (``export``) as plain numpy arrays
and an Arrow table, and a fresh shell merges them back (``load``): the slot is recomputed
from ``(part, code, sub)``, so the state does not depend on the machine that wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.model.errors import PlanError
from sparkflux.model.keys import exact_codes, key_codes
from sparkflux.model.schema import PART, SN, SNM, SYSTEM_COLUMNS, T0, with_system
from sparkflux.operators.base import PartitionInfo, require_columns

PART_FIELD = pa.field(PART, pa.int32(), nullable=False)


class KeyCollision(RuntimeError):
    """Two different keys received the same 64-bit code (astronomically rare, never ignored)."""


# -- output batches -------------------------------------------------------------------------


def output_schema(fields: Iterable[pa.Field]) -> pa.Schema:
    """User ``fields`` followed by the system columns ``_sn, _snm, _t0, _part``."""
    return with_system([f for f in fields if f.name not in SYSTEM_COLUMNS]).append(PART_FIELD)


def check_output_names(op: str, fields: Sequence[pa.Field],
                       fixes: Mapping[str, str] | None = None) -> None:
    """PlanError when output column names repeat or would shadow a system column; ``fixes``:
    per column the operator's own way to rename it, named in the error."""
    seen: set[str] = set()
    for f in fields:
        if f.name.startswith("_"):
            raise PlanError(f"{op}: output column {f.name!r} starts with '_', which is reserved "
                            f"for system columns; rename it")
        if f.name in seen:
            fix = (fixes or {}).get(f.name, "rename one of them")
            raise PlanError(f"{op}: output column {f.name!r} appears twice; {fix}")
        seen.add(f.name)


def assemble(
    schema: pa.Schema,
    columns: Sequence[pa.Array | pa.ChunkedArray],
    source: pa.RecordBatch,
    rows: np.ndarray | None = None,
    snm: np.ndarray | None = None,
) -> pa.RecordBatch:
    """A batch of ``schema``: the user ``columns``, then the system columns of ``source``.

    ``rows`` selects (and orders) the source rows each output row descends from; ``snm``
    replaces their minor SN (for outputs numbered below one input, docs/design.md §3).
    """
    idx = None if rows is None else pa.array(rows, type=pa.int64())

    def system(name: str) -> pa.Array:
        col = source.column(name)
        return col if idx is None else col.take(idx)

    minor = system(SNM) if snm is None else pa.array(snm, type=pa.int64())
    arrays = [*columns, system(SN), minor, system(T0), system(PART)]
    arrays = [_as_array(a, f.type) for a, f in zip(arrays, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _as_array(a: pa.Array | pa.ChunkedArray, type_: pa.DataType) -> pa.Array:
    if isinstance(a, pa.ChunkedArray):
        a = a.combine_chunks()
    return a if a.type == type_ else a.cast(type_)


def part_array(batch: pa.RecordBatch) -> np.ndarray:
    """The ``_part`` column as int32 numpy."""
    return batch.column(PART).to_numpy(zero_copy_only=False).astype(np.int32, copy=False)


def int64_column(op: str, batch: pa.RecordBatch | pa.Table, name: str) -> np.ndarray:
    """An integer or timestamp column as int64 numpy (event times, durations)."""
    col = batch.column(name)
    if col.null_count:
        raise ValueError(f"{op}: column {name!r} holds nulls; filter them out before {op}")
    return col.cast(pa.int64()).to_numpy(zero_copy_only=False)


def check_time_type(op: str, schema: pa.Schema, name: str) -> None:
    """PlanError unless ``name`` is an integer or timestamp column."""
    t = schema.field(name).type
    if not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
        raise PlanError(f"{op}: time column {name!r} must be an integer or a timestamp, not {t}")


def time_type(schema: pa.Schema, name: str) -> pa.DataType:
    """The type of the window bounds (start, end) over the time column ``name``: its own
    timestamp type (unit and zone) for a timestamp column, int64 for an integer one."""
    t = schema.field(name).type
    return t if pa.types.is_timestamp(t) else pa.int64()


# -- key codes --------------------------------------------------------------------------------


class KeyCoder:
    """Int64 codes for the values of some key columns (exact when the types allow, else hashed).

    The choice depends only on the column types, fixed at ``bind``, so every batch of a stream
    and every process codes a key the same way. ``empty_ok``: the operator accepts no key
    columns at all (one group per partition: every row's code is 0, ``exact``); otherwise an
    empty list is a PlanError.
    """

    def __init__(self, op: str, columns: Sequence[str], empty_ok: bool = False) -> None:
        if isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns):
            raise PlanError(f"{op}: key columns (by) must be a list of column names, e.g. "
                            f"by=[\"page\"]; got {columns!r}")
        if not columns and not empty_ok:
            raise PlanError(f"{op}: key columns (by) must name at least one column; {op} "
                            f"keeps state per key, so name the column(s) that tell its groups "
                            f"apart")
        self.op = op
        self.columns = list(columns)
        self.exact = False
        self.key_schema = pa.schema([])

    def bind(self, schema: pa.Schema) -> None:
        require_columns(self.op, schema, self.columns)
        fields = [schema.field(c) for c in self.columns]
        self.key_schema = pa.schema(fields)
        self.exact = all(pa.types.is_integer(f.type) for f in fields) and (
            sum(f.type.bit_width for f in fields) <= 64
        )

    def keys(self, batch: pa.RecordBatch | pa.Table) -> pa.Table:
        """The key columns of ``batch`` as a table."""
        return pa.Table.from_batches([batch.select(self.columns)]) if isinstance(
            batch, pa.RecordBatch) else batch.select(self.columns)

    def encode(self, batch: pa.RecordBatch | pa.Table) -> np.ndarray:
        """One int64 code per row; hashed codes are checked for collisions within the batch."""
        if batch.num_rows == 0 or not self.columns:
            return np.zeros(batch.num_rows, dtype=np.int64)
        if self.exact:
            for c in self.columns:
                if batch.column(c).null_count:
                    raise ValueError(
                        f"{self.op}: key column {c!r} holds nulls; filter or fill them first"
                    )
            codes = exact_codes(batch, self.columns)
            assert codes is not None
            return codes
        codes = key_codes(batch, self.columns).view(np.int64)
        _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        if first.size < codes.size:
            keys = self.keys(batch)
            rep = keys.take(pa.array(first[inverse]))
            bad = ~rows_equal(rep, keys)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise collision(self.columns, rep.slice(i, 1), keys.slice(i, 1))
        return codes


def rows_equal(a: pa.Table, b: pa.Table) -> np.ndarray:
    """Row-wise equality of two tables with the same columns (null equals null)."""
    eq = np.ones(a.num_rows, dtype=bool)
    for name in a.column_names:
        x, y = a.column(name), b.column(name)
        same = pc.or_kleene(pc.equal(x, y), pc.and_(pc.is_null(x), pc.is_null(y)))
        eq &= pc.fill_null(same, False).to_numpy()
    return eq


def collision(columns: Sequence[str], a: pa.Table | None, b: pa.Table | None) -> KeyCollision:
    what = ", ".join(columns)
    detail = "" if a is None or b is None else f": {a.to_pylist()[0]} vs {b.to_pylist()[0]}"
    return KeyCollision(
        f"two different values of the key ({what}) got the same 64-bit code{detail}; "
        f"this is a hash collision, please report it with the two keys"
    )


# -- slots ------------------------------------------------------------------------------------


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer: a bijection of uint64 that scatters nearby values."""
    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def slot_of(part: np.ndarray, code: np.ndarray, sub: np.ndarray | None = None) -> np.ndarray:
    """The int64 slot of ``(part, code[, sub])``: a bijection of ``code`` for fixed part, sub."""
    s = code.astype(np.int64, copy=False).view(np.uint64) ^ _mix(
        part.astype(np.uint64) + np.uint64(0x632BE59BD9B4E019)
    )
    if sub is not None:
        s = s ^ _mix(_mix(sub.astype(np.int64, copy=False).view(np.uint64)) + np.uint64(1))
    return s.view(np.int64)


def runs(sorted_values: np.ndarray) -> np.ndarray:
    """Start index of every run of equal values in a sorted array."""
    if sorted_values.size == 0:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])


def expand_ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For ranges ``[lo[i], hi[i])``: (the range number i of every member, the member)."""
    lengths = np.maximum(hi - lo, 0)
    owner = np.repeat(np.arange(lo.size, dtype=np.int64), lengths)
    starts = np.cumsum(lengths) - lengths
    member = np.arange(owner.size, dtype=np.int64) - starts[owner] + lo[owner]
    return owner, member


def groups_of(
    part: np.ndarray, code: np.ndarray, sub: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by ``(part, code[, sub])``, keeping row order within a group.

    Returns (order, starts): ``order`` lists the rows group by group, ``starts`` the start
    of every group within ``order``.
    """
    slot = slot_of(part, code, sub)
    order = np.argsort(slot, kind="stable")
    s = slot[order]
    starts = runs(s)
    # Equal slots must mean equal identities; anything else is a slot collision.
    same = s[1:] == s[:-1]
    clash = (part[order][1:] != part[order][:-1]) | (code[order][1:] != code[order][:-1])
    if sub is not None:
        clash |= sub[order][1:] != sub[order][:-1]
    if (same & clash).any():
        raise KeyCollision("two mini-partition/key pairs share a state slot; please report it")
    return order, starts


# -- the keyed table --------------------------------------------------------------------------


class KeyTable:
    """Rows of state keyed by ``(part, code, sub)``, sorted by slot, in numpy arrays.

    ``columns`` maps a state column name to its dtype and per-row shape (``()`` for a scalar,
    ``(h,)`` for a row of h values). ``key_schema`` makes the table also keep the key values
    of every row (needed when the operator outputs them, or to verify hashed codes when
    ``verify`` is set). ``payload_schema`` keeps per row an Arrow row of any types besides
    (values numpy cannot hold, such as a group's first name), never compared on lookup.
    """

    def __init__(
        self,
        columns: Mapping[str, tuple[np.dtype | type, tuple[int, ...]]],
        key_schema: pa.Schema | None = None,
        verify: bool = False,
        payload_schema: pa.Schema | None = None,
    ) -> None:
        self.spec = {n: (np.dtype(t), tuple(s)) for n, (t, s) in columns.items()}
        self.key_schema = key_schema
        self.verify = verify and key_schema is not None
        self.slot = np.zeros(0, dtype=np.int64)
        self.part = np.zeros(0, dtype=np.int32)
        self.code = np.zeros(0, dtype=np.int64)
        self.sub = np.zeros(0, dtype=np.int64)
        self.cols = {n: np.zeros((0, *s), dtype=t) for n, (t, s) in self.spec.items()}
        self.keys: pa.Table | None = None if key_schema is None else key_schema.empty_table()
        self.payload: pa.Table | None = (None if payload_schema is None
                                         else payload_schema.empty_table())

    def __len__(self) -> int:
        return int(self.slot.size)

    def find(
        self,
        part: np.ndarray,
        code: np.ndarray,
        sub: np.ndarray | None = None,
        keys: pa.Table | None = None,
    ) -> np.ndarray:
        """The row of every query key, or -1 where absent (hits are verified)."""
        if sub is None:
            sub = np.zeros(code.size, dtype=np.int64)
        slot = slot_of(part, code, sub)
        if self.slot.size == 0 or slot.size == 0:
            return np.full(slot.size, -1, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.slot, slot), self.slot.size - 1)
        hit = self.slot[pos] == slot
        wrong = hit & ((self.part[pos] != part) | (self.code[pos] != code) | (self.sub[pos] != sub))
        if wrong.any():
            raise KeyCollision("two mini-partition/key pairs share a state slot; please report it")
        if self.verify and keys is not None and hit.any():
            assert self.keys is not None and self.key_schema is not None  # verify needs both
            mine = self.keys.take(pa.array(pos[hit]))
            theirs = keys.filter(pa.array(hit))
            bad = ~rows_equal(mine, theirs)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise collision(self.key_schema.names, mine.slice(i, 1), theirs.slice(i, 1))
        return np.where(hit, pos, -1)

    def insert(
        self,
        part: np.ndarray,
        code: np.ndarray,
        sub: np.ndarray | None,
        values: dict[str, np.ndarray],
        keys: pa.Table | None = None,
        payload: pa.Table | None = None,
    ) -> None:
        """Add rows for keys that are not in the table yet (each key once)."""
        if code.size == 0:
            return
        if sub is None:
            sub = np.zeros(code.size, dtype=np.int64)
        self._merge(part.astype(np.int32), code.astype(np.int64), sub.astype(np.int64),
                    values, keys, payload)

    def _merge(self, part: np.ndarray, code: np.ndarray, sub: np.ndarray,
               values: dict[str, np.ndarray], keys: pa.Table | None,
               payload: pa.Table | None = None) -> None:
        slot = slot_of(part, code, sub)
        # Both runs are sorted, so the stable sort is a linear merge (timsort).
        new_order = np.argsort(slot, kind="stable")
        order = np.argsort(np.concatenate([self.slot, slot[new_order]]), kind="stable")

        def merged(old: np.ndarray, new: np.ndarray) -> np.ndarray:
            return np.concatenate([old, new[new_order]])[order]

        self.slot = merged(self.slot, slot)
        if np.any(self.slot[1:] == self.slot[:-1]):
            raise KeyCollision("two mini-partition/key pairs share a state slot; please report it")
        self.part = merged(self.part, part)
        self.code = merged(self.code, code)
        self.sub = merged(self.sub, sub)
        for name, (dtype, shape) in self.spec.items():
            new = np.asarray(values[name], dtype=dtype).reshape((code.size, *shape))
            self.cols[name] = merged(self.cols[name], new)
        if self.keys is not None:
            if keys is None:
                raise ValueError("this table keeps key values: insert() needs keys")
            new_keys = keys.select(self.keys.column_names).cast(self.keys.schema)
            both = pa.concat_tables([self.keys, new_keys.take(pa.array(new_order))])
            self.keys = both.take(pa.array(order))
        if self.payload is not None:
            if payload is None:
                raise ValueError("this table keeps a payload: insert() needs it")
            new_payload = payload.cast(self.payload.schema).take(pa.array(new_order))
            self.payload = pa.concat_tables([self.payload, new_payload]).take(pa.array(order))

    def get(self, name: str, rows: np.ndarray, fill: Any = 0) -> np.ndarray:
        """Column ``name`` at ``rows`` (as from ``find``), ``fill`` where a row is -1."""
        col = self.cols[name]
        out = np.full((rows.size, *col.shape[1:]), fill, dtype=col.dtype)
        hit = rows >= 0
        out[hit] = col[rows[hit]]
        return out

    def set_payload(self, rows: np.ndarray, values: pa.Table) -> None:
        """Replace the payload of the given rows (distinct) with ``values``, row for row."""
        if rows.size == 0:
            return
        assert self.payload is not None
        pick = np.arange(len(self), dtype=np.int64)
        pick[rows] = len(self) + np.arange(rows.size)
        both = pa.concat_tables([self.payload, values.cast(self.payload.schema)])
        self.payload = both.take(pa.array(pick))

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the rows where ``mask`` is true."""
        if mask.all():
            return
        self.slot, self.part = self.slot[mask], self.part[mask]
        self.code, self.sub = self.code[mask], self.sub[mask]
        self.cols = {n: c[mask] for n, c in self.cols.items()}
        if self.keys is not None:
            self.keys = self.keys.filter(pa.array(mask))
        if self.payload is not None:
            self.payload = self.payload.filter(pa.array(mask))

    def delete(self, rows: np.ndarray) -> None:
        """Remove the given rows."""
        if rows.size:
            mask = np.ones(self.slot.size, dtype=bool)
            mask[rows] = False
            self.keep(mask)

    # -- mini-partition movement ---------------------------------------------------------------
    def export(self, part: int) -> dict[str, Any] | None:
        """The partition's rows as plain arrays (None when it holds none)."""
        mask = self.part == part
        if not mask.any():
            return None
        rows = np.flatnonzero(mask)
        return {
            "code": self.code[rows].copy(),
            "sub": self.sub[rows].copy(),
            "cols": {n: c[rows].copy() for n, c in self.cols.items()},
            "keys": None if self.keys is None else self.keys.take(pa.array(rows)),
            **({} if self.payload is None else {"payload": self.payload.take(pa.array(rows))}),
        }

    def load(self, part: int, state: dict[str, Any] | None) -> None:
        """Replace the partition's rows with an ``export`` of them."""
        self.drop(part)
        if state is None or len(state["code"]) == 0:
            return
        code = np.asarray(state["code"], dtype=np.int64)
        self._merge(np.full(code.size, part, dtype=np.int32), code,
                    np.asarray(state["sub"], dtype=np.int64), state["cols"], state["keys"],
                    state.get("payload"))

    def drop(self, part: int) -> None:
        self.keep(self.part != part)

    def row_nbytes(self) -> float:
        per_row = 4 + 3 * 8 + sum(t.itemsize * int(np.prod(s)) for t, s in self.spec.values())
        if self.keys is not None and self.keys.num_rows:
            per_row += self.keys.nbytes / self.keys.num_rows
        if self.payload is not None and self.payload.num_rows:
            per_row += self.payload.nbytes / self.payload.num_rows
        return per_row

    def info(self) -> list[PartitionInfo]:
        """Distinct key codes and approximate bytes per partition."""
        if self.slot.size == 0:
            return []
        parts, rows = np.unique(self.part, return_counts=True)
        order = np.lexsort((self.code, self.part))
        p, c = self.part[order], self.code[order]
        first = np.r_[True, (p[1:] != p[:-1]) | (c[1:] != c[:-1])]
        keys = np.bincount(np.searchsorted(parts, p[first]), minlength=parts.size)
        per_row = self.row_nbytes()
        return [
            PartitionInfo(int(pt), int(k), int(r * per_row))
            for pt, k, r in zip(parts, keys, rows, strict=True)
        ]


def rebind(current: KeyTable, fresh: KeyTable) -> KeyTable:
    """The table to use after ``bind``: ``fresh``, unless ``current`` already holds state."""
    if len(current) == 0:
        return fresh
    if (current.key_schema is None) != (fresh.key_schema is None):
        raise RuntimeError("an operator holding state was bound to a different input schema")
    return current


class TableState:
    """State movement for an operator whose state is one per-partition table (``_state``):
    ``get_partition_state`` / ``install_partition_state`` / ``drop_partition`` /
    ``partition_info`` (thesis ch. 4's partition API) delegate to its export/load/drop/info.
    Put it before ``Operator`` in the bases."""

    def _state(self) -> Any:
        # a mixin: every operator it is mixed into keeps its table in ``_table`` (KeyTable,
        # or its own kind of table with the same export/load/drop/info)
        return self._table  # type: ignore[attr-defined]

    def get_partition_state(self, part: int) -> Any:
        return self._state().export(part)

    def install_partition_state(self, part: int, state: Any) -> None:
        self._state().load(part, state)

    def drop_partition(self, part: int) -> None:
        self._state().drop(part)

    def partition_info(self) -> list[PartitionInfo]:
        return self._state().info()
