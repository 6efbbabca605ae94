"""The user-facing dataflow API: sources, ``exchange``, ``apply``, ``union``, ``sink``.

Defining a dataflow only builds an immutable description (bytewax style); nothing runs until
``sparkflux run`` (or ``sparkflux.runtime.driver.run``) compiles it into stages of
mini-partitions and launches the sites. Duplicate step names are rejected when the graph is
built.

    df = Dataflow("netmon")
    packets = df.source(NetmonSource(opts), name="packets")
    sessions = packets.exchange(by=["src", "dst"]).apply(SessionReconstruction(...))
    sessions.exchange(by=["app", "src"]).apply(CountWindowAggregate(...)).sink()
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkflux.model.errors import PlanError
from sparkflux.operators.base import Operator

if TYPE_CHECKING:
    from sparkflux.dataflow.plan import PhysicalPlan


class Source(ABC):
    """A stream of input records.

    ``schema`` declares the user columns of a valid record (ingress rejects anything else to
    the dead-letter output). ``event_time`` names an integer column, the record's event time,
    or None. ``lateness`` is how far behind the largest event time so far a record may still
    come (Spark's ``withWatermark``): the source's watermark trails that maximum by it; records
    within it are put in event-time order, a record behind it goes to the dead letters as
    late. ``batches()`` yields Arrow record batches (the fast path) or lists of plain dict
    records (validated one by one where needed).

    An unbounded source that has nothing to hand over yet (no new file, a fetch still running)
    yields ``None``: "nothing yet, ask again". The driver's feed then waits idly (its asyncio
    loop keeps serving the sites; the watchdog counts the source as idle, not stalled) and
    asks again a little later, with or without ``--rate``. A source must never block in
    ``next()`` while it waits: the driver reads every source on its one event loop. The
    iterator ending (``StopIteration``) ends the source's input.

    ``close()`` asks the source to end: its iterator should stop at the next batch boundary
    (the run then ends as when its input is exhausted). It may be called from another thread
    (a query being stopped) and after the input has ended; the default does nothing, which
    suits a bounded source.

    ``task_slots`` is how many Spark task slots the source's own Spark jobs need while the
    dataflow runs (``DataFrameSource``: one, for the job that fetches a partition). The sites'
    tasks hold their slots for the whole run, so these come on top: a session without them
    is refused at the start, and a session sparkflux makes has them.
    """

    schema: pa.Schema
    event_time: str | None = None
    lateness: int = 0
    task_slots: int = 0

    @abstractmethod
    def batches(self) -> Iterator[pa.RecordBatch | list[dict[str, Any]] | None]: ...

    def total(self) -> int | None:
        """The number of records when bounded and known (for progress display)."""
        return None

    def batches_from(self, records: int
                     ) -> Iterator[pa.RecordBatch | list[dict[str, Any]] | None]:
        """The batches after the first ``records`` records: where a restart from a
        checkpoint resumes the source (docs/checkpoints.md). By default ``batches()`` with
        the first ``records`` records read and dropped, which is right for any source that
        gives the same records in the same order again (files, a replayable log, a
        generator with a seed); a source that can seek overrides it to start there, and one
        that cannot replay (a socket) cannot resume."""
        skip = records
        for item in self.batches():
            if skip and item is not None:
                n = item.num_rows if isinstance(item, pa.RecordBatch) else len(item)
                if n <= skip:
                    skip -= n
                    continue
                item = item.slice(skip) if isinstance(item, pa.RecordBatch) else item[skip:]
                skip = 0
            yield item

    def close(self) -> None:  # noqa: B027 (optional hook)
        """End the input at the next batch boundary (optional; see the class docstring)."""

    def place_reading(self, plan: PhysicalPlan) -> PhysicalPlan:
        """The compiled ``plan`` with this source's reading placed: unchanged for a source the
        driver reads (the default); a source that can be read on the sites
        (``read_on="sites"``) rewrites it so that a first stage on the sites reads it."""
        return plan

    def waiting_for(self) -> str | None:
        """While the source says "nothing yet" because of work of its own (a Spark job), not
        for input yet to come: what it waits for. The driver reports it once the wait
        outlasts ``--stall-timeout`` (an idle source is otherwise no stall)."""
        return None


class Sink(ABC):
    """Receives the egress output: exactly once, in SN order.

    With ``--consistency eventual``, a sink whose ``tentative`` is true gets every delivery
    through ``write_ops`` instead of ``write``: stable rows, tentative rows and the
    episodes' ``undo`` and ``rec_done``, each batch with a column ``_op``
    (``io/tentative_output.py``). Every other sink gets the stable rows alone."""

    tentative: bool = False

    def open(self, schema: pa.Schema) -> None:  # noqa: B027 (optional hook)
        """Called once before the first batch."""

    @abstractmethod
    def write(self, batch: pa.RecordBatch) -> None: ...

    def write_ops(self, batch: pa.RecordBatch) -> None:  # noqa: B027 (optional hook)
        """A sink with ``tentative``: a delivery of any kind, its rows marked in ``_op``."""

    def poll(self) -> None:  # noqa: B027 (optional hook)
        """Called about every ``POLL_S`` seconds between writes, whether or not rows arrive:
        a sink that holds rows back (to write them in files of some size) publishes what
        has waited long enough here, so sparse output is not held until more comes."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Called once after the last batch."""

    def commit(self, cut: int) -> dict[str, Any]:
        """A checkpoint (docs/checkpoints.md): every output row descending from input at or
        below SN ``cut`` has been written; make them durable now (publish what is held) and
        return what a restart from this checkpoint needs to go on after them (JSON values,
        kept in the checkpoint's manifest). By default nothing is held and nothing needed."""
        return {}

    def resume(self, record: dict[str, Any], cut: int) -> None:  # noqa: B027 (optional hook)
        """A restart from a checkpoint, before ``open``: ``record`` is what ``commit``
        returned for it. The rows that follow are those after the cut, the same rows with
        the same sequence numbers as the run that wrote the checkpoint produced after it: a
        sink that wrote some of them before that run died replaces them, so none is
        written twice."""


