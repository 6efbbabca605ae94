"""The control plane's messages between the driver and the sites, as typed frozen records.

The controller's orders (``fail``, ``avail``, ``move`` of the thesis, and the run's set-up and
shutdown) and the sites' reports (registration, readiness, heartbeats, move confirmations,
errors, unreachable peers). They are plain values only (ints, floats, strings, numpy arrays,
dicts and lists of those), so the wire can encode them with a schema and decode them without
running code (``runtime/codec.py``). The catch-up messages of ``messages.py`` travel the same
way.

Which connection carries what (docs/design.md §1): the site's control
connection carries ``OpenControl`` first, then the controller's ``Fail``, ``Avail``, ``Move``,
``Slow``, ``Kill``, ``Stop`` and ``cu-start`` out and ``Heartbeat``, ``Moved``, ``SiteError``
and ``Unreachable`` back; the data connection carries ``Register`` first, then ``View``,
``Standby``, ``Adopt`` (frames that must precede any input), ``Ready`` and ``Stop``. A site task
that fails before it registers opens a third kind, a report connection, for its one
``StartFailed`` (``runtime/start_report.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt


def _no_table() -> npt.NDArray[np.int32]:
    return np.zeros((0, 0), dtype=np.int32)


def _empty() -> npt.NDArray[np.int64]:
    return np.zeros(0, dtype=np.int64)


# -- site -> driver ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class OpenControl:
    """First frame of a site's control connection: the token that pairs it with the data
    connection the same process registers on."""

    token: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Register:
    """First frame of a site's data connection: who it is, where peers reach it, and its
    failure domain: the executor JVM it runs under and the machine (``executor``,
    ``machine``: "" unknown; ``runtime/failure_domain.py``)."""

    site: int
    attempt: int
    host: str
    port: int
    pid: int
    token: str
    executor: str = ""
    machine: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Ready:
    """The site is connected to every live member (view 1, or after its adoption)."""

    site: int
    attempt: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Heartbeat:
    """Liveness, ten a second, with the load policy's counters (thesis ch. 4) sampled on the
    site's own clock, and the connections its server refused so far.

    Where the site's progress stands, for the driver's watchdog (``control/watchdog.py``):
    per stage, the lowest input frontier over the site's installed consumer replicas and the
    partition holding it (``in_sn``, ``in_part``), and the lowest output progress over its
    producer replicas and the partition holding it (``out_sn``, ``out_part``); a stage it
    hosts none of has ``END_OF_STREAM`` and partition -1. And the rows it holds: in FH-Prod
    buffers (``buffered``), in its skew buffer for connections that cannot take them
    (``held``), and received but waiting for the merge (``pending``)."""

    site: int
    attempt: int
    pid: int
    busy_s: float
    slept_s: float
    passes: int
    cpu_s: float
    buffered: int
    capacity_s: float
    at: float
    counts: npt.NDArray[np.int64] = field(default_factory=_empty)
    refused: int = 0
    in_sn: npt.NDArray[np.int64] = field(default_factory=_empty)
    in_part: npt.NDArray[np.int64] = field(default_factory=_empty)
    out_sn: npt.NDArray[np.int64] = field(default_factory=_empty)
    out_part: npt.NDArray[np.int64] = field(default_factory=_empty)
    held: int = 0
    pending: int = 0
    sent_bytes: int = 0  # bytes the process has written to all its connections so far
    # The measured one-way latency of each of its links in ms (index 0 the driver, i + 1
    # slot i; -1 unmeasured): latency probes (``protocol/site_boundary.py``, rule 6).
    link_ms: tuple[float, ...] = ()
    # --stream-replicas: the input streams its consumer copies garbage-collected and revived
    # so far (``ConsumerSet.collected``, ``revived``)
    collected: int = 0
    revived: int = 0
    # For the run's progress (``runtime/progress_log.py``), every ``STATE_EVERY``
    # heartbeats (``has_state``; empty between): the event-time watermark of every installed
    # consumer replica (its stage, partition and watermark), and the state of every hosted
    # (operator, partition): the operator's index over the plan, the partition, keys, bytes.
    has_state: bool = False
    wm_stage: npt.NDArray[np.int64] = field(default_factory=_empty)
    wm_part: npt.NDArray[np.int64] = field(default_factory=_empty)
    wm: npt.NDArray[np.int64] = field(default_factory=_empty)
    state_op: npt.NDArray[np.int64] = field(default_factory=_empty)
    state_part: npt.NDArray[np.int64] = field(default_factory=_empty)
    state_keys: npt.NDArray[np.int64] = field(default_factory=_empty)
    state_bytes: npt.NDArray[np.int64] = field(default_factory=_empty)
    # Memory (``protocol/memory.py``), with the state: the bytes the site holds (in-memory
    # partitions' state, buffered rows, what its spill writer still holds), its budget (-1:
    # none), the bytes of its partitions on disk, and its spills and loads so far.
    memory: int = 0
    budget: int = -1
    spilled: int = 0
    spills: int = 0
    loads: int = 0
    input_spills: int = 0  # batches of input written beside spilled partitions
    disk_part: npt.NDArray[np.int64] = field(default_factory=_empty)  # partitions on disk
    disk_bytes: npt.NDArray[np.int64] = field(default_factory=_empty)  # their state's bytes
    # the longest the site's loop spent at once on a spill or a load (its other partitions
    # waited that long), over this process's life
    memory_pause_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Moved:
    """The site has applied move ``epoch``."""

    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Folded:
    """The site has the ``psync`` of copy r of producer partition p (incarnation ``epoch``)
    for its consumers of ``stage``: it counts that copy as complete from now on. A move
    retires its old copy only once every party has folded the new one in (make before
    break: until then a take-over may still need the old one)."""

    stage: int
    p: int
    r: int
    epoch: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PartStored:
    """The site wrote partition q of ``stage`` for checkpoint ``checkpoint`` to the run's
    snapshot store as ``name`` (``nbytes`` bytes), or failed to: ``error`` says why. The
    driver writes the checkpoint's manifest once every part is stored (docs/design.md §9)."""

    site: int
    checkpoint: int
    stage: int
    q: int
    name: str
    nbytes: int
    error: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class SiteError:
    """The site stopped on an error (fail-stop); ``error`` is its traceback."""

    site: int
    attempt: int
    error: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StartFailed:
    """A site task failed before it registered (the only frame of a report connection):
    the exception's type and message, where it was raised (``file``, ``line``, ``function``
    and the ``source`` line: the innermost frame of the dataflow's own code if the traceback
    has one, else the innermost frame) and the whole ``traceback``."""

    site: int
    attempt: int
    error_type: str
    message: str
    file: str
    line: int
    function: str
    source: str
    traceback: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Unreachable:
    """Site ``site`` cannot reach the process in slot ``peer`` (registered for slot
    ``peer_registered``, Spark attempt ``peer_attempt``: a spare that adopted a slot has the
    attempt of the process it replaced, so both name the process): a dial that failed, a
    silent link, a link that closed. A suspected failure for the controller to judge, never
    a reason for the reporting site to stop."""

    site: int
    peer: int
    peer_attempt: int
    reason: str
    peer_registered: int = -1  # -1: not said (then the attempt alone names the process)


