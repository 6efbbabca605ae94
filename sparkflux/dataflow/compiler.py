"""Compile a logical ``Dataflow`` into a ``PhysicalPlan``, or fail with a clear message.

Rules (what a plan must look like to run):
- exactly one sink, reached from the sources through a chain of steps;
- ``union`` merges sources before the first exchange, where the ingress sequencer puts their
  records in one event-time order (each source needs an event_time then) and the ingress
  numbers them with one sequence of ISNs; their columns may differ (null-padded);
- a stateful operator must come after an ``exchange(by=...)``, which fixes its partitioning;
- every exchange key and every operator column must exist at that point;
- P mini-partitions >= N sites, so that every site holds at least one partition.
"""

from __future__ import annotations

import pyarrow as pa

from sparkflux.dataflow.api import Dataflow, Node
from sparkflux.dataflow.plan import PhysicalPlan, StagePlan, StreamSpec
from sparkflux.model.schema import PART, check_user_name, with_system
from sparkflux.operators.base import Operator, PlanError, require_columns


def stage_schema(fields: list[pa.Field] | pa.Schema) -> pa.Schema:
    """User fields followed by the system columns and ``_part``."""
    base = with_system(list(fields))
    return base.append(pa.field(PART, pa.int32(), nullable=False))


def compile_plan(df: Dataflow, partitions: int, sites: int) -> PhysicalPlan:
    if sites < 1:
        raise PlanError(f"--sites must be at least 1 (got {sites})")
    if partitions < sites:
        raise PlanError(
            f"--partitions ({partitions}) must be at least --sites ({sites}) so that every "
            f"site holds a mini-partition; raise --partitions (e.g. {sites * 8})"
        )
    sinks = df.sinks
    if len(sinks) != 1:
        raise PlanError(f"dataflow {df.name!r} must end in exactly one sink() (has {len(sinks)})")
    chain = _chain_to(sinks[0])
    head, tail = chain[0], chain[1:]

    source_nodes = [head] if head.kind == "source" else list(head.parents)
    sources, schema, ingress_ops = _compile_head(head)
    if len(sources) > 1:
        untimed = [n.name for n in source_nodes if n.source.event_time is None]  # type: ignore[union-attr]
        if untimed:
            raise PlanError(
                f"union {head.name!r}: source {untimed[0]!r} has no event_time; sources are "
                f"merged in event-time order (the same order in every run), so give each an "
                f"event_time column")
    streams = tuple(StreamSpec(n.name, n.source.event_time,  # type: ignore[union-attr]
                               n.lateness if n.lateness is not None
                               else n.source.lateness)  # type: ignore[union-attr]
                    for n in source_nodes)

    stages: list[StagePlan] = []
    current: list[Operator] = ingress_ops
    key: tuple[str, ...] | None = None
    stage_input = schema
    for node in tail:
        if node.kind == "exchange":
            if key is None:
                ingress_ops = current
            else:
                stages.append(_stage(len(stages), key, current, stage_input, schema))
            require_columns(f"exchange {node.name!r}", schema, list(node.by))
            key, current, stage_input = node.by, [], schema
        elif node.kind == "apply":
            op = node.operator
            assert op is not None
            if key is None and op.stateful:
                raise PlanError(
                    f"step {node.name!r} ({op.name}) keeps state, so it needs an "
                    f"exchange(by=[...]) before it that partitions its input"
                )
            schema = op.bind(schema)
            current = current + [op]
        elif node.kind == "union":
            raise PlanError(
                f"union {node.name!r} comes after an exchange; sparkflux merges streams at the "
                f"ingress, so put union() before the first exchange()"
            )
        elif node.kind == "sink":
            pass
        else:  # pragma: no cover - Node kinds are closed
            raise PlanError(f"unknown step kind {node.kind!r}")
    if key is None:
        raise PlanError(
            f"dataflow {df.name!r} has no exchange(by=[...]): nothing to partition over sites"
        )
    stages.append(_stage(len(stages), key, current, stage_input, schema))
    return PhysicalPlan(
        name=df.name,
        sources=tuple(sources),
        streams=streams,
        source_schemas=tuple(pa.schema(list(s.schema)) for s in sources),
        source_schema=pa.schema(list(sources[0].schema)) if len(sources) == 1
        else _user_schema(head),
        ingress_operators=tuple(ingress_ops),
        stages=tuple(stages),
        sink=sinks[0].sink,
        partitions=partitions,
        sites=sites,
    )


def _stage(index: int, key: tuple[str, ...], ops: list[Operator], inp: pa.Schema,
           out: pa.Schema) -> StagePlan:
    name = "+".join(o.name for o in ops) or f"stage{index}"
    return StagePlan(index, name, tuple(key), tuple(ops), inp, out)


def _chain_to(sink: Node) -> list[Node]:
    """The steps from the head (a source, or a union of sources) to the sink, in order."""
    chain: list[Node] = []
    node = sink
    while node.kind not in ("source", "union"):
        chain.append(node)
        if len(node.parents) != 1:
            raise PlanError(f"step {node.name!r} has {len(node.parents)} inputs; expected 1")
        node = node.parents[0]
    chain.append(node)
    chain.reverse()
    return chain


def _compile_head(head: Node) -> tuple[list, pa.Schema, list[Operator]]:
    """Sources and the ingress operators for the head of the chain (a source or a union)."""
    if head.kind == "source":
        assert head.source is not None
        return [head.source], _source_schema(head.source), []
    sources = []
    schemas = []
    for parent in head.parents:
        if parent.kind != "source":
            raise PlanError(
                f"union {head.name!r}: only sources can be unioned (got {parent.kind} "
                f"{parent.name!r}); apply stateless steps after the union"
            )
        assert parent.source is not None
        sources.append(parent.source)
        schemas.append(_source_schema(parent.source))
    from sparkflux.operators.union import padded_union_schema

    return sources, stage_schema(list(padded_union_schema(schemas))), []


def _source_schema(source) -> pa.Schema:  # noqa: ANN001
    for f in source.schema:
        check_user_name(f.name)
    if source.event_time is not None:
        require_columns("source event_time", source.schema, [source.event_time])
    return stage_schema(list(source.schema))


def _user_schema(head: Node) -> pa.Schema:
    from sparkflux.operators.union import padded_union_schema

    return padded_union_schema([p.source.schema for p in head.parents])  # type: ignore[union-attr]