POLL_S = 0.1  # how often the driver polls its sinks (``Sink.poll``)


@dataclass(frozen=True)
class Node:
    """One step of the logical dataflow."""

    name: str
    kind: str  # "source" | "exchange" | "apply" | "union" | "join" | "sink"
    parents: tuple[Node, ...] = ()
    source: Source | None = None
    lateness: int | None = None  # the source's allowed lateness, when given to source()
    by: tuple[str, ...] = ()
    operator: Operator | None = None
    sink: Sink | None = None


@dataclass(frozen=True)
class Stream:
    """A handle on one step's output; each method returns a new stream."""

    dataflow: Dataflow
    node: Node

    def exchange(self, by: list[str] | tuple[str, ...], name: str | None = None) -> Stream:
        """Repartition on the ``by`` columns: hash(by) -> mini-partition -> site.

        ``by=[]`` sends every row to one mini-partition (0), hence one site: what an operator
        without a key needs for one result over the whole stream (``WindowTopK(by=[])``: the
        top of every window). That stage then runs on one site, as a global aggregate must;
        exchange on a column the rows of a group share where there is one."""
        if isinstance(by, str) or not isinstance(by, (list, tuple)) or not all(
                isinstance(c, str) and c for c in by):
            raise PlanError(f"exchange(by=...) takes a list of column names, e.g. "
                            f"by=[\"page\"] (or by=[] for one partition); got {by!r}")
        return self.dataflow._add(Node(self.dataflow._name(name, "exchange"), "exchange",
                                       (self.node,), by=tuple(by)))

    def apply(self, operator: Operator, name: str | None = None) -> Stream:
        """Run ``operator`` on this stream, partition by partition."""
        if not isinstance(operator, Operator):
            raise PlanError(f"apply() takes an Operator, got {type(operator).__name__}")
        return self.dataflow._add(
            Node(self.dataflow._name(name, operator.name.lower()), "apply", (self.node,),
                 operator=operator)
        )

    def union(self, *others: Stream, name: str | None = None) -> Stream:
        """Merge this source with other sources into one stream.

        The sources' records are merged in event-time order (then by source, then by each
        source's own order: the same order in every run and on every replica, whatever order
        they arrive in). Their columns may differ: the union has every column of any of them,
        null where a source lacks it; a column they share needs one type (or one that widens
        to the other)."""
        for o in others:
            if o.dataflow is not self.dataflow:
                raise PlanError("union() of streams from different dataflows")
        parents = (self.node, *(o.node for o in others))
        return self.dataflow._add(Node(self.dataflow._name(name, "union"), "union", parents))

    def join(self, other: Stream, on: Sequence[str] | None = None, *,
             left_on: Sequence[str] | None = None, right_on: Sequence[str] | None = None,
             time: str | tuple[str, str], window: int, suffix: str = "_right",
             name: str | None = None) -> Stream:
        """Join this stream (left) with ``other`` (right): rows with equal keys (``on``, or
        ``left_on`` = ``right_on``) whose times (``time``: one column name for both, or
        ``(left, right)``) are within ``window`` of each other. Both inputs are repartitioned
        on their keys; ``window`` also bounds the state (a row is kept no longer than that
        behind the watermark). See ``operators/stream_join.py``."""
        from sparkflux.operators.stream_join import StreamJoin

        if other.dataflow is not self.dataflow:
            raise PlanError("join() of streams from different dataflows")
        if on is not None:
            left_on = right_on = on
        if left_on is None or right_on is None:
            raise PlanError("join() needs on=[...] or both left_on=[...] and right_on=[...]")
        times = (time, time) if isinstance(time, str) else tuple(time)
        # tuple(): a user's list of two names is taken too, which the checker sees as any length
        op = StreamJoin(list(left_on), list(right_on), times, window, suffix)  # type: ignore[arg-type]
        return self.dataflow._add(Node(self.dataflow._name(name, "join"), "join",
                                       (self.node, other.node), operator=op))

    def sink(self, sink: Sink | None = None, name: str | None = None) -> None:
        """Deliver this stream to ``sink`` (or to the run's ``--output``)."""
        self.dataflow._add(Node(self.dataflow._name(name, "sink"), "sink", (self.node,),
                                sink=sink))


