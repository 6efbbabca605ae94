"""A stage's program: the logical steps one physical stage runs, over its ports.

A physical stage (or the ingress) receives the rows of several ports (``ports.py``) and runs
the dataflow's steps that live at its depth: the head of each exchange (its port's rows), the
operators applied after it (a tree: one stream may feed several steps), joins of two ports,
and the union of sources at the ingress. Its output is the rows of the next exchange's
ports: each step output that leaves the stage, and each port relayed through it unchanged.

The order is the protocol's: rows go in and come out in ``(_sn, _snm, _port)`` order, every
operator sees its input in SN order, and the progress the stage claims per partition is the
lowest any of its steps claims (an operator holding windows back holds the whole stage's
claim back with it; the other steps' rows above that claim simply wait downstream).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.ports import (
    Port,
    decode,
    encode,
    exchange_schema,
    sort_rows,
    split_ports,
)
from sparkflux.model.batch import concat, empty, sort_by_sn
from sparkflux.model.keys import partition_of
from sparkflux.model.progress import Frontier
from sparkflux.model.schema import PART, SN, SRC
from sparkflux.operators.base import Operator
from sparkflux.operators.stream_join import StreamJoin
from sparkflux.operators.union import pad_to


@dataclass
class Step:
    """One logical step a stage runs.

    ``kind``: ``head`` (the rows of in-port ``inputs[0]``), ``apply`` (``operator`` on the
    output of step ``inputs[0]``), ``join`` (the two-input ``operator`` on in-ports
    ``inputs[0]`` and ``inputs[1]``), ``union`` (the in-ports ``inputs``, padded to
    ``schema``)."""

    name: str
    kind: str
    inputs: tuple[int, ...]
    operator: Operator | None = None
    schema: pa.Schema | None = None  # the step's output rows (port_schema form)


@dataclass
class StageProgram:
    """The steps of one stage, its in-ports and its out-ports.

    ``outputs[k]``: where out-port k's rows come from: ``("step", i)`` or ``("relay", j)``
    (in-port j passed on)."""

    in_ports: tuple[Port, ...]
    out_ports: tuple[Port, ...]
    steps: list[Step]
    outputs: list[tuple[str, int]]
    partitions: int
    to_egress: bool = False
    in_schema: pa.Schema = field(init=False)
    out_schema: pa.Schema = field(init=False)
    wire_schema: pa.Schema = field(init=False)  # out_schema and ``_src``
    held: HeldRows = field(init=False)

    def __post_init__(self) -> None:
        self.in_schema = exchange_schema(self.in_ports)
        self.out_schema = exchange_schema(self.out_ports)
        self.wire_schema = self.out_schema.append(pa.field(SRC, pa.int32(), nullable=False))
        self.held = HeldRows(self.wire_schema)

    @property
    def operators(self) -> tuple[Operator, ...]:
        """Every operator of the stage, in a fixed order (a partition's state is theirs), the
        rows held above the stage's claim last."""
        return (*(s.operator for s in self.steps if s.operator is not None), self.held)

    @property
    def order_insensitive(self) -> bool:
        """Whether the stage gives the same rows whatever order its input comes in: heads,
        unions and operators that say so (``Operator.order_insensitive``), no join. Its rows
        may then be run as they arrive, and its output claim is its input frontier."""
        return all(s.kind in ("head", "union") or (
            s.kind == "apply" and s.operator is not None and _insensitive(s.operator))
            for s in self.steps)

    @property
    def arrival_input(self) -> bool:
        """Whether the stage may take its input in arrival order: every step a head, a
        union, an order-insensitive operator or one that folds any order and emits in SN
        order at its claim (``Operator.arrival_input``), no join. Its output then leaves in
        SN order unless the stage is ``order_insensitive`` too."""
        return all(s.kind in ("head", "union") or (
            s.kind == "apply" and s.operator is not None and (
                _insensitive(s.operator) or s.operator.arrival_input))
            for s in self.steps)

    def run(self, rows: pa.RecordBatch, frontier: Frontier, hold: bool = True
            ) -> tuple[pa.RecordBatch, Frontier]:
        """The stage's input rows (exchange rows, SN order) and each partition's input
        frontier -> its output rows (the next exchange's, routed, with ``_src``: the
        partition that produced each) and output frontier. ``hold``: keep rows above the
        claim back (``HeldRows``); the ingress, whose steps are stateless and whose claim is
        its numbering, does not."""
        ports = split_ports(rows, len(self.in_ports))
        inputs = [None if b is None else decode(self.in_ports, p, b)
                  for p, b in zip(self.in_ports, ports, strict=True)]
        out: list[pa.RecordBatch | None] = []
        claims: list[Frontier] = []
        fronts: list[Frontier] = []
        for step in self.steps:
            batch, front = self._step(step, inputs, out, fronts, frontier)
            out.append(batch)
            fronts.append(front)
            if front is not frontier:
                claims.append(front)
        result = frontier
        for c in claims:
            result = result.min(c.sn, c.wm)
        sends = []
        for port, (kind, i) in zip(self.out_ports, self.outputs, strict=True):
            batch = out[i] if kind == "step" else inputs[i]
            if batch is None or not batch.num_rows:
                continue
            rows = encode(self.out_ports, self.out_schema, port, batch, self._route(port, batch))
            src = batch.column(PART).cast(pa.int32())
            sends.append(pa.RecordBatch.from_arrays([*rows.columns, src],
                                                    schema=self.wire_schema))
        # one port's rows come from one step, in SN order already
        rows = empty(self.wire_schema) if not sends else sends[0] if len(sends) == 1 \
            else sort_rows(concat(sends, self.wire_schema))
        return (self.held.release(rows, result.sn) if hold else rows), result

    def _step(self, step: Step, inputs: list[pa.RecordBatch | None],
              out: list[pa.RecordBatch | None], fronts: list[Frontier], frontier: Frontier
              ) -> tuple[pa.RecordBatch | None, Frontier]:
        op = step.operator
        if step.kind == "head":
            return inputs[step.inputs[0]], frontier
        if step.kind == "union":
            parts = [inputs[i] for i in step.inputs if inputs[i] is not None]
            if not parts:
                return None, frontier
            assert step.schema is not None
            padded = [pad_to(b, step.schema) for b in parts]
            return sort_by_sn(concat(padded, step.schema)), frontier
        assert op is not None
        if step.kind == "join":
            left, right = inputs[step.inputs[0]], inputs[step.inputs[1]]
            assert isinstance(op, StreamJoin)  # the compiler gives a join step its StreamJoin
            batch = op.process_sides(left, right)
            extra, front = op.advance(frontier)
        else:
            parent, front_in = out[step.inputs[0]], fronts[step.inputs[0]]
            batch = op.process(parent) if parent is not None and parent.num_rows \
                else empty(op.output_schema)
            extra, front = op.advance(front_in)
        if extra.num_rows:
            batch = sort_by_sn(concat([batch, extra]))
        return batch, front

    def _route(self, port: Port, batch: pa.RecordBatch) -> np.ndarray:
        """Each row's partition at the next exchange."""
        n = batch.num_rows
        if self.to_egress:
            return np.zeros(n, dtype=np.int32)
        if port.key is None:  # a relay keeps its partition (or spreads by SN at the ingress)
            part = batch.column(PART).to_numpy().astype(np.int32)
            if (part < 0).any() or not n:
                return (batch.column(SN).to_numpy() % self.partitions).astype(np.int32)
            return part
        return partition_of(batch, list(port.key), self.partitions)


def _insensitive(op: Operator) -> bool:
    """An operator that says it is order-insensitive, keeps no state and holds no progress
    back (a subclass of ``Map`` that does either is taken at its word no further)."""
    return op.order_insensitive and not op.stateful and type(op).advance is Operator.advance


class HeldRows(Operator):
    """Output rows above the stage's claim, held until the claim covers them.

    A stage of several steps claims the lowest of their claims, while one step (a relay, a
    join) may already have rows above it. Sent, they would break what a claim promises
    downstream: every row with an event time below the claimed watermark has an SN at or
    below the claimed SN (FH-Cons releases rows up to the SN frontier and hands the
    operators the watermark of the claims that frontier covers). So they wait here, in SN
    order, and are part of the partition's state (a catch-up moves them with the rest)."""

    stateful = True

    def __init__(self, schema: pa.Schema) -> None:
        super().__init__()
        self._output_schema = schema
        self.rows: pa.RecordBatch | None = None

    def _bind(self, input_schema: pa.Schema) -> pa.Schema:
        return input_schema

    def process(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        raise TypeError("HeldRows is fed by its stage program (release)")

    def release(self, rows: pa.RecordBatch, claim: np.ndarray) -> pa.RecordBatch:
        """The rows (new and held) at or below their partition's claim, in SN order."""
        if self.rows is not None:
            rows = sort_rows(concat([self.rows, rows], self.output_schema))
            self.rows = None
        if not rows.num_rows:
            return rows
        src = rows.column(SRC).to_numpy()
        go = rows.column(SN).to_numpy() <= claim[src]
        if go.all():
            return rows
        self.rows = rows.filter(pa.array(~go))
        return rows.filter(pa.array(go))

    def get_partition_state(self, part: int) -> pa.RecordBatch | None:
        if self.rows is None:
            return None
        mine = self.rows.column(SRC).to_numpy() == part
        return self.rows.filter(pa.array(mine)) if mine.any() else None

    def install_partition_state(self, part: int, state: pa.RecordBatch | None) -> None:
        self.drop_partition(part)
        if state is not None and state.num_rows:
            held = [self.rows] if self.rows is not None else []
            self.rows = sort_rows(concat([*held, state.cast(self.output_schema)],
                                         self.output_schema))

    def drop_partition(self, part: int) -> None:
        if self.rows is not None:
            keep = self.rows.column(SRC).to_numpy() != part
            self.rows = self.rows.filter(pa.array(keep)) if keep.any() else None
