"""The physical plan: stages of P mini-partitions placed over N sites.

A *stage* runs the steps of one depth of the dataflow's DAG, between two exchanges (thesis
ch. 2: a producer/consumer pair of the Exchange), as a program over the ports of the exchange
that feeds it (``program.py``, ``ports.py``). Every stage has the same number P of
mini-partitions; a row goes to mini-partition ``hash(key) mod P`` of the stage (the key of
its port) and that partition lives on site ``placement[part]``. Stateless steps before any
exchange run in the ingress, whose ports are the sources.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pyarrow as pa

from sparkflux.dataflow.api import Sink, Source
from sparkflux.dataflow.ports import decode, port_schema, split_ports
from sparkflux.dataflow.program import StageProgram, Step
from sparkflux.operators.base import Operator


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """One input stream: its source's name, event-time column and allowed lateness (what
    the ingress sequencer, ``protocol/sequencer.py``, orders it by)."""

    name: str
    event_time: str | None
    lateness: int = 0


@dataclass(frozen=True)
class StagePlan:
    """One stage: its program (the steps at its depth, over the ports of the exchange that
    feeds it), every operator of it, and the rows of the exchanges in and out."""

    index: int
    name: str
    key: tuple[str, ...]  # the first port's key (what ``describe`` shows)
    operators: tuple[Operator, ...]
    input_schema: pa.Schema
    output_schema: pa.Schema
    program: StageProgram


@dataclass(frozen=True)
class SinkSpec:
    """One sink of the dataflow: its name, the user's Sink object (or None: the run's
    output), the rows it gets (user columns and the system columns) and its egress port."""

    name: str
    sink: Sink | None
    schema: pa.Schema
    port: int


@dataclass(frozen=True)
class PhysicalPlan:
    """What the driver and the sites run."""

    name: str
    sources: tuple[Source, ...]
    # each source's stream (name, event time, allowed lateness) and valid-record schema
    streams: tuple[StreamSpec, ...]
    source_schemas: tuple[pa.Schema, ...]
    ingress: StageProgram  # the sources as its ports; stateless steps before any exchange
    stages: tuple[StagePlan, ...]
    sinks: tuple[SinkSpec, ...]
    partitions: int
    sites: int
    # the column of the ingress's records that says how many input sequence numbers each
    # takes (a chunk of a source read on the sites, ``site_read.py``); None: one each
    isn_span: str | None = None
    # --consistency eventual's delay bound X (seconds): every merge on the sites releases
    # what it has held for X tentatively (``protocol/merge_waits.py``); None: strict
    max_delay: float | None = None
    # --arrival-order: racing copies run the order-insensitive stages' rows as they arrive
    # (False: every stage merges its input in SN order)
    arrival_order: bool = False
    # --stream-replicas: racing copies garbage-collect their input streams down to this many
    # producer copies each, the ones whose punctuations came first (0: every copy sends)
    stream_replicas: int = 0
    # ... and revive a collected stream that stands still this long (seconds of the host's
    # clock; the simulator's steps) while the copy's other streams move
    stream_stall: float = 0.3

    def arrival(self, race: bool) -> tuple[bool, ...]:
        """Per stage: whether it runs its rows as they arrive, without the SN-ordered merge
        (racing replicas, ``arrival_order`` on, a stage whose operators take any order:
        ``StageProgram.arrival_input``). It filters its input's duplicates per row, so that
        a row it ran above its frontier runs once."""
        on = race and self.arrival_order
        return tuple(on and st.program.arrival_input for st in self.stages)

    def unordered(self, race: bool) -> tuple[bool, ...]:
        """Per stage: whether its output stream leaves out of SN order (a stage run in
        arrival order whose operators are all order-insensitive: rows above its claim go at
        once). Every consumer of it (the next stage, or the egress after the last) filters
        duplicates per row."""
        return tuple(a and st.program.order_insensitive
                     for a, st in zip(self.arrival(race), self.stages, strict=True))

    @property
    def output_schema(self) -> pa.Schema:
        """The rows the egress receives (every sink's port)."""
        return self.stages[-1].output_schema

    def sink_schema(self, k: int) -> pa.Schema:
        """The rows sink ``k`` receives: its user columns and the system columns."""
        ports = self.stages[-1].program.out_ports
        return port_schema(ports[self.sinks[k].port])

    def by_sink(self, rows: pa.RecordBatch) -> list[tuple[int, pa.RecordBatch]]:
        """The egress's rows (every sink's port, in SN order) as each sink's, in order."""
        ports = self.stages[-1].program.out_ports
        parts = split_ports(rows, len(ports))
        out = []
        for k, spec in enumerate(self.sinks):
            mine = parts[spec.port]
            if mine is not None:
                out.append((k, decode(ports, ports[spec.port], mine)))
        return out

    def for_sites(self) -> PhysicalPlan:
        """The plan without what only the driver needs (the sources, the sinks' objects):
        what a site gets (it may hold threads and open files that neither pickle nor copy)."""
        return replace(self, sources=(), sinks=tuple(replace(k, sink=None) for k in self.sinks))

    def site_of(self, part: int) -> int:
        """The site holding mini-partition ``part`` (the same for every stage)."""
        return part % self.sites

    def describe(self) -> str:
        lines = [f"dataflow {self.name!r}: {self.partitions} mini-partitions over "
                 f"{self.sites} sites"]
        ingress = [s.name for s in self.ingress.steps if s.kind != "head"]
        if ingress:
            lines.append("  ingress: " + ", ".join(ingress))
        for s in self.stages:
            steps = ", ".join(_describe_step(s.program, st) for st in s.program.steps)
            lines.append(f"  stage {s.index}: {steps or '(relay)'}")
        if len(self.sinks) > 1:
            lines.append("  sinks: " + ", ".join(k.name for k in self.sinks))
        return "\n".join(lines)


def _describe_step(program: StageProgram, step: Step) -> str:
    if step.kind == "head":
        port = program.in_ports[step.inputs[0]]
        if port.label.endswith(" (chunks)"):  # a source read on the sites (``site_read``)
            return f"chunks of {port.label.removesuffix(' (chunks)')} in turn"
        return f"exchange(by={list(port.key or ())})"
    if step.kind == "join":
        return f"join {step.name}"
    return step.operator.name if step.operator is not None else step.name
