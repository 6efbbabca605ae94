"""Compile a logical ``Dataflow`` (a DAG) into a ``PhysicalPlan``, or fail with a clear message.

Depth. Sources are at depth 0; ``exchange`` is one deeper than its input; a ``join`` is one
deeper than the deeper of its inputs (it repartitions both); every other step is at its
input's depth; a sink at its input's. Physical stage ``s`` runs the steps at depth ``s + 1``
(the ingress those at depth 0): one exchange feeds each stage, as the protocol needs.

Ports. Every edge into an exchange, a join or a sink becomes a port of each exchange it
crosses (``ports.py``): of the one right after its producer's depth up to the one into its
consumer's stage (the egress for a sink). Where it crosses more than one, the stages in
between relay it unchanged (a join input from a shallower depth is repartitioned on its key
at once; rows towards a sink keep their partition).

Rules (what a plan must look like to run):
- at least one sink; steps that reach no sink are left out;
- ``union`` merges sources before any exchange; the ingress sequencer puts their records in
  one event-time order (each source needs an ``event_time`` then) and the ingress numbers
  them with one sequence of ISNs; their columns may differ (null-padded);
- a stateful operator needs an exchange (or a join) before it, which fixes its partitioning;
- every exchange key and every operator column must exist at that point;
- P mini-partitions >= N sites, so that every site holds at least one partition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa

from sparkflux.dataflow.api import Dataflow, Node, Source
from sparkflux.dataflow.plan import PhysicalPlan, SinkSpec, StagePlan, StreamSpec
from sparkflux.dataflow.ports import Port, port_schema
from sparkflux.dataflow.program import StageProgram, Step
from sparkflux.model.errors import PlanError
from sparkflux.model.schema import PART, check_user_name, with_system
from sparkflux.operators.base import check_contract, require_columns
from sparkflux.operators.stream_join import StreamJoin


def stage_schema(fields: list[pa.Field] | pa.Schema) -> pa.Schema:
    """User fields followed by the system columns and ``_part``."""
    base = with_system(list(fields))
    return base.append(pa.field(PART, pa.int32(), nullable=False))


@dataclass
class _Edge:
    """A stream from ``src`` into ``dst`` (side ``side`` of a join), and the exchanges it
    crosses (``first`` .. ``last``), with its port number at each."""

    src: Node
    dst: Node
    side: int
    key: tuple[str, ...] | None
    first: int
    last: int
    ports: dict[int, int] = field(default_factory=dict)


def compile_plan(df: Dataflow, partitions: int, sites: int) -> PhysicalPlan:
    if sites < 1:
        raise PlanError(f"--sites must be at least 1 (got {sites})")
    if partitions < sites:
        raise PlanError(
            f"--partitions ({partitions}) must be at least --sites ({sites}) so that every "
            f"site holds a mini-partition; raise --partitions (e.g. {sites * 8})"
        )
    sinks = df.sinks
    if not sinks:
        raise PlanError(f"dataflow {df.name!r} has no sink(): give its result a sink")
    nodes = _reaching(df, sinks)
    _check_union(nodes)
    depth = _depths(nodes)
    stages = max((depth[n.name] for n in nodes if n.kind in ("exchange", "join")), default=0)
    if stages == 0:
        raise PlanError(
            f"dataflow {df.name!r} has no exchange(by=[...]): nothing to partition over sites"
        )
    schema = _schemas(nodes, depth)
    sources = [n for n in nodes if n.kind == "source"]

    edges = _edges(nodes, depth, stages)
    ports: list[list[Port]] = [[] for _ in range(stages + 1)]  # per exchange
    sink_of = {s.name: k for k, s in enumerate(n for n in nodes if n.kind == "sink")}
    for e in edges:
        for x in range(e.first, e.last + 1):
            e.ports[x] = len(ports[x])
            final = x == e.last
            target = (f"sink:{sink_of[e.dst.name]}" if final and e.dst.kind == "sink"
                      else e.dst.name if final else f"relay:{x + 1}")
            ports[x].append(Port(e.ports[x], _user(schema[e.src.name]),
                                 None if x == stages else e.key, target, e.side,
                                 f"{e.src.name} -> {e.dst.name}"))
    for x in range(stages + 1):  # the relays' targets: their port at the next exchange
        for e in edges:
            if e.first <= x < e.last:
                p = ports[x][e.ports[x]]
                ports[x][e.ports[x]] = Port(p.index, p.schema, p.key,
                                            f"relay:{e.ports[x + 1]}", p.side, p.label)

    source_ports = tuple(Port(i, _user(schema[s.name]), None, s.name, 0, s.name)
                         for i, s in enumerate(sources))
    ingress = _program(0, source_ports, tuple(ports[0]), nodes, depth, edges, schema,
                       partitions, to_egress=stages == 0)
    plans = []
    for s in range(stages):
        prog = _program(s + 1, tuple(ports[s]), tuple(ports[s + 1]), nodes, depth, edges,
                        schema, partitions, to_egress=s == stages - 1)
        name = "+".join(st.name for st in prog.steps if st.kind != "head") or f"stage{s}"
        plans.append(StagePlan(s, name, ports[s][0].key or (), prog.operators, prog.in_schema,
                               prog.out_schema, prog))
    sink_nodes = [n for n in nodes if n.kind == "sink"]
    sink_specs = tuple(
        SinkSpec(n.name, n.sink, schema[n.name],
                 next(e.ports[stages] for e in edges if e.dst is n))
        for n in sink_nodes)
    streams = tuple(StreamSpec(n.name, _source(n).event_time,
                               n.lateness if n.lateness is not None
                               else _source(n).lateness)
                    for n in sources)
    plan = PhysicalPlan(
        name=df.name,
        sources=tuple(_source(n) for n in sources),
        streams=streams,
        source_schemas=tuple(valid_record(_source(n)) for n in sources),
        ingress=ingress,
        stages=tuple(plans),
        sinks=sink_specs,
        partitions=partitions,
        sites=sites,
    )
    for source in plan.sources:  # a source read on the sites puts its reader stage first
        plan = source.place_reading(plan)
    return plan


def valid_record(source: Source) -> pa.Schema:
    """What the ingress accepts of ``source``: its schema, with its event-time column
    required (a record without an event time has no place in the merged order, and no
    watermark can bound it: it goes to the dead letters)."""
    schema = pa.schema(list(source.schema))
    if source.event_time is None:
        return schema
    i = schema.get_field_index(source.event_time)
    if i < 0:
        return schema  # the compiler names the missing column
    return schema.set(i, schema.field(i).with_nullable(False))


def _reaching(df: Dataflow, sinks: list[Node]) -> list[Node]:
    """The steps some sink depends on, in the order they were defined (a topological one)."""
    keep: set[str] = set()
    todo = list(sinks)
    while todo:
        n = todo.pop()
        if n.name not in keep:
            keep.add(n.name)
            todo.extend(n.parents)
    return [n for n in df.nodes if n.name in keep]


def _depths(nodes: list[Node]) -> dict[str, int]:
    depth: dict[str, int] = {}
    for n in nodes:
        if n.kind == "source":
            depth[n.name] = 0
        elif n.kind == "exchange":
            depth[n.name] = depth[n.parents[0].name] + 1
        elif n.kind == "join":
            depth[n.name] = max(depth[p.name] for p in n.parents) + 1
        elif n.kind == "union":
            depth[n.name] = 0
        else:  # apply, sink
            depth[n.name] = depth[n.parents[0].name]
        if n.kind == "apply" and depth[n.name] == 0 and n.operator is not None \
                and n.operator.stateful:
            raise PlanError(
                f"step {n.name!r} ({n.operator.name}) keeps state, so it needs an "
                f"exchange(by=[...]) before it that partitions its input"
            )
    return depth


def _check_union(nodes: list[Node]) -> None:
    for n in nodes:
        if n.kind != "union":
            continue
        for parent in n.parents:
            if parent.kind != "source":
                raise PlanError(
                    f"union {n.name!r}: only sources can be unioned (got {parent.kind} "
                    f"{parent.name!r}); sparkflux merges streams at the ingress, so put "
                    f"union() right after the sources")
        untimed = [p.name for p in n.parents if _source(p).event_time is None]
        if len(n.parents) > 1 and untimed:
            raise PlanError(
                f"union {n.name!r}: source {untimed[0]!r} has no event_time; sources are "
                f"merged in event-time order (the same order in every run), so give each an "
                f"event_time column")


def _source(n: Node) -> Source:
    """The source of a source node (``Dataflow.source`` gives every one its own)."""
    assert n.source is not None
    return n.source


def _join(n: Node) -> StreamJoin:
    """The operator of a join node (``Stream.join`` gives every one a ``StreamJoin``)."""
    assert isinstance(n.operator, StreamJoin)
    return n.operator


def _schemas(nodes: list[Node], depth: dict[str, int]) -> dict[str, pa.Schema]:
    """Each step's output rows (user columns, system columns, ``_part``); binds operators."""
    from sparkflux.operators.union import padded_union_schema

    out: dict[str, pa.Schema] = {}
    for n in nodes:
        if n.kind == "source":
            out[n.name] = _source_schema(_source(n))
        elif n.kind == "union":
            out[n.name] = stage_schema(list(padded_union_schema(
                [_source(p).schema for p in n.parents])))
        elif n.kind == "exchange":
            require_columns(f"exchange {n.name!r}", out[n.parents[0].name], list(n.by))
            out[n.name] = out[n.parents[0].name]
        elif n.kind == "apply":
            assert n.operator is not None
            check_contract(n.operator)
            out[n.name] = n.operator.bind(out[n.parents[0].name])
        elif n.kind == "join":
            left, right = (out[p.name] for p in n.parents)
            out[n.name] = _join(n).bind_sides(left, right)
        elif n.kind == "sink":
            out[n.name] = out[n.parents[0].name]
        else:  # pragma: no cover - Node kinds are closed
            raise PlanError(f"unknown step kind {n.kind!r}")
    return out