@dataclass
class Dataflow:
    """A named logical dataflow: a DAG of steps (a stream may feed several steps) ending in
    one or more sinks."""

    name: str
    nodes: list[Node] = field(default_factory=list)

    def source(self, source: Source, name: str | None = None,
               lateness: int | None = None) -> Stream:
        """An input stream. ``lateness`` overrides the source's allowed lateness (in the
        units of its event-time column)."""
        if not isinstance(source, Source):
            raise PlanError(f"source() takes a Source, got {type(source).__name__}")
        late = source.lateness if lateness is None else lateness
        if isinstance(late, bool) or not isinstance(late, int) or late < 0:
            raise PlanError(f"source {name or type(source).__name__!r}: lateness must be an "
                            f"integer >= 0 in the units of its event time (got {late!r})")
        if late and source.event_time is None:
            raise PlanError(f"source {name or type(source).__name__!r}: lateness needs an "
                            f"event_time column to order the records by")
        return self._add(Node(self._name(name, "source"), "source", source=source,
                              lateness=late))

    def _name(self, name: str | None, default: str) -> str:
        if name is not None:
            return name
        taken = {n.name for n in self.nodes}
        i = 0
        while f"{default}{i}" in taken:
            i += 1
        return f"{default}{i}"

    def _add(self, node: Node) -> Stream:
        if any(n.name == node.name for n in self.nodes):
            raise PlanError(f"dataflow {self.name!r}: duplicate step name {node.name!r}")
        self.nodes.append(node)
        return Stream(self, node)

    @property
    def sinks(self) -> list[Node]:
        return [n for n in self.nodes if n.kind == "sink"]
