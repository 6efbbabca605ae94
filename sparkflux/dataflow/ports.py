"""Ports: several logical streams through one physical exchange.

A dataflow is a DAG (fan-out, several sinks, joins of two streams), but the protocol moves
rows through a chain of exchanges, one per physical stage (``plan.py``). Every logical edge
that crosses an exchange is a *port* of it: its rows carry the port's number in ``_port``,
and its user columns under the prefix ``p<k>.`` when the exchange carries more than one port
(columns of different ports never clash, whatever their names and types); a row has nulls in
the other ports' columns. A port routes its rows by its own key: ``hash(key) mod P``, the
partitioning its destination needs (an exchange's ``by``, a join side's ``on``), or keeps
their partition (``key=None``: a relay towards a sink or a later stage that needs no
repartitioning).

The protocol never looks inside: it orders, acknowledges and replays rows by sequence number
whatever their port. Rows of one input that fan out to several ports share its sequence
number, so the order everywhere is ``(_sn, _snm, _port)`` (``sort_rows``): the same on every
replica.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from sparkflux.model.schema import PART, PORT, SN, SNM, T0, user_fields, with_system

PORT_FIELD = pa.field(PORT, pa.int16(), nullable=False)
PART_FIELD = pa.field(PART, pa.int32(), nullable=False)


@dataclass(frozen=True)
class Port:
    """One logical edge through one exchange.

    ``schema``: the user columns of its rows. ``key``: the columns it is partitioned by at
    this exchange (None: rows keep their partition). ``target``: what takes its rows on the
    receiving side (a program node's name, ``relay:<port>`` to pass them on as that port of
    the next exchange, or ``sink:<index>`` at the egress). ``side``: 0 or 1 for the inputs of
    a join."""

    index: int
    schema: pa.Schema
    key: tuple[str, ...] | None
    target: str
    side: int = 0
    label: str = ""  # what the user calls the edge (for messages)


def prefix(ports: Sequence[Port], port: Port) -> str:
    return "" if len(ports) == 1 else f"p{port.index}."


def exchange_schema(ports: Sequence[Port]) -> pa.Schema:
    """The rows of an exchange: every port's user columns (prefixed when several), then the
    system columns, ``_part`` and ``_port``."""
    fields = []
    for p in ports:
        pre = prefix(ports, p)
        nullable = len(ports) > 1
        fields += [f.with_name(pre + f.name).with_nullable(f.nullable or nullable)
                   for f in user_fields(p.schema)]
    return with_system(fields).append(PART_FIELD).append(PORT_FIELD)


def port_schema(port: Port) -> pa.Schema:
    """What an operator sees of a port: its user columns, the system columns and ``_part``."""
    return with_system(user_fields(port.schema)).append(PART_FIELD)


def encode(ports: Sequence[Port], schema: pa.Schema, port: Port, rows: pa.RecordBatch,
           part: np.ndarray) -> pa.RecordBatch:
    """``rows`` of ``port`` (its user columns and the system columns) as rows of the exchange
    (``schema`` = ``exchange_schema(ports)``), routed to partitions ``part``."""
    n = rows.num_rows
    pre = prefix(ports, port)
    arrays = []
    for f in schema:
        if f.name == PART:
            arrays.append(pa.array(part, pa.int32()))
        elif f.name == PORT:
            arrays.append(pa.array(np.full(n, port.index, dtype=np.int16)))
        elif f.name in (SN, SNM, T0):
            arrays.append(rows.column(f.name))
        elif pre and not f.name.startswith(pre):
            arrays.append(pa.nulls(n, f.type))
        else:
            col = rows.column(f.name[len(pre):])
            arrays.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def decode(ports: Sequence[Port], port: Port, rows: pa.RecordBatch) -> pa.RecordBatch:
    """The rows of ``port`` out of exchange rows (already only that port's), as
    ``port_schema(port)``."""
    pre = prefix(ports, port)
    target = port_schema(port)
    arrays = []
    for f in target:
        col = rows.column(f.name if f.name in (SN, SNM, T0, PART) else pre + f.name)
        arrays.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def split_ports(rows: pa.RecordBatch, n_ports: int) -> list[pa.RecordBatch | None]:
    """The rows of each port, each in the order they came (None where a port has none)."""
    if n_ports == 1:
        return [rows if rows.num_rows else None]
    port = rows.column(PORT).to_numpy()
    out: list[pa.RecordBatch | None] = []
    for k in range(n_ports):
        mine = port == k
        out.append(rows.filter(pa.array(mine)) if mine.any() else None)
    return out


def sort_rows(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` in ``(_sn, _snm, _port)`` order (stable)."""
    if batch.num_rows < 2:
        return batch
    sn, snm = batch.column(SN).to_numpy(), batch.column(SNM).to_numpy()
    keys = [snm, sn]
    if batch.schema.get_field_index(PORT) >= 0:
        port = batch.column(PORT).to_numpy()
        if port.min() != port.max():  # one port: (_sn, _snm) decides
            keys.insert(0, port)
    elif ((sn[1:] > sn[:-1]) | ((sn[1:] == sn[:-1]) & (snm[1:] >= snm[:-1]))).all():
        return batch
    order = np.lexsort(keys)
    if (order[1:] > order[:-1]).all():
        return batch
    return batch.take(pa.array(order))

def source_rows_schema(ports: Sequence[Port]) -> pa.Schema:
    """What the ingress numbers: every source's columns (prefixed when several) and
    ``_port`` (the source), before the system columns are added."""
    return pa.schema([f for f in exchange_schema(ports) if f.name not in (SN, SNM, T0, PART)])


def encode_source(ports: Sequence[Port], schema: pa.Schema, port: Port,
                  rows: pa.RecordBatch) -> pa.RecordBatch:
    """A source's valid records (its user columns) as ``source_rows_schema`` rows."""
    n = rows.num_rows
    pre = prefix(ports, port)
    arrays = []
    for f in schema:
        if f.name == PORT:
            arrays.append(pa.array(np.full(n, port.index, dtype=np.int16)))
        elif pre and not f.name.startswith(pre):
            arrays.append(pa.nulls(n, f.type))
        else:
            col = rows.column(f.name[len(pre):])
            arrays.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)