# -- driver -> site ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class Member:
    """A view member: where its data server listens, and which process holds the slot."""

    host: str
    port: int
    attempt: int
    registered: int  # the slot the process registered for (a spare's is beyond the sites)


@dataclass(frozen=True, slots=True, kw_only=True)
class View:
    """View 1: every member and its address; the site connects to the others. ``ring``: the
    chained-declustering ring the controller chose over the members' failure domains (replica
    r of partition q on ``ring[(q + r) mod N]``; empty: the identity), which the site loads
    into its table before it builds its core, so it agrees with every other party before any
    data flows."""

    number: int
    members: dict[int, Member]
    ring: tuple[int, ...] = ()
    # --placement latency: the whole placement table ([P, columns]), loaded over the ring's;
    # empty (0 x 0): chained declustering over the ring. Left out of ``==`` (an array's
    # truth is ambiguous); the ring and the members say which view it is
    table: npt.NDArray[np.int32] = field(default_factory=_no_table, compare=False)


@dataclass(frozen=True, slots=True, kw_only=True)
class Standby:
    """The site registered after view 1: it waits, stateless, to adopt a failed slot."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Adopt:
    """The standby becomes slot ``slot`` with empty replicas, filled by catch-up: the
    members, where each is reached, which slots are dead, every replica's epoch (the paper's
    version numbers) and the placement table as moves have left it."""

    slot: int
    members: dict[int, Member]
    dead: tuple[int, ...]
    epochs: npt.NDArray[np.int64]  # [Q, columns]
    table: npt.NDArray[np.int32]  # [Q, columns]: the site of every copy


@dataclass(frozen=True, slots=True, kw_only=True)
class Avail:
    """``avail``: a new process (incarnation ``epoch``, Spark attempt ``attempt``) holds slot
    ``slot``; connect to it."""

    slot: int
    epoch: int
    host: str
    port: int
    attempt: int
    registered: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Fail:
    """``fail``: the view's dead slots (take-over for every replica they held)."""

    dead: tuple[int, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """Unified Flux's move: replica ``r`` of partition ``q`` goes to site ``dst``; its
    catch-up will copy replica ``survivor`` (-1: the next replica after r), to which every
    producer sends its ``retaining`` at once."""

    q: int
    r: int
    dst: int
    epoch: int
    survivor: int = -1


@dataclass(frozen=True, slots=True, kw_only=True)
class Slow:
    """``--slow``: from now on the site gets ``factor`` times its capacity."""

    factor: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Squeeze:
    """``--squeeze``: from now on the site's memory budget is ``budget`` bytes
    (``protocol/memory.py``; -1: none)."""

    budget: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Kill:
    """``--kill`` on a cluster: the site crashes itself (SIGKILL)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Stop:
    """The run is over for this process; ``excluded``: it was thrown out of the view (not an
    error of the task: Spark must not retry it)."""

    reason: str
    excluded: bool = False


ControlMessage = (OpenControl | Register | Ready | Heartbeat | Moved | SiteError | Unreachable
                  | View | Standby | Adopt | Avail | Fail | Move | Slow | Kill | Stop
                  | StartFailed | Folded | PartStored | Squeeze)

CONTROL_TYPES = (OpenControl, Register, Ready, Heartbeat, Moved, SiteError, Unreachable, View,
                 Standby, Adopt, Avail, Fail, Move, Slow, Kill, Stop, StartFailed, Folded,
                 PartStored, Squeeze)
# Control frames a site handles before it has its core (see ``runtime.site.Site``).
UNGATED = (Stop, Kill, Slow, Standby, Squeeze)
