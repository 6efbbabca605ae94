"""One simulated run of a dataflow with Flux-HA, and the correctness contract (docs/design.md §5).

``simulate(seed, ...)`` builds the real ``SiteCore``s, ``Ingress``, ``Egress`` and
``Controller`` for a plan and drives them with a seeded scheduler: the ingress admits input
batches, links deliver messages in FIFO order with random interleaving, and sites crash at
random points (losing a random suffix of their unsent output). The controller learns of a crash
(connection loss) after a random delay and installs a new view; each live site gets its ``fail``
on the driver's control channel (unordered with the ingress's data, as in the runtime: ``move``,
``avail``, ``collect`` and ``cu-start`` go there too, and ``moved`` and the statistics come back
on it), the ingress and egress at once. Between sites, a snapshot and its ``installed`` reply
travel on a channel of their own too (the runtime's StateMover connections). A run ends when the
input is exhausted and the network is quiet.

Sites may share failure domains (``FailurePlan.executors``, ``hosts``; a standby's too): they
register with them as on Spark, the controller lays chained declustering over them at view 1,
and each site builds its core from the view it gets (with the ring), as the runtime does. A
crash schedule that kills a whole executor lists all of its sites at one step.

``check(seed, ...)`` compares the run with the failure-free run of the same input: the egress
output must be identical row for row and in order, the egress must have seen the end of the
stream, and every surviving buffer must have drained. A failing seed raises ``Violation`` naming
the seed, so ``simulate(seed)`` reproduces it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.control.boundary import (
    AdoptProcess,
    BoundaryAction,
    Deliver,
    Input,
    InputEnd,
    RequestMoves,
    SendView,
    StartTimes,
    Tell,
    boundary_for,
    event_of,
)
from sparkflux.control.checkpoints import (
    CheckpointDone,
    CommitSinks,
    ManifestWritten,
    SinksCommitted,
    TakeCheckpoint,
    WriteManifest,
    checkpoint_dir,
    part_name,
)
from sparkflux.control.controller import ControlOptions
from sparkflux.control.events import (
    Abort,
    ConnectionClosed,
    FailSites,
    LaunchSites,
    Recovered,
    Registered,
    Rescale,
    SiteAddress,
    Tick,
)
from sparkflux.control.policy import PolicyConfig
from sparkflux.dataflow.placement import DRIVER, NOWHERE, Layout
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.dataflow.ports import sort_rows
from sparkflux.model.batch import concat
from sparkflux.model.digest import digest_of
from sparkflux.model.validate import validate
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.channels import Channel, ordered_with_data
from sparkflux.protocol.consistency import Eventual
from sparkflux.protocol.consumer import PartitionLost
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.messages import (
    SPILL,
    Echo,
    LoadPartition,
    Outgoing,
    Probe,
    SpillInput,
    State,
    StoredPartition,
)
from sparkflux.protocol.site import SiteCore
from sparkflux.protocol.site_boundary import (
    PROBES,
    Beat,
    Dial,
    Echoed,
    Frames,
    FromDriver,
    LinkCheck,
    Loaded,
    MemoryCheck,
    PeerLinked,
    PeerLost,
    Probed,
    Send,
    SiteBoundary,
    SiteBoundaryAction,
    Spilled,
    Stop,
    from_link,
)
from sparkflux.runtime.frames import FRAME_HEADER, MSG, decode, encode
from sparkflux.sim.network import CONTROL, DATA, Network

# every this many steps the copies' state sizes are compared (``same_state_at_same_frontier``)
STATE_CHECK_STEPS = 97
HEARTBEAT_STEPS = 25  # with the policy on, every live site sends its counters this often
PROBE_STEPS = 50  # every site probes its links' latency this often (``LinkCheck``)
# with --stream-replicas, the sites' clocks tick this often (revival on delay,
# ``ConsumerSet.on_tick``; ``PhysicalPlan.stream_stall`` then counts steps); the driver's
# egress ticks with the driver's clock (``SimClock``: only then are heartbeats judged)
STREAM_TICK = 10


class Violation(AssertionError):
    """The correctness contract failed for a seed."""


@dataclass(frozen=True)
class FailurePlan:
    """Which sites crash, and after how many scheduler steps; when standbys register."""

    crashes: tuple[tuple[int, int], ...] = ()  # (site slot, step): kills its current process
    standbys: tuple[int, ...] = ()  # steps at which a standby process registers
    # (site slot, delay): crash it ``delay`` steps after the first recovery completes
    after_recovery: tuple[tuple[int, int], ...] = ()
    # (step, partition, destination site): ask the controller to move the first copy of the
    # partition there (or replica 1, if replica 0 is already on that site)
    moves: tuple[tuple[int, int, int], ...] = ()
    # (site, after move number): crash the site once that many moves have completed
    after_moves: tuple[tuple[int, int], ...] = ()
    # (site, factor): the site's work costs this much more (load for the balancing policy)
    slow: tuple[tuple[int, float], ...] = ()
    # Failure domains: the executor (and host) of each site slot's first process, and of the
    # n-th standby ("" or missing: unknown, a domain of its own; hosts: one "sim" host).
    executors: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()
    standby_executors: tuple[str, ...] = ()
    # (executor, delay): ``delay`` steps after the first recovery and every move it caused
    # (a re-layout over failure domains) are complete, crash every site whose live process
    # is in that executor (the whole executor dies at once)
    after_settled: tuple[tuple[str, int], ...] = ()
    # (site, step, steps): the slot's process hangs (SIGSTOP): it reads, sends and beats
    # nothing for that long, then wakes up; excluded meanwhile, it wakes a zombie that still
    # has the frames it had not read, until it reads its ``stop``
    hangs: tuple[tuple[int, int, int], ...] = ()
    # (site, step, steps, driver): the links between the site and every peer (and the
    # driver's, with ``driver``) hold their frames that long (packets dropped; TCP resends
    # them after the heal, unless the receiver closed the link meanwhile)
    cuts: tuple[tuple[int, int, int, bool], ...] = ()
    # (group a, group b, the driver's group (0, 1) or None, step, steps): a network
    # partition (``--partition``): the links between the groups' sites (and between a group
    # and the driver, where it is in the other) hold their frames that long
    partitions: tuple[tuple[tuple[int, ...], tuple[int, ...], int | None, int, int], ...] = ()
    # (step, sites), in order: rescale the running query to that many sites
    # (``control/rescale.py``) at that step, or once the rescale before has ended; the site
    # tasks a grow asks for register as standbys ``launch_delay`` steps later (random in
    # the range)
    rescales: tuple[tuple[int, int], ...] = ()
    launch_delay: tuple[int, int] = (1, 60)
    # Memory (``protocol/memory.py``): every site's budget in bytes (None: none), checked
    # every ``memory_every`` steps; (site, step, bytes): that site's budget cut then
    # (``--squeeze``); a spill's write and a load's read take ``io_delay`` steps (random)
    budget: int | None = None
    squeezes: tuple[tuple[int, int, int], ...] = ()
    memory_every: int = 5
    io_delay: tuple[int, int] = (1, 30)
    # (source, step, steps): the source's records are held outside the dataflow that long
    # (``--cut-source``), then delivered late, in their order, before its later ones
    source_cuts: tuple[tuple[int, int, int], ...] = ()


@dataclass(frozen=True)
class SimClock:
    """Simulated time, in scheduler steps: every live site's heartbeat and link check, the
    driver's ticks, and the timeouts the controller and the sites judge them by (the
    runtime's ``--heartbeat-timeout``, ``--link-timeout`` and the link judge's settle
    time). Heartbeats travel on the control link like any frame, so a busy link can make
    one late: a false suspicion is a timing like any other."""

    heartbeat_every: int = 10
    heartbeat_timeout: int = 400
    link_every: int = 10
    link_timeout: int = 120
    tick_every: int = 5
    settle: int = 20
    standby_wait: int = 3000  # a failed slot waits this long for a standby (``--standby-wait``)


@dataclass
class SimResult:
    seed: int
    output: pa.Table
    ended: bool
    leftover: dict[str, int] = field(default_factory=dict)
    crashed: list[int] = field(default_factory=list)
    steps: int = 0
    messages: int = 0
    admitted: int = 0
    recovered: list[int] = field(default_factory=list)
    replicas_live: dict[tuple[int, int], int] = field(default_factory=dict)
    moves: list[tuple[int, int, int, int]] = field(default_factory=list)  # q, r, from, to
    outputs: list[pa.Table] = field(default_factory=list)  # every sink's (``output``: the first)
    # per crash during a move: (the crashed site's role in it, the move's phase then)
    crash_points: list[tuple[str, str]] = field(default_factory=list)
    short_s: list[float] = field(default_factory=list)  # per move: ``MoveRecord.short_s``
    driver_crashed: bool = False  # the run stopped at ``driver_crash``: every process died
    checkpoints: list[tuple[int, int]] = field(default_factory=list)  # (checkpoint, cut)
    # every rescale done (``RescaleRecord.as_dict``), and each live site's partitions at
    # the end (slot -> the partitions it holds a copy of)
    rescales: list[dict[str, Any]] = field(default_factory=list)
    hosted: dict[int, list[int]] = field(default_factory=dict)
    spills: int = 0  # partitions written to a spill store (``protocol/memory.py``)
    move_reasons: list[str] = field(default_factory=list)  # per move: why it was made
    input_spills: int = 0  # batches of a spilled partition's input written beside it
    # --consistency eventual: per delivery that was not stable rows, (step, op, rows): the
    # tentative rows (their ``_t0`` is their arrival step) and each ``undo`` / ``rec_done``
    tentative: list[tuple[int, str, pa.RecordBatch | None]] = field(default_factory=list)
    corrections: int = 0  # stable rows delivered as an episode's corrections
    hold: float = 0.0  # the longest a record waited in the sequencer before its stable release
    tentative_wait: float = 0.0  # the longest a record sent tentatively had waited for it
    # per tick, the held records past the availability bound (``InputEpisodes.overdue``)
    overdue: int = 0
    early: int = 0  # stable rows above an open episode's base delivered before its undo
    delivered_at: list[int] = field(default_factory=list)  # steps of stable rows delivered
    last_input: int = 0  # the step the last input batch was admitted
    # --ha race: rows the duplicate filters dropped (another copy brought them first), at
    # the egress and over the live sites' inputs
    raced: int = 0
    # rows the live sites' order-insensitive stages ran above their frontier (in arrival
    # order, ``ConsumerSet.release_arrived``): racing copies did not wait for the merge
    arrived_early: int = 0
    # --stream-replicas: stream replicas garbage-collected and revived so far, at the egress
    # and over the live sites' inputs (``ConsumerSet._collect``, ``_revive``)
    collected: int = 0
    revived: int = 0


def simulate(plan: PhysicalPlan, batches: list[pa.RecordBatch | tuple[int, pa.RecordBatch]],
             seed: int,
             failures: FailurePlan = FailurePlan(), replicas: int = 2,
             detect_delay: tuple[int, int] = (0, 40), max_steps: int = 2_000_000,
             window: int = 2, recovery: str = "standby", balance: bool = False,
             policy: PolicyConfig | None = None, fifo: bool = False,
             clock: SimClock | None = None, dial_delay: tuple[int, int] | None = None,
             checkpoint_every: int = 0, driver_crash: int | None = None,
             restore: tuple[dict[str, Any], list[Any]] | None = None,
             store: dict[str, Any] | None = None,
             eventual: Eventual | None = None, pace: int = 0,
             pass_rows: tuple[int, ...] = (), race: bool = False,
             wan: np.ndarray | None = None, placement: str = "chained",
             wan_changes: tuple[tuple[int, np.ndarray], ...] = (),
             unordered: bool = False) -> SimResult:
    """Run ``plan`` on ``batches`` under ``seed`` with the given crashes.

    ``batches``: the input in arrival order, each a batch of source 0 or ``(source, batch)``.

    The driver side is the runtime's own core (``control.boundary.Boundary``): this loop
    only delivers its actions over the simulated links and feeds it what arrives, as the
    runtime host does over sockets.

    ``fifo``: every link strictly FIFO, no frame overtaking another. Only to compare with
    the runtime's order (the default), e.g. to show that a mutant is caught only because
    acknowledgements and control frames may pass held data.

    ``wan``: wide-area links, a matrix of one-way latencies in steps (the driver first, then
    every site slot), each frame up to a quarter of its link's latency later at random
    (``sim/network.py``); ``placement``: ``"latency"`` places the copies by that matrix at
    view 1 (``dataflow/deployment.py``), as ``--placement latency`` does, and re-deploys
    them by the latencies the sites measure (``control/redeploy.py``; with ``balance``).
    ``wan_changes``: ``(step, matrix)``, the links' latencies from that step on (the
    runtime's ``--wan`` ``changes``). ``unordered``: the
    egress hands rows on as they pass its duplicate filter (``--unordered-output``); ``check``
    then compares the output in SN order.

    ``dial_delay``: a link that a site dials (to an adopted standby) comes up, at both ends,
    that many steps later (random in the range), as a connect and handshake take time; None:
    at once at the dialling end.

    ``clock``: heartbeats, link checks and their timeouts run in simulated time (always with
    ``hangs`` or ``cuts``); without it a site is found failed only by its lost connection.

    Checkpoints (docs/design.md §9): every ``checkpoint_every`` steps the driver takes one;
    the sites' parts and the driver's manifests go to ``store`` (a dict: the snapshot
    store), each part's report back to the driver on its control link like any frame. At
    step ``driver_crash`` the driver dies, and every site with it (fail-stop): the run stops
    there. ``restore``: a manifest and its held records from ``store`` to start from (the
    first view's sites install their parts; ``batches``: the input after the cut's source
    positions, as the sources resume).

    ``eventual``: ``--consistency eventual`` (its delay bound in steps); the output kept is
    the stable rows, the rest of the deliveries go to ``SimResult.tentative``.

    ``race``: racing replicas (``--ha race``): every copy of a producer partition sends to
    every copy of each consumer partition, each taking the first copy of a row to arrive.

    ``pace``: at most one input batch every that many steps (a paced source, as the
    runtime's ``--rate``), so that the input flows through a failure; 0: as fast as the
    window admits."""
    if clock is None and (failures.hangs or failures.cuts or failures.partitions
                          or failures.source_cuts or eventual is not None):
        clock = SimClock()
    rng = np.random.default_rng(seed)
    # ``pass_rows``: a pass's row budget (``SiteCore.pass_rows``), drawn for each pass from
    # these, with its own generator (the schedules of runs without it stay as they were);
    # a site that held ready rows back runs passes with nothing new, interleaved at random
    # with the deliveries, as the runtime's scheduler starts one at once
    prng = np.random.default_rng((seed, 7919))

    def backlogged() -> list[int]:
        out = []
        for k in sorted(sites):
            c = sites[k].core
            if k not in crashed_now and k not in hung and c is not None and c.backlog \
                    and not c.stopped:
                out.append(k)
        return out

    def one_pass(k: int, batch: list[tuple[int, Any]]) -> None:
        core_k = sites[k].core
        if pass_rows and core_k is not None:
            core_k.pass_rows = int(prng.choice(pass_rows))
        site_do(k, sites[k].handle(Frames(batch)))
    # admission holds the next batch back while more than ``window`` batches' records are
    # unacknowledged (``Boundary.held_back``, as the runtime's ``--window``); the default 2 of
    # the tiny workload's 10 batches keeps the input flowing through failures and recoveries,
    # about the share of a run's input that the runtime's default window holds
    unit = (len(_item(batches[0])[1]) if batches else 1) if plan.isn_span is None \
        else next((n for n in (_isns(plan, b) for b in batches) if n), 1)
    site_plan = plan.for_sites()
    if eventual is not None:  # every merge on the sites under the delay bound too
        site_plan = replace(site_plan, max_delay=eventual.max_delay)
    layout = Layout(plan.sites, plan.partitions, replicas, race=race)
    net = Network(rng) if fifo else Network(rng, overtakes=_overtakes)
    hung: dict[int, tuple[int, int]] = {}  # slot -> (hung since, wakes at)
    zombies: set[int] = set()  # excluded while hung: it still has its unread frames
    cut: dict[int, tuple[int, int, bool]] = {}  # slot -> (cut since, heals at, driver too)
    hang_at: dict[int, list[tuple[int, int]]] = {}
    for k, at, n in failures.hangs:
        hang_at.setdefault(at, []).append((k, n))
    cut_at: dict[int, list[tuple[int, int, bool]]] = {}
    for k, at, n, drv in failures.cuts:
        cut_at.setdefault(at, []).append((k, n, drv))

    split: list[tuple[set[int], set[int], int, int]] = []  # partitions now: a, b, since, heal
    split_at: dict[int, list[tuple[set[int], set[int], int]]] = {}
    for g0, g1, g_drv, g_at, g_n in failures.partitions:
        split_at.setdefault(g_at, []).append((set(g0) | ({DRIVER} if g_drv == 0 else set()),
                                              set(g1) | ({DRIVER} if g_drv == 1 else set()),
                                              g_n))

    def blocked_since(src: int, dst: int) -> int | None:
        """Since when nothing crosses from ``src`` to ``dst`` (a hung reader, a cut, a
        partition), or None."""
        since = [hung[dst][0]] if dst in hung else []
        for k, (at, _, drv) in cut.items():
            if k in (src, dst) and (drv or DRIVER not in (src, dst)) and src != dst:
                since.append(at)
        for side0, side1, at, _ in split:
            if (src in side0 and dst in side1) or (src in side1 and dst in side0):
                since.append(at)
        return min(since) if since else None

    net.blocked = lambda src, dst: blocked_since(src, dst) is not None
    # Every site process runs its own ``SiteBoundary`` over its own operator shells, as a
    # Spark task owns its unpickled copy of the plan; it builds its core from the view it
    # gets (``SendView``: the ring over the failure domains) or its adoption.
    sites: dict[int, SiteBoundary] = {}
    process: dict[int, tuple[int, int]] = {s: (s, 0) for s in range(plan.sites)}
    settled_crashes = list(failures.after_settled)
    executor_now = {s: failures.executors[s] if s < len(failures.executors) else ""
                    for s in range(plan.sites)}  # slot -> its live process's executor
    # latency probes only where something uses them (the other runs' schedules stay as they
    # were): the re-deployment by measured latencies. A probe's clock counts a step as a
    # millisecond, so that the sites measure in the matrix's own unit
    probe_every = PROBE_STEPS / 1000 if placement == "latency" and balance else None
    if wan is not None:
        # the matrix in force at each step: ``wan``, then each of ``wan_changes`` from its step
        models = [(0, np.asarray(wan, dtype=np.int64)),
                  *((at, np.asarray(m, dtype=np.int64)) for at, m in sorted(
                      wan_changes, key=lambda c: c[0]))]

        def link_steps(src: int, dst: int) -> int:
            steps = next(m for at, m in reversed(models) if at <= net.now)
            return int(steps[src + 1, dst + 1]) + int(
                rng.integers(steps[src + 1, dst + 1] // 4 + 1))

        net.latency = link_steps
    core = boundary_for(plan, replicas, ControlOptions(
        heartbeat_timeout=float(clock.heartbeat_timeout) if clock else 1e9,
        recovery=recovery, balance=balance, policy=policy,
        link_settle=float(clock.settle if clock else 0), placement=placement,
        redeploy_settle=float(PROBES * PROBE_STEPS),
        latencies=(tuple(tuple(float(x) for x in row) for row in wan)
                   if wan is not None else None)), end_with_output=False,
        eventual=eventual, race=race, unordered=unordered)
    store = store if store is not None else {}
    handed = [0] * len(plan.streams)  # records each source handed over (its position)
    if restore is not None:
        core.restore(*restore)
        handed = [int(n) for n in restore[0]["driver"]["sources"]]
    if clock:  # a fixed standby wait, as ``--standby-wait`` gives the runtime one
        core.handle(StartTimes(fixed=float(clock.standby_wait)))
    link_timeout = float(clock.link_timeout) if clock else 1e9
    controller = core.controller
    slow = dict(failures.slow)
    move_at: dict[int, list[tuple[int, int]]] = {}
    for at, q, dst in failures.moves:
        move_at.setdefault(at, []).append((q, dst))
    crash_after_moves = dict((n, site) for site, n in failures.after_moves)
    out: list[list[pa.RecordBatch]] = [[] for _ in plan.sinks]  # per sink
    crashed: list[int] = []
    crash_points: list[tuple[str, str]] = []
    pending_detect: list[tuple[int, int, int]] = []  # (step it is noticed, site, attempt)
    crash_at: dict[int, list[int]] = {}
    for site, at in failures.crashes:
        crash_at.setdefault(at, []).append(site)
    # the spill stores, (process, stage, q) -> what it wrote: the state, and the input that
    # came while it was on disk; writes and reads in flight, (due step, slot, its process
    # then, the event); spills so far
    disk: dict[tuple[tuple[int, int], int, int], StoredPartition] = {}
    disk_in: dict[tuple[tuple[int, int], int, int], list[pa.RecordBatch]] = {}
    io_due: list[tuple[int, int, tuple[int, int], Any]] = []
    io_lo, io_hi = failures.io_delay
    spills = [0, 0]  # state spills, input spills
    squeeze_at: dict[int, list[tuple[int, int]]] = {}
    for k, at, nbytes in failures.squeezes:
        squeeze_at.setdefault(at, []).append((k, nbytes))
    standby_at: dict[int, int] = {}  # step -> standbys that register then
    for at in failures.standbys:
        standby_at[at] = standby_at.get(at, 0) + 1
    rescale_at = list(failures.rescales)  # those still to ask for
    n_standby = 0
    attempt = dict.fromkeys(range(plan.sites), 0)
    recovered: list[int] = []
    next_batch = 0
    step = 0
    deferred: list[tuple[int, Any]] = []  # a cut source's records, held outside (in order)
    tentative: list[tuple[int, str, pa.RecordBatch | None]] = []
    corrections = [0]
    early = [0]  # stable rows above an open episode's base delivered before its undo
    delivered_at: list[int] = []
    last_admit = -pace
    overdue = 0  # held records past the availability bound, summed over the ticks

    def source_cut(stream: int) -> bool:
        return any(j == stream and at <= step < at + n for j, at, n in failures.source_cuts)
    crashed_now: set[int] = set()  # slots whose current process is dead
    dials: list[tuple[int, int, tuple[int, int], int, tuple[int, int]]] = []  # (due, ...)
    # with the clock, a crashed site's links reset at its peers: (due, peer, slot, process)
    resets: list[tuple[int, int, int, tuple[int, int]]] = []
    # Set-up (view 1) is not under test here: the sites link to each other at once and their
    # ``ready`` reaches the controller together, before any input.
    setup: list[Any] | None = []

    def gone(k: int) -> None:
        """Slot ``k``'s process is gone (crashed, or failed by the controller while alive:
        the runtime closes its connections). A hung one is excluded: the driver closes its
        connections and says ``stop``, which it reads when it wakes, a zombie until then."""
        if k in hung and k not in crashed_now:
            crashed.append(k)
            crashed_now.add(k)
            zombies.add(k)
            net.send(DRIVER, k, cm.Stop(reason="excluded", excluded=True), CONTROL)
            return
        if k in zombies:  # it woke and read its ``stop``
            zombies.discard(k)
            net.drop_to(k)
            return
        if k not in crashed_now:
            crashed.append(k)
            crashed_now.add(k)
            net.drop_to(k)

    def site_do(src: int, actions: list[SiteBoundaryAction]) -> None:
        """The runtime site host's part, over simulated links. A link's set-up is a
        ``hello`` on the data channel: the dialled side learns of it on delivery. A
        checkpoint's part goes to the store, its report to the driver."""
        for a in actions:
            match a:
                case Send(message=StoredPartition() as part) if part.checkpoint == SPILL:
                    key = (process[src], part.stage, part.q)
                    disk[key] = part  # the site's spill store (its local directory)
                    disk_in[key] = []  # a spill of the state starts its record afresh
                    io_due.append((step + int(rng.integers(io_lo, io_hi + 1)), src,
                                   process[src], Spilled(stage=part.stage, q=part.q)))
                    spills[0] += 1
                case Send(message=SpillInput(stage=st, q=q, rows=rows)):
                    disk_in.setdefault((process[src], st, q), []).append(rows)
                    spills[1] += 1
                case Send(message=LoadPartition(stage=st, q=q, seq=seq)):
                    part = disk.pop((process[src], st, q))
                    snap, rows = part.snapshot, disk_in.pop((process[src], st, q), [])
                    if rows:
                        snap = replace(snap, cons=replace(
                            snap.cons, pending=concat(rows, rows[0].schema)))
                    io_due.append((step + int(rng.integers(io_lo, io_hi + 1)), src,
                                   process[src], (st, q, snap, seq)))
                case Send(message=StoredPartition() as part, channel=Channel.STORE):
                    name = part_name(part.checkpoint, part.stage, part.q)
                    store[name] = part
                    net.send(src, DRIVER, cm.PartStored(
                        site=src, checkpoint=part.checkpoint, stage=part.stage, q=part.q,
                        name=name, nbytes=1), CONTROL)
                case Send(dest=dest) if src in zombies and (
                        dest == DRIVER or src in sites[dest].dead_sites):
                    pass  # a zombie's frame on a connection its peer has closed
                case Send(dest=dest, channel=Channel.LINK) if dest != DRIVER and (
                        setup is None and dest not in sites[src].linked):
                    pass  # no link to it (yet): the runtime's DTSB has no connection to hold for
                case Send(dest=dest, message=msg, channel=channel):
                    if setup is not None and dest == DRIVER:
                        setup.append(event_of(src, attempt[src], True, msg, 0.0))
                    else:
                        net.send(src, dest, msg, DATA if channel is Channel.LINK else CONTROL)
                case Dial(site=j, process=expect):
                    if setup is not None:
                        setup.append((src, j, expect))
                        continue
                    # a dial takes time (connect, handshake): the link is up, at both
                    # ends, when the dialled side reads its ``hello`` (``dial_delay`` None:
                    # at once at the dialling end)
                    if dial_delay is None:
                        net.send(src, j, ("hello", src, process[src], None))
                        site_do(src, sites[src].handle(PeerLinked(site=j, process=expect,
                                                                  dialed=True)))
                        continue
                    lo, hi = dial_delay
                    dials.append((step + int(rng.integers(lo, hi + 1)), src, process[src], j,
                                  expect))
                case Stop():
                    gone(src)
                case _:
                    pass  # Close, Reject, Scale, Crash: nothing to carry out here

    def carry_out(actions: list[BoundaryAction]) -> None:
        """The runtime driver host's part, over simulated links."""
        for a in actions:
            match a:
                case Outgoing(site=site, message=message):
                    net.send(DRIVER, site, message, DATA)
                case Tell(site=site, message=message):
                    net.send(DRIVER, site, message, CONTROL)
                case Deliver(batch=batch, op="insert", correction=correction):
                    if batch.num_rows:
                        for k, rows in plan.by_sink(batch):
                            out[k].append(rows)
                        corrections[0] += batch.num_rows if correction else 0
                        if not correction:
                            delivered_at.append(step)
                        ep = core.episodes
                        if ep is not None and ep.open and not correction:
                            early[0] += int(np.sum(batch.column("_sn").to_numpy()
                                                   > ep.episode.base))
                case Deliver(batch=batch, op=op):
                    tentative.append((step, op, batch if batch.num_rows else None))
                case FailSites(dead=dead, retired=retired):
                    for k in dead:
                        if k in retired:  # stopped (``StopSite``): it leaves, no crash
                            crashed_now.add(k)
                            net.drop_to(k)
                        elif k in sites:  # (a slot a rescale opened has had no process)
                            gone(k)
                case LaunchSites(count=count):
                    lo, hi = failures.launch_delay
                    for _ in range(count):
                        at = step + int(rng.integers(lo, hi + 1))
                        standby_at[at] = standby_at.get(at, 0) + 1
                case SendView(site=s, view=view):
                    sites[s] = SiteBoundary(s, 0, copy.deepcopy(site_plan), layout,
                                            link_timeout, budget=failures.budget,
                                            probe_every=probe_every)
                    site_do(s, sites[s].handle(FromDriver(message=view)))
                    site_core = sites[s].core
                    if restore is not None and site_core is not None:
                        k = int(restore[0]["checkpoint"])
                        site_core.restore({(st, int(q)): store[part_name(k, st, int(q))]
                                           for st, cons in enumerate(site_core.cons)
                                           for q in cons.parts[cons.installed]})
                case AdoptProcess(slot=k, attempt=att, registered=reg, message=message):
                    executor_now[k] = domain_of(failures.standby_executors, reg - plan.sites - 1)
                    net.forget(k)  # the old process's connections are gone with it
                    attempt[k] = att
                    process[k] = (reg, att)
                    sites[k] = SiteBoundary(reg, att, copy.deepcopy(site_plan), layout,
                                            link_timeout, budget=failures.budget,
                                            probe_every=probe_every)
                    crashed_now.discard(k)
                    zombies.discard(k)  # a hung process of the slot wakes to closed links
                    hung.pop(k, None)
                    site_do(k, sites[k].handle(FromDriver(message=cm.Standby()),
                                               FromDriver(message=message)))
                case CommitSinks(checkpoint=k):
                    carry_out(core.handle(SinksCommitted(checkpoint=k, sinks=tuple(
                        {} for _ in plan.sinks) + ({"dead_letters": {}},))))
                case WriteManifest(checkpoint=k, name=name, manifest=manifest, held=held):
                    store[name] = (manifest, [concat(list(h)) if h else None for h in held])
                    carry_out(core.handle(ManifestWritten(checkpoint=k)))
                case CheckpointDone(checkpoint=k, cut=cut, remove=remove):
                    checkpoints.append((k, cut))
                    for old in remove:
                        for name in [n for n in store if n.startswith(checkpoint_dir(old))]:
                            del store[name]
                case Recovered(slot=slot):
                    recovered.append(slot)
                    if len(recovered) == 1:
                        for site_, delay in failures.after_recovery:
                            crash_at.setdefault(step + delay, []).append(site_)
                case Abort(reason=reason):
                    raise Violation(f"seed {seed}: {reason}")
                case _:
                    pass  # reports the runtime keeps for its metrics

    def heal(k: int) -> None:
        """Slot ``k``'s cut heals: TCP delivers what it held, except on links whose reader
        closed them meanwhile (it learned the writer failed)."""
        for (src, dst, c), q in net.links.items():
            if k in (src, dst) and src != dst and dst in sites and src in sites[dst].dead_sites:
                q.clear()
                net.due[(src, dst, c)].clear()

    def heartbeat(s: int) -> Beat:
        """A synthetic load for the core's heartbeat: every row costs the same; a slow site
        has its capacity divided by its factor."""
        site_core = sites[s].core
        assert site_core is not None
        return Beat(pid=s, busy_s=float(site_core.processed.sum()),
                    capacity_s=float(step) * 4 / slow.get(s, 1.0), at=float(step))

    def probed(src: int, dst: int, msg: Any) -> bool:
        """A latency probe or its echo: the runtime's site host answers and times these as
        it reads them, never through a pass."""
        if isinstance(msg, Probe):
            site_do(dst, sites[dst].handle(Probed(peer=src, sent=msg.sent)))
        elif isinstance(msg, Echo):
            site_do(dst, sites[dst].handle(Echoed(peer=src, sent=msg.sent, now=step / 1000)))
        else:
            return False
        return True

    def settled() -> bool:
        """The first recovery and every move it caused are complete (``after_settled``)."""
        return bool(settled_crashes and recovered) and not (
            controller.pending_moves or controller.moving or controller.incomplete
            or controller.awaiting or controller.recovering is not None
            or controller.rescaling is not None)

    def domain_of(names: tuple[str, ...], i: int) -> str:
        return names[i] if i < len(names) else ""

    for s in range(plan.sites):
        carry_out(core.handle(Registered(address=SiteAddress(
            site=s, attempt=0, host=domain_of(failures.hosts, s) or "sim", port=s, pid=s,
            executor=domain_of(failures.executors, s)), now=0.0)))
    assert setup is not None  # what the start sent, gathered until here
    for src, j, expect in [d for d in setup if isinstance(d, tuple)]:
        site_do(j, sites[j].handle(PeerLinked(site=src, process=process[src], dialed=False)))
        site_do(src, sites[src].handle(PeerLinked(site=j, process=expect, dialed=True)))
    ready = [e for e in setup if e is not None and not isinstance(e, tuple)]
    setup = None
    carry_out(core.handle(*ready))
    checkpoints: list[tuple[int, int]] = []
    driver_crashed = False
    try:
        while step < max_steps:
            step += 1
            net.now = step
            if driver_crash is not None and step >= driver_crash:
                driver_crashed = True  # the driver dies, its sites with it (fail-stop)
                break
            if checkpoint_every and step % checkpoint_every == 0:
                carry_out(core.handle(TakeCheckpoint(now=float(step), sources=tuple(handed))))
            for site in crash_at.get(step, []):
                if site not in crashed_now:
                    crash_points += _move_points(controller, site)
                    hung.pop(site, None)  # a hung process can crash too
                    gone(site)
                    net.drop_some_from(site)
                    lo, hi = detect_delay
                    pending_detect.append((step + int(rng.integers(lo, hi + 1)), site,
                                           attempt[site]))
                    if clock:  # its peers' links reset too, each seen in its own time
                        for s in sorted(sites):
                            if s != site and s not in crashed_now \
                                    and site in sites[s].linked:
                                resets.append((step + int(rng.integers(lo, hi + 1)), s, site,
                                               process[site]))
            for d in [d for d in resets if d[0] <= step]:
                resets.remove(d)
                _, s, k, proc = d
                if s not in crashed_now and s not in hung and k in sites[s].linked \
                        and sites[s].process_of(k) == proc:
                    site_do(s, sites[s].handle(PeerLost(site=k, reason="reset by peer")))
            if step in move_at:
                lay = controller.layout
                assert lay is not None
                # the partition's first copy that is not on the destination already
                carry_out(core.handle(RequestMoves(moves=tuple(
                    (q, next(c for c in range(lay.columns)
                             if lay.site_of(q, c) not in (dst, NOWHERE)), dst)
                    for q, dst in move_at[step]))))
            if settled():
                for name, delay in settled_crashes:
                    crash_at.setdefault(step + delay, []).extend(
                        k for k in sorted(executor_now)
                        if executor_now[k] == name and k not in crashed_now)
                settled_crashes = []
            n_moves = len(controller.moves)  # moves complete in groups: count may jump
            for n in [n for n in crash_after_moves if n <= n_moves]:
                crash_at.setdefault(step + 1, []).append(crash_after_moves.pop(n))
            for k, n in hang_at.get(step, []):
                if k not in crashed_now and k not in hung:
                    hung[k] = (step, step + n)
            for k in [k for k, (_, wake) in hung.items() if wake <= step]:
                del hung[k]  # it wakes: a zombie reads its ``stop`` among its frames
            for k, n, drv in cut_at.get(step, []):
                cut[k] = (step, step + n, drv)
            for k in [k for k, (_, heal, _) in cut.items() if heal <= step]:
                del cut[k]
                heal(k)
            for side0, side1, n in split_at.get(step, []):
                split.append((side0, side1, step, step + n))
            for part in [part for part in split if part[3] <= step]:
                split.remove(part)
                for k in sorted((part[0] | part[1]) - {DRIVER}):
                    heal(k)
            if step % STATE_CHECK_STEPS == 0:
                same_state_at_same_frontier(
                    {s: c.core for s, c in sites.items() if s not in crashed_now
                     and s not in hung and c.core is not None}, plan)
            beat = clock.heartbeat_every if clock else HEARTBEAT_STEPS
            # (a probing run's heartbeats stop with its output: over far links one is
            # always on its way, and the run would never fall quiet)
            if (clock or (balance and not (probe_every and core.egress.ended))) \
                    and step % beat == 0:
                for s in sorted(sites):
                    if s not in crashed_now and s not in hung and sites[s].core is not None:
                        site_do(s, sites[s].handle(heartbeat(s)))
            if (clock and step % clock.link_every == 0) or (
                    probe_every and step % 10 == 0 and not core.egress.ended):
                for s in sorted(sites):
                    if s in crashed_now or s in hung:
                        continue
                    silent = {}
                    for j in sorted(sites[s].linked) if clock else ():
                        since = blocked_since(j, s)
                        silent[j] = 0.0 if since is None and j not in hung \
                            else float(step - (since if since is not None else hung[j][0]))
                    site_do(s, sites[s].handle(LinkCheck(silent=silent, now=step / 1000)))
            if (clock and step % clock.tick_every == 0) or (balance and step % 50 == 0):
                carry_out(core.handle(Tick(now=float(step))))
                if core.episodes is not None and clock:
                    overdue += core.episodes.overdue(float(step), float(clock.tick_every))
            for k, nbytes in squeeze_at.pop(step, []):
                net.send(DRIVER, k, cm.Squeeze(budget=nbytes), CONTROL)
            if failures.budget is not None or failures.squeezes:
                for due in [d for d in io_due if d[0] <= step]:
                    io_due.remove(due)
                    _, k, proc, what = due
                    if k in crashed_now or k in hung or process.get(k) != proc:
                        continue  # its process is gone (or frozen: it waits)
                    ev = what if isinstance(what, Spilled) else Loaded(
                        stage=what[0], q=what[1], snapshot=what[2], now=float(step),
                        seq=what[3])
                    site_do(k, sites[k].handle(ev))
                if step % failures.memory_every == 0:
                    for k in sorted(sites):
                        if k not in crashed_now and k not in hung:
                            site_do(k, sites[k].handle(MemoryCheck(now=float(step))))
            elif (eventual is not None and clock and step % clock.tick_every == 0) or (
                    plan.stream_replicas and step % STREAM_TICK == 0):
                # the merges' delay bound (``SiteCore.clock``), collected streams' revival on
                # delay (``SiteCore.stream_tick``): the host's clock, in steps
                for k in sorted(sites):
                    if k not in crashed_now and k not in hung and sites[k].core is not None:
                        site_do(k, sites[k].handle(MemoryCheck(now=float(step))))
            if rescale_at and rescale_at[0][0] <= step and controller.rescaling is None:
                carry_out(core.handle(Rescale(sites=rescale_at.pop(0)[1], now=float(step))))
            for _ in range(standby_at.pop(step, 0)):
                n_standby += 1
                addr = SiteAddress(site=plan.sites + n_standby, attempt=n_standby, host="sim",
                                   port=1000 + n_standby, pid=1000 + n_standby,
                                   executor=domain_of(failures.standby_executors,
                                                      n_standby - 1))
                carry_out(core.handle(Registered(address=addr, now=float(step))))
            for dial in [d for d in dials if d[0] <= step and d[1] not in hung]:
                dials.remove(dial)  # (a hung dialler's handshake waits for it to wake)
                _, src_, proc_, j_, expect_ = dial
                if src_ not in crashed_now and process[src_] == proc_:
                    net.send(src_, j_, ("hello", src_, proc_, expect_))
            for det in [d for d in pending_detect if d[0] <= step]:
                pending_detect.remove(det)
                carry_out(core.handle(ConnectionClosed(site=det[1], attempt=det[2], reason="crash",
                                                       now=float(step))))
            # Admit the next input batch when the core does not hold it back (the runtime's
            # rule, ``Boundary.held_back``; links here hold any amount: no pool), with some
            # probability.
            room = ((next_batch < len(batches) or bool(deferred))
                    and not core.held_back(window * unit, pool_full=False))
            can_admit = room and step >= last_admit + pace
            if can_admit and rng.random() < 0.3:
                last_admit = step
                back = next((i for i, (j, _) in enumerate(deferred) if not source_cut(j)), None)
                if back is not None:  # a healed source's held records come first
                    stream, b = deferred.pop(back)
                elif next_batch < len(batches):
                    stream, b = _item(batches[next_batch])
                    next_batch += 1
                    if source_cut(stream) or any(j == stream for j, _ in deferred):
                        deferred.append((stream, b))
                        continue
                else:
                    continue
                # (arrival times only matter to eventual consistency; 0 keeps _t0 fixed)
                carry_out(core.handle(Input(batch=b, now=float(step) if eventual else 0.0,
                                            stream=stream)))
                handed[stream] += b.num_rows if isinstance(b, pa.RecordBatch) else len(b)
                continue
            if next_batch == len(batches) and not deferred and not core.ingress.ended:
                carry_out(core.handle(InputEnd()))
                continue
            busy_k = backlogged() if pass_rows else []
            if busy_k and prng.random() < 0.3:
                one_pass(busy_k[int(prng.integers(len(busy_k)))], [])
                continue
            item = net.pop()
            if item is None and busy_k:
                one_pass(busy_k[0], [])
                continue
            if item is None:
                if net.in_flight() or pending_detect or dials or resets or deferred or (
                        room and next_batch < len(batches)):
                    continue  # a detection or an admission is still to come
                if hung or cut or split or any(at > step for at in hang_at) \
                        or any(at > step for at in (*cut_at, *split_at)) \
                        or controller.links.since is not None:
                    continue  # a hang or a cut to come, last, or be judged: time goes on
                if not core.egress.ended and (io_due or any(
                        s_.core is not None and (s_.core.memory.spilled or s_.core.memory.loading)
                        for k_, s_ in sites.items() if k_ not in crashed_now)):
                    continue  # a spilled partition is still to come back
                if any(at > step for at in squeeze_at):
                    continue
                if (rescale_at or any(at > step for at in standby_at)
                        or any(at > step for at in crash_at)
                        or any(at > step for at in move_at)
                        or settled()):
                    continue  # a standby still registers: recovery runs after the input ends
                break  # quiet: finished, or stuck (then the egress has not ended: a violation)
            src, dst, msg = item
            if dst in crashed_now and dst not in zombies:
                continue
            if dst == DRIVER:
                event = event_of(src, attempt.get(src, -1), True, msg, float(step))
                if event is not None:
                    carry_out(core.handle(event))
                continue
            if isinstance(msg, tuple):  # a link's set-up (``site_do``): up at both ends
                _, dialer, proc, expect = msg
                if expect is not None and dialer in hung:
                    net.send(src, dst, msg)  # the handshake ends when the dialler wakes
                    continue
                site_do(dst, sites[dst].handle(PeerLinked(site=dialer, process=proc,
                                                          dialed=False)))
                if expect is not None and dialer not in crashed_now \
                        and process[dialer] == proc:
                    site_do(dialer, sites[dialer].handle(PeerLinked(site=dst, process=expect,
                                                                    dialed=True)))
                continue
            if probed(src, dst, msg):
                continue
            frame = from_link(src, msg)
            if isinstance(frame, FromDriver):
                site_do(dst, sites[dst].handle(frame))
                continue
            # Like the runtime's scheduler, a site often takes several queued messages in
            # one pass (``Frames``): gather a random number of them.
            batch = [(src, _as_moved(msg))]
            for _ in range(int(rng.integers(0, 4))):
                more = net.pop_to(dst)
                if more is None:
                    break
                if not probed(more[0], dst, more[1]):
                    batch.append((more[0], _as_moved(more[1])))
            one_pass(dst, batch)
    except (ProtocolError, PartitionLost) as e:
        raise Violation(f"seed {seed}: {e}") from e
    leftover = {"ingress": core.ingress.buffered()}
    live_replicas: dict[tuple[int, int], int] = {}
    for s, boundary in sites.items():
        site_core = boundary.core
        if s not in crashed_now and site_core is not None:
            leftover[f"site{s}"] = site_core.buffered_rows()
            for st, cons in enumerate(site_core.cons):
                for q in cons.parts[cons.installed]:
                    live_replicas[(st, int(q))] = live_replicas.get((st, int(q)), 0) + 1
    tables = [pa.Table.from_batches(rows, schema=plan.sink_schema(k))
              for k, rows in enumerate(out)]
    return SimResult(seed, tables[0], core.egress.ended, leftover, crashed, step, net.delivered,
                     core.ingress.next_isn, recovered, live_replicas,
                     [(m.q, m.r, m.src, m.dst) for m in controller.moves], tables,
                     crash_points, [m.short_s for m in controller.moves], driver_crashed,
                     checkpoints, [r.as_dict() for r in controller.rescales],
                     {s: sorted(controller.layout.hosted(s)) for s in controller.view.members
                      if s not in controller.dead} if controller.layout else {}, spills[0],
                     [m.reason for m in controller.moves], spills[1], tentative,
                     corrections[0], core.hold,
                     core.episodes.max_wait if core.episodes is not None else 0.0, overdue,
                     early[0], delivered_at, last_admit,
                     core.egress.cons.duplicates + sum(
                         c.duplicates for k, b in sites.items()
                         if k not in crashed_now and b.core is not None for c in b.core.cons),
                     sum(c.early for k, b in sites.items()
                         if k not in crashed_now and b.core is not None for c in b.core.cons),
                     *(getattr(core.egress.cons, n) + sum(
                         getattr(c, n) for k, b in sites.items()
                         if k not in crashed_now and b.core is not None for c in b.core.cons)
                       for n in ("collected", "revived")))


