"""What a running query reports about itself: ``QueryProgress`` per interval (Spark's
``StreamingQueryProgress``: ``query.last_progress``, ``query.recent_progress``) and
``QueryStatus`` (``query.status``), as typed records.

An interval's progress is the analogue of one of Spark's micro-batches, though sparkflux has
no batches: its ``id`` counts intervals of ``--progress-interval`` seconds from the start of
the input. Each says what came in per source (rows, rate, how far the source has read, its
event-time watermark), what was fully processed (the input rows whose output is complete:
the egress's progress), what went out, the latency of the rows delivered in the interval,
per stage the event-time watermark of its input, per operator the state it holds (keys and
bytes, each mini-partition counted once however many copies it has), every site with its
role and the copies it holds, and what happened: failures, take-overs, adoptions,
catch-ups, moves and stalls. ``to_dict()`` gives the JSON form the dashboard serves and the
metrics file keeps.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

EventKind = Literal["failure", "take-over", "adoption", "catch-up", "caught-up", "move",
                    "moved", "stall", "input-ended", "checkpoint", "restored", "rescale",
                    "retired", "tentative", "corrected"]
SiteRole = Literal["live", "catching up", "failed", "standby", "starting"]


@dataclass(frozen=True, slots=True)
class SourceProgress:
    """One source in an interval: rows admitted in it and in all, its rate, and its
    event-time watermark (None: no event time, or nothing read yet)."""

    name: str
    rows: int
    total_rows: int
    rows_per_s: float
    watermark: int | None
    ended: bool


@dataclass(frozen=True, slots=True)
class StageProgress:
    """One stage: its operators and the event-time watermark of its input, the lowest over
    the live sites' installed copies (None before any site reported one, or no event time)."""

    stage: int
    operators: str
    watermark: int | None
    ended: bool


@dataclass(frozen=True, slots=True)
class OperatorState:
    """The state one operator holds, over its mini-partitions (each counted once)."""

    stage: int
    operator: str
    keys: int
    bytes: int
    partitions: int


@dataclass(frozen=True, slots=True)
class SiteState:
    """One site slot (or a standby process, ``site`` -1): its role, the copies of
    mini-partitions it holds (``copies``; the first copies among them, ``primaries``;
    being caught up or built by a move, ``building``), its busy share of the interval, the
    rows it holds in buffers, and its memory at its last heartbeat with state (None: not
    known): the bytes it holds (state in memory, buffered rows), its budget (None: none),
    the bytes of its partitions on disk (``docs/memory.md``)."""

    site: int
    role: SiteRole
    pid: int | None
    copies: int
    primaries: int
    building: int
    busy: float | None
    buffered_rows: int
    memory_bytes: int | None = None
    budget_bytes: int | None = None
    spilled_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class RunEvent:
    """Something that happened, ``at_s`` seconds after the input started."""

    at_s: float
    kind: EventKind
    site: int | None
    detail: str


@dataclass(frozen=True, slots=True)
class QueryProgress:
    """One interval of a running query (see the module)."""

    id: int
    timestamp: float  # the interval's end, seconds since the epoch
    elapsed_s: float  # since the input started
    duration_s: float  # the interval's length
    phase: str
    input_state: str
    input_rows: int
    input_rows_per_s: float
    processed_rows_per_s: float
    output_rows: int
    output_rows_per_s: float
    total_input_rows: int
    total_output_rows: int
    dead_letters: int
    latency_p50_s: float | None
    latency_p99_s: float | None
    # --consistency eventual: the input's consistency state at the interval's end (None:
    # strict), the tentative rows delivered (in the interval, per second, in all) and the
    # corrections delivered in all
    consistency: str | None = None
    tentative_rows: int = 0
    tentative_rows_per_s: float = 0.0
    total_tentative_rows: int = 0
    corrections: int = 0
    sources: list[SourceProgress] = field(default_factory=list)
    stages: list[StageProgress] = field(default_factory=list)
    state: list[OperatorState] = field(default_factory=list)
    sites: list[SiteState] = field(default_factory=list)
    events: list[RunEvent] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class QueryStatus(Mapping[str, Any]):
    """What the query is doing now (``query.status``): ``message`` is ``"failed"``,
    ``"finished"`` or the phase (``"running"``, ``"recovering site 1"``, ...); ``input`` the
    input's state (admitting, blocked and by what, idle, ended); ``error`` why it failed.
    PySpark's ``StreamingQuery.status`` is a dict: this reads as one too (``status["message"]``,
    ``set(status)``, ``dict(status)``)."""

    message: str
    is_active: bool
    input: str
    input_records: int
    output_records: int
    dead_letters: int
    dropped: int
    sites: int
    failures: int
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __getitem__(self, name: str) -> Any:
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.__dataclass_fields__)

    def __len__(self) -> int:
        return len(self.__dataclass_fields__)