def _edges(nodes: list[Node], depth: dict[str, int], stages: int) -> list[_Edge]:
    """Every stream into an exchange, a join or a sink, with the exchanges it crosses."""
    edges = []
    for n in nodes:
        if n.kind not in ("exchange", "join", "sink"):
            continue
        for side, parent in enumerate(n.parents):
            first = depth[parent.name]
            if n.kind == "exchange":
                key: tuple[str, ...] | None = tuple(n.by)
            elif n.kind == "join":
                op = _join(n)
                key = tuple(op.left_on if side == 0 else op.right_on)
            else:
                key = None
            last = stages if n.kind == "sink" else depth[n.name] - 1
            edges.append(_Edge(parent, n, side, key, first, last))
    return edges


def _program(level: int, in_ports: tuple[Port, ...], out_ports: tuple[Port, ...],
             nodes: list[Node], depth: dict[str, int], edges: list[_Edge],
             schema: dict[str, pa.Schema], partitions: int, to_egress: bool) -> StageProgram:
    """The steps at depth ``level`` over ``in_ports`` (the sources at depth 0), and where
    each out-port's rows come from."""
    steps: list[Step] = []
    at: dict[str, int] = {}  # node name -> its step
    by_target: dict[str, list[Port]] = {}
    for p in in_ports:
        by_target.setdefault(p.target, []).append(p)
    for n in nodes:
        if depth[n.name] != level or n.kind == "sink":
            continue
        if n.kind in ("source", "exchange"):
            (p,) = by_target[n.name]
            steps.append(Step(n.name, "head", (p.index,), schema=schema[n.name]))
        elif n.kind == "join":
            sides = sorted(by_target[n.name], key=lambda p: p.side)
            steps.append(Step(n.name, "join", tuple(p.index for p in sides), n.operator,
                              schema[n.name]))
        elif n.kind == "union":
            srcs = tuple(by_target[p.name][0].index for p in n.parents)
            steps.append(Step(n.name, "union", srcs, schema=schema[n.name]))
        elif n.kind == "apply":
            steps.append(Step(n.name, "apply", (at[n.parents[0].name],), n.operator,
                              schema[n.name]))
        at[n.name] = len(steps) - 1
    outputs: list[tuple[str, int]] = []
    for port in out_ports:  # the steps at depth L send into exchange L
        e = next(e for e in edges if e.ports.get(level, -1) == port.index)
        if e.first == level:
            outputs.append(("step", at[e.src.name]))
        else:
            outputs.append(("relay", e.ports[level - 1]))
    return StageProgram(in_ports, out_ports, steps, outputs, partitions, to_egress)


def _user(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if not f.name.startswith("_")])


def _source_schema(source: Source) -> pa.Schema:
    for f in source.schema:
        check_user_name(f.name)
    if source.event_time is not None:
        require_columns("source event_time", source.schema, [source.event_time])
    return stage_schema(list(source.schema))


__all__ = ["compile_plan", "port_schema", "stage_schema"]