def same_state_at_same_frontier(cores: dict[int, SiteCore], plan: PhysicalPlan) -> None:
    """The state sizes the heartbeats report (``SiteCore.state_sizes``): two copies of an
    operator's mini-partition whose operators were handed the same input frontier, SN and
    watermark (``ConsumerSet.released_sn``, ``released_wm``), hold the same keys (their
    bytes are estimates from the copy's own buffers, which may differ by a few). The SN
    alone does not decide: racing copies take each stream's claims from every producer
    copy, and one copy may have had a later watermark at the same SN (a join then expires
    more). The run's progress counts each partition once, from any copy, on that rule. A
    stage run in arrival order (``PhysicalPlan.arrival``) holds state for rows above its
    frontier too, as many as came: its copies are not compared."""
    stage_of = [s.index for s in plan.stages for _ in s.operators]
    seen: dict[tuple[int, int, int, int], tuple[int, int, int]] = {}
    for k, core in sorted(cores.items()):
        at: dict[tuple[int, int], tuple[int, int]] = {}
        for s, cons in enumerate(core.cons):
            for i in np.flatnonzero(cons.installed):
                at[(s, int(cons.parts[i]))] = (int(cons.released_sn[i]),
                                               int(cons.released_wm[i]))
        for o, q, keys, nbytes in zip(*core.state_sizes(), strict=True):
            frontier = at.get((stage_of[int(o)], int(q)))
            if frontier is None or core.arrival[stage_of[int(o)]]:
                continue
            key = (int(o), int(q), *frontier)
            mine = (int(keys), int(nbytes), k)
            other = seen.setdefault(key, mine)
            if other[0] != mine[0]:
                raise Violation(f"operator {int(o)} partition {int(q)} at frontier {frontier} "
                                f"(SN, watermark): site {other[2]} holds {other[0]} keys, "
                                f"{other[1]} bytes; site {k} holds {keys} keys, {nbytes} bytes")


