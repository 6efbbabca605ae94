"""The physical plan: stages of P mini-partitions placed over N sites.

A *stage* is the chain of operators between two exchanges (thesis ch. 2: a producer/consumer
pair of the Exchange). Every stage has the same number P of mini-partitions; a row goes to
mini-partition ``hash(key) mod P`` of the stage and that partition lives on site
``placement[part]``. Stateless operators before the first exchange run in the ingress.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sparkflux.dataflow.api import Sink, Source
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
    """One stage: the exchange key that feeds it and its operator chain."""

    index: int
    name: str
    key: tuple[str, ...]
    operators: tuple[Operator, ...]
    input_schema: pa.Schema
    output_schema: pa.Schema


@dataclass(frozen=True)
class PhysicalPlan:
    """What the driver and the sites run."""

    name: str
    sources: tuple[Source, ...]
    # each source's stream (name, event time, allowed lateness) and valid-record schema
    streams: tuple[StreamSpec, ...]
    source_schemas: tuple[pa.Schema, ...]
    source_schema: pa.Schema  # what the ingress numbers: the union of the sources' columns
    ingress_operators: tuple[Operator, ...]
    stages: tuple[StagePlan, ...]
    sink: Sink | None
    partitions: int
    sites: int

    @property
    def output_schema(self) -> pa.Schema:
        return self.stages[-1].output_schema

    def site_of(self, part: int) -> int:
        """The site holding mini-partition ``part`` (the same for every stage)."""
        return part % self.sites

    def describe(self) -> str:
        lines = [f"dataflow {self.name!r}: {self.partitions} mini-partitions over "
                 f"{self.sites} sites"]
        if self.ingress_operators:
            lines.append("  ingress: " + " -> ".join(o.name for o in self.ingress_operators))
        for s in self.stages:
            ops = " -> ".join(o.name for o in s.operators) or "(pass-through)"
            lines.append(f"  stage {s.index}: exchange(by={list(s.key)}) -> {ops}")
        return "\n".join(lines)
