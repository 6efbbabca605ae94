"""The plan of a dataflow whose source is read on the sites (``read_on="sites"``).

``read_on_sites`` rewrites a compiled plan so that the rows never pass through the driver:
its one source becomes a ``ChunkSource`` (the driver admits one chunk record per run of
rows, ``io/chunks.py``), and a stage is put first that reads the chunks, ``ReadChunks``,
followed by the ingress's own stateless steps. That stage's out-ports are the ingress's, so
every later stage is what it was, one place further on. A chunk takes as many input
sequence numbers as it has rows to keep (the plan's ``isn_span``), so the rows get the
numbers the driver would have given them. The ingress deals the chunks over the reader's
mini-partitions in turn, so consecutive chunks are read by different sites at once; the
first real stage merges the readers' streams by SN, as every stage merges its producers,
which gives the order (file, row).

Every stage of the plan runs under the same protocol: the readers are replicated, caught up
and moved like any other mini-partition, with nothing new on the wire.
"""

from __future__ import annotations

from dataclasses import replace

from sparkflux.dataflow.plan import PhysicalPlan, StagePlan, StreamSpec
from sparkflux.dataflow.ports import Port, port_schema
from sparkflux.dataflow.program import StageProgram, Step
from sparkflux.io.chunks import CHUNK_SCHEMA, SPAN, ChunkSource, ReadChunks
from sparkflux.model.errors import PlanError

HEAD = "chunks"


class SiteReadable:
    """A source that may be read on the sites: ``read_on`` is ``"driver"`` or ``"sites"``;
    with ``"sites"`` the compiler's ``place_reading`` rewrites the plan (``read_on_sites``)."""

    read_on: str = "driver"

    def place_reading(self, plan: PhysicalPlan) -> PhysicalPlan:
        return read_on_sites(plan) if self.read_on == "sites" else plan


def read_on_sites(plan: PhysicalPlan) -> PhysicalPlan:
    """``plan`` with its source read by a first stage on the sites (see the module)."""
    if len(plan.sources) != 1:
        names = ", ".join(s.name for s in plan.streams)
        raise PlanError(f"read_on='sites' takes a dataflow with one source; this one has "
                        f"{len(plan.sources)} ({names}), which the driver merges by event "
                        f"time: read them with read_on='driver'")
    (source,), (stream,) = plan.sources, plan.streams
    steps = plan.ingress.steps
    if steps[0].kind != "head" or any(s.kind != "apply" for s in steps[1:]):
        raise PlanError("read_on='sites': the steps before the first exchange must be "
                        "operators applied to the source (filters, maps)")
    valid = plan.source_schemas[0]
    # A SiteReadable source lands files (``LandingFiles``: FileStreamSource, DataFrameSource);
    # the plan types its sources as plain ``Source`` (no chunk_rows, not LandingFiles).
    chunks = ChunkSource(source, source.chunk_rows, stream.name,  # type: ignore[arg-type, attr-defined]
                         valid, stream.lateness)
    port = Port(0, CHUNK_SCHEMA, None, HEAD, 0, f"{stream.name} (chunks)")
    head = port_schema(port)
    ingress = StageProgram((port,), (port,), [Step(HEAD, "head", (0,), schema=head)],
                           [("step", 0)], plan.partitions)
    reader = ReadChunks(valid, stream.event_time, stream.lateness, stream.name)
    read = reader.bind(head)
    moved = [Step(s.name, s.kind, tuple(i + 1 for i in s.inputs), s.operator, s.schema)
             for s in steps[1:]]
    program = StageProgram(
        (port,), plan.ingress.out_ports,
        [Step(HEAD, "head", (0,), schema=head), Step(reader.name, "apply", (0,), reader, read),
         *moved],
        [("step", i + 1) if kind == "step" else ("step", 1)
         for kind, i in plan.ingress.outputs],
        plan.partitions, plan.ingress.to_egress)
    name = "+".join([reader.name, *(s.name for s in moved)])
    first = StagePlan(0, name, (), program.operators, program.in_schema, program.out_schema,
                      program)
    return replace(
        plan, sources=(chunks,),
        streams=(StreamSpec(stream.name, chunks.event_time, 0),),
        source_schemas=(CHUNK_SCHEMA,), ingress=ingress,
        stages=(first, *(replace(s, index=s.index + 1) for s in plan.stages)),
        isn_span=SPAN)