def _move_points(controller: Any, site: int) -> list[tuple[str, str]]:
    """Where a crash of ``site`` lands in each running move: its role (the old copy's
    site, the destination, the site the new copy is built from, or a bystander) and the
    move's phase (every site applying it, the new copy being built, waiting for every party
    to fold it in, the old copy retired)."""
    out = []
    for m in controller.moving.values():
        built_from = controller.layout.site_of(m.q, m.survivor)
        role = ("source" if site == m.src else "destination" if site == m.dst
                else "built from" if site == built_from else "bystander")
        phase = ("applying" if m.confirmed is None else "building" if m.end is None
                 else "folding" if m.retired is None else "retired")
        out.append((role, phase))
    return out


def _overtakes(msg: Any) -> bool:
    """Whether the runtime writes ``msg`` at once, ahead of data frames the skew buffer holds
    for the same connection (``protocol/channels.py``; read at run time, so a test can change
    the rule). A link's set-up never overtakes."""
    return not isinstance(msg, tuple) and not ordered_with_data(msg)


def _as_moved(msg: Any) -> Any:
    """A ``State`` as the runtime moves it: through the typed wire encoding (its arrays and
    Arrow tables out of band), so every operator's state is checked to survive it."""
    if isinstance(msg, State):
        body = b"".join(bytes(p) for p in encode(msg))[FRAME_HEADER.size:]
        return decode(MSG, body, {})
    return msg


def _item(item: pa.RecordBatch | tuple[int, pa.RecordBatch]) -> tuple[int, pa.RecordBatch]:
    """An input item as ``(source, batch)``: a bare batch is source 0's."""
    return item if isinstance(item, tuple) else (0, item)


def _isns(plan: PhysicalPlan, item: Any) -> int:
    """The input sequence numbers the valid records of an input item take: one each, or
    the plan's ``isn_span`` of each (a chunk of a source read on the sites)."""
    k, b = _item(item)
    good, _ = validate(b, plan.source_schemas[k])
    if plan.isn_span is None:
        return good.num_rows
    return int(pc.sum(good.column(plan.isn_span)).as_py() or 0)


def in_sn_order(t: pa.Table) -> pa.Table:
    """``t``'s rows in the egress's order, ``(_sn, _snm, _port)`` (``sort_rows``): what
    ``--unordered-output`` leaves aside."""
    if t.num_rows < 2:
        return t
    return pa.Table.from_batches([sort_rows(t.combine_chunks().to_batches()[0])])


def check(plan_factory: Callable[[], PhysicalPlan], batches: list[pa.RecordBatch], seed: int,
          failures: FailurePlan, expected: pa.Table | None = None, **kw: Any) -> SimResult:
    """Run a seed and enforce the contract against the failure-free output (``kw``:
    ``simulate``'s options, passed through)."""
    expected_all = None
    if expected is None:
        base = simulate(plan_factory(), batches, seed, FailurePlan(), **kw)
        expected, expected_all = base.output, base.outputs
    res = simulate(plan_factory(), batches, seed, failures, **kw)
    if kw.get("unordered"):  # the rows and their numbering, order aside
        res.output = in_sn_order(res.output)
        res.outputs = [in_sn_order(t) for t in res.outputs]
        expected = in_sn_order(expected)
        if expected_all is not None:
            expected_all = [in_sn_order(t) for t in expected_all]
    plan = plan_factory()
    total = sum(_isns(plan, b) for b in batches)
    if res.admitted != total:
        raise Violation(f"seed {seed}: the ingress admitted {res.admitted} of {total} inputs")
    if not res.ended:
        raise Violation(f"seed {seed}: the egress never saw the end of the stream "
                        f"(crashes {res.crashed}, {res.steps} steps)")
    if res.output.num_rows != expected.num_rows or digest_of(res.output) != digest_of(expected) \
            or (expected_all is not None and [digest_of(t) for t in res.outputs]
                != [digest_of(t) for t in expected_all]):
        raise Violation(
            f"seed {seed}: egress output differs from the failure-free run "
            f"({res.output.num_rows} rows vs {expected.num_rows}; crashes {res.crashed})")
    if any(res.leftover.values()):
        raise Violation(f"seed {seed}: buffers did not drain: {res.leftover}")
    return res
