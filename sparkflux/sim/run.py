"""One simulated run of a dataflow with Flux-HA, and the correctness contract (DESIGN.md §5).

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

``check(seed, ...)`` compares the run with the failure-free run of the same input: the egress
output must be identical row for row and in order, the egress must have seen the end of the
stream, and every surviving buffer must have drained. A failing seed raises ``Violation`` naming
the seed, so ``simulate(seed)`` reproduces it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.control.controller import Controller
from sparkflux.control.events import (
    Abort,
    Adopt,
    CatchUp,
    CatchUpDone,
    Collect,
    ConnectionClosed,
    FailSites,
    Move,
    Moved,
    Recovered,
    Registered,
    SiteAddress,
    SiteReady,
    Standby,
    Stats,
    Tick,
)
from sparkflux.control.policy import PolicyConfig
from sparkflux.dataflow.placement import DRIVER, Layout
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.digest import digest_of
from sparkflux.model.validate import validate
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.consumer import PartitionLost
from sparkflux.protocol.egress import Egress
from sparkflux.protocol.ingress import Ingress
from sparkflux.protocol.messages import (
    Ack,
    CuDone,
    CuStart,
    Data,
    Installed,
    Outgoing,
    PSync,
    Rejoin,
    Retain,
    Retaining,
    State,
)
from sparkflux.protocol.producer import ProtocolError
from sparkflux.protocol.site import Received, SiteCore
from sparkflux.runtime.frames import FRAME_HEADER, MSG, decode, encode
from sparkflux.sim.network import CONTROL, DATA, Network


class Violation(AssertionError):
    """The correctness contract failed for a seed."""


@dataclass(frozen=True)
class FailurePlan:
    """Which sites crash, and after how many scheduler steps; when standbys register."""

    crashes: tuple[tuple[int, int], ...] = ()  # (site slot, step): kills its current process
    standbys: tuple[int, ...] = ()  # steps at which a standby process registers
    # (site slot, delay): crash it ``delay`` steps after the first recovery completes
    after_recovery: tuple[tuple[int, int], ...] = ()
    # (step, partition, destination site): ask the controller to move replica 0 of the
    # partition there (or replica 1, if replica 0 is already on that site)
    moves: tuple[tuple[int, int, int], ...] = ()
    # (site, after move number): crash the site once that many moves have completed
    after_moves: tuple[tuple[int, int], ...] = ()
    # (site, factor): the site's work costs this much more (load for the balancing policy)
    slow: tuple[tuple[int, float], ...] = ()


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


def simulate(plan: PhysicalPlan, batches: list[pa.RecordBatch], seed: int,
             failures: FailurePlan = FailurePlan(), replicas: int = 2,
             detect_delay: tuple[int, int] = (0, 40), max_steps: int = 2_000_000,
             window: int = 4, recovery: str = "standby", balance: bool = False,
             policy: PolicyConfig | None = None, fifo: bool = False) -> SimResult:
    """Run ``plan`` on ``batches`` under ``seed`` with the given crashes.

    ``fifo``: every link strictly FIFO, no frame overtaking another. Only to compare with
    the runtime's order (the default), e.g. to show that a mutant is caught only because
    acknowledgements and control frames may pass held data."""
    rng = np.random.default_rng(seed)
    layout = Layout(plan.sites, plan.partitions, replicas)
    net = Network(rng) if fifo else Network(rng, overtakes=_overtakes)
    # Every site owns its operator shells, as a Spark task owns its unpickled copy of the plan.
    sites = {s: SiteCore(s, copy.deepcopy(plan), layout) for s in range(plan.sites)}
    ingress, egress = Ingress(plan, layout), Egress(plan, layout)
    controller = Controller(plan.sites, heartbeat_timeout=1e9, ha=replicas == 2, layout=layout,
                            stages=len(plan.stages), recovery=recovery, balance=balance,
                            policy=policy)
    slow = dict(failures.slow)
    move_at: dict[int, list[tuple[int, int]]] = {}
    for at, q, dst in failures.moves:
        move_at.setdefault(at, []).append((q, dst))
    crash_after_moves = dict((n, site) for site, n in failures.after_moves)
    for s in range(plan.sites):
        controller.handle(Registered(address=SiteAddress(site=s, attempt=0, host="sim",
                                                         port=s, pid=s), now=0.0))
    for s in range(plan.sites):
        controller.handle(SiteReady(site=s, attempt=0))
    out: list[pa.RecordBatch] = []
    crashed: list[int] = []
    pending_detect: list[tuple[int, int]] = []  # (step when the controller notices, site)
    crash_at: dict[int, list[int]] = {}
    for site, at in failures.crashes:
        crash_at.setdefault(at, []).append(site)
    standby_at = {at for at in failures.standbys}
    n_standby = 0
    attempt = dict.fromkeys(range(plan.sites), 0)
    hellos: dict[int, set[int]] = {}
    recovered: list[int] = []
    next_batch = 0
    admitted: list[int] = []  # ISN count after each admitted batch
    step = 0

    def emit(src: int, outs: list[Outgoing]) -> None:
        for o in outs:
            # the runtime's StateMover connection (one per direction and pair of sites)
            # carries a snapshot one way and ``installed`` back, apart from the data
            side = isinstance(o.message, (State, Installed))
            net.send(src, o.site, o.message, CONTROL if side else DATA)

    ready_sent: set[tuple[int, int]] = set()

    def maybe_ready(k: int) -> None:
        """A standby is ready once every live member has connected to it (hello)."""
        if k in crashed_now or (k, attempt[k]) in ready_sent or k not in hellos:
            return
        if hellos[k] >= set(controller.view.members) - {k}:
            ready_sent.add((k, attempt[k]))
            net.send(k, DRIVER, ("ready", k))

    def carry_out(actions: list) -> None:
        for a in actions:
            if isinstance(a, FailSites):
                ingress.on_fail(set(a.dead))
                try:
                    emit(DRIVER, egress.on_fail(set(a.dead)))
                except (ProtocolError, PartitionLost) as e:
                    raise Violation(f"seed {seed}: {e}") from e
                for s in a.view.members:
                    net.send(DRIVER, s, ("fail", frozenset(a.dead)), CONTROL)
                for k in list(hellos):
                    maybe_ready(k)
            elif isinstance(a, Adopt):
                k = a.slot
                net.forget(k)  # the old process's connections are gone with it
                attempt[k] = a.address.attempt
                assert controller.layout is not None
                sites[k] = SiteCore(k, copy.deepcopy(plan), controller.layout, standby=True)
                sites[k].dead_sites = set(controller.dead)
                crashed_now.discard(k)
                ingress.on_avail(k, controller.epoch)
                sites[k].epochs = ingress.epochs.copy()
                hellos[k] = set()
                for s in a.view.members:
                    if s != k:
                        net.send(DRIVER, s, ("avail", k, controller.epoch), CONTROL)
                maybe_ready(k)
            elif isinstance(a, CatchUp):
                net.send(DRIVER, a.survivor, CuStart(a.stage, a.q, a.r, a.epoch, a.retained),
                         CONTROL)
            elif isinstance(a, Recovered):
                recovered.append(a.slot)
                if len(recovered) == 1:
                    for site_, delay in failures.after_recovery:
                        crash_at.setdefault(step + delay, []).append(site_)
            elif isinstance(a, Move):
                retaining = ingress.on_move(a.q, a.r, a.dst, a.epoch)
                try:
                    emit(DRIVER, egress.on_move(a.q, a.r, a.dst))
                except (ProtocolError, PartitionLost) as e:
                    raise Violation(f"seed {seed}: {e}") from e
                for s in controller.view.members:
                    if s not in controller.dead:
                        net.send(DRIVER, s, ("move", a.q, a.r, a.dst, a.epoch), CONTROL)
                emit(DRIVER, retaining)
            elif isinstance(a, Collect):
                for s in controller.view.members:
                    if s not in controller.dead:
                        net.send(DRIVER, s, ("collect", a.round), CONTROL)
            elif isinstance(a, Abort):
                raise Violation(f"seed {seed}: controller gave up: {a.reason}")
            elif isinstance(a, Standby):
                pass

    crashed_now: set[int] = set()  # slots whose current process is dead
    while step < max_steps:
        step += 1
        for site in crash_at.get(step, []):
            if site not in crashed_now:
                crashed.append(site)
                crashed_now.add(site)
                net.drop_to(site)
                net.drop_some_from(site)
                lo, hi = detect_delay
                pending_detect.append((step + int(rng.integers(lo, hi + 1)), site,
                                       attempt[site]))
        if step in move_at:
            assert controller.layout is not None
            lay = controller.layout
            carry_out(controller.request_moves(
                [(q, 0 if lay.site_of(q, 0) != dst else 1, dst) for q, dst in move_at[step]]))
        n_moves = len(controller.moves)  # moves complete in groups: count may jump
        for n in [n for n in crash_after_moves if n <= n_moves]:
            crash_at.setdefault(step + 1, []).append(crash_after_moves.pop(n))
        if balance and step % 50 == 0:
            carry_out(controller.handle(Tick(now=float(step))))
        if step in standby_at:
            n_standby += 1
            addr = SiteAddress(site=plan.sites + n_standby, attempt=n_standby, host="sim",
                               port=1000 + n_standby, pid=1000 + n_standby)
            carry_out(controller.handle(Registered(address=addr, now=float(step))))
        for d in [d for d in pending_detect if d[0] <= step]:
            pending_detect.remove(d)
            carry_out(controller.handle(ConnectionClosed(site=d[1], attempt=d[2],
                                                         reason="crash", now=float(step))))
        # Admit the next input batch when the window allows, with some probability.
        in_flight = ingress.next_isn - 1 - egress.progress.sn
        can_admit = next_batch < len(batches) and in_flight < window * _rows(batches, 1)
        if can_admit and rng.random() < 0.3:
            good, _ = validate(batches[next_batch], plan.source_schema)
            sends, _ = ingress.admit(good, 0.0)
            emit(DRIVER, sends)
            next_batch += 1
            admitted.append(ingress.next_isn)
            continue
        if next_batch == len(batches) and not ingress.ended:
            emit(DRIVER, ingress.finish())
            continue
        item = net.pop()
        if item is None:
            if pending_detect or (can_admit and next_batch < len(batches)):
                continue  # a detection or an admission is still to come
            if (any(at > step for at in standby_at) or any(at > step for at in crash_at)
                    or any(at > step for at in move_at)):
                continue  # a standby still registers: recovery runs after the input ends too
            break  # quiet: finished, or stuck (then the egress has not ended: a violation)
        src, dst, msg = item
        if dst in crashed_now:
            continue
        try:
            if dst == DRIVER:
                if src in controller.dead:
                    continue  # like the runtime's host: a failed site's late traffic is dropped
                if isinstance(msg, Data):
                    d, acks = egress.on_data(msg, src)
                    emit(DRIVER, acks)
                    if d is not None and d.batch.num_rows:
                        out.append(d.batch)
                elif isinstance(msg, Ack):
                    ingress.on_ack(msg, src)
                elif isinstance(msg, Retain):
                    ingress.on_retain(msg.q, msg.c, msg.epoch)
                    net.send(DRIVER, src, Retaining(msg.stage, msg.q, msg.c, msg.epoch))
                elif isinstance(msg, Rejoin):
                    emit(DRIVER, ingress.on_rejoin(msg, src))
                elif isinstance(msg, PSync):
                    emit(DRIVER, egress.cons.on_psync(msg))
                elif isinstance(msg, CuDone):
                    carry_out(controller.handle(CatchUpDone(stage=msg.stage, q=msg.q, r=msg.r,
                                                            nbytes=msg.nbytes, now=float(step))))
                elif isinstance(msg, tuple) and msg[0] == "moved":
                    carry_out(controller.handle(Moved(site=msg[1], epoch=msg[2])))
                elif isinstance(msg, tuple) and msg[0] == "stats":
                    carry_out(controller.handle(msg[1]))
                elif isinstance(msg, tuple) and msg[0] == "ready":
                    carry_out(controller.handle(SiteReady(site=msg[1], attempt=attempt[msg[1]])))
                else:
                    raise Violation(f"seed {seed}: driver got {type(msg).__name__}")
            elif isinstance(msg, tuple) and msg[0] == "fail":
                emit(dst, sites[dst].handle(cm.Fail(dead=tuple(sorted(msg[1])))))
            elif isinstance(msg, tuple) and msg[0] == "move":
                emit(dst, sites[dst].handle(cm.Move(q=msg[1], r=msg[2], dst=msg[3],
                                                    epoch=msg[4])))
                net.send(dst, DRIVER, ("moved", dst, msg[4]), CONTROL)
            elif isinstance(msg, tuple) and msg[0] == "collect":
                # A synthetic load: every row costs the same; a slow site has its capacity
                # divided by its factor.
                core = sites[dst]
                counts = tuple(int(c) for c in core.processed)
                net.send(dst, DRIVER, ("stats", Stats(
                    site=dst, attempt=attempt[dst], round=msg[1],
                    busy_s=float(sum(counts)), capacity_s=float(step) * 4 / slow.get(dst, 1.0),
                    counts=counts, now=float(step))), CONTROL)
            elif isinstance(msg, tuple) and msg[0] == "avail":
                sites[dst].handle(cm.Avail(slot=msg[1], epoch=msg[2], host="", port=0,
                                           attempt=attempt[msg[1]], registered=msg[1]))
                net.send(dst, msg[1], ("hello", dst))
            elif isinstance(msg, tuple) and msg[0] == "hello":
                hellos[dst].add(msg[1])
                maybe_ready(dst)
            else:
                # Like the runtime's scheduler, a site often takes several queued messages in
                # one pass (``Received``): gather a random number of them.
                batch = [(src, _as_moved(msg))]
                for _ in range(int(rng.integers(0, 4))):
                    more = net.pop_to(dst)
                    if more is None:
                        break
                    batch.append((more[0], _as_moved(more[1])))
                emit(dst, sites[dst].handle(Received(batch)))
        except (ProtocolError, PartitionLost) as e:
            raise Violation(f"seed {seed}: {e}") from e
    leftover = {"ingress": ingress.buffered()}
    live_replicas: dict[tuple[int, int], int] = {}
    for s, core in sites.items():
        if s not in crashed_now:
            leftover[f"site{s}"] = core.buffered_rows()
            for st, cons in enumerate(core.cons):
                for q in cons.parts[cons.installed]:
                    live_replicas[(st, int(q))] = live_replicas.get((st, int(q)), 0) + 1
    table = pa.Table.from_batches(out, schema=plan.output_schema) if out else \
        plan.output_schema.empty_table()
    return SimResult(seed, table, egress.ended, leftover, crashed, step, net.delivered,
                     ingress.next_isn, recovered, live_replicas,
                     [(m["q"], m["r"], m["src"], m["dst"]) for m in controller.moves])


def _overtakes(msg: Any) -> bool:
    """Whether the runtime writes ``msg`` at once, ahead of data frames the skew buffer holds
    for the same connection (read at run time, so a test can change the rule)."""
    from sparkflux.runtime import outbox

    return not isinstance(msg, tuple) and not isinstance(msg, outbox.ORDERED_WITH_DATA)


def _as_moved(msg: Any) -> Any:
    """A ``State`` as the runtime moves it: through the typed wire encoding (its arrays and
    Arrow tables out of band), so every operator's state is checked to survive it."""
    if isinstance(msg, State):
        body = b"".join(bytes(p) for p in encode(msg))[FRAME_HEADER.size:]
        return decode(MSG, body, {})
    return msg


def res_plan_schema(plan_factory: Callable[[], PhysicalPlan]) -> pa.Schema:
    return plan_factory().source_schema


def _rows(batches: list[pa.RecordBatch], i: int) -> int:
    return batches[0].num_rows * i if batches else 1


def check(plan_factory: Callable[[], PhysicalPlan], batches: list[pa.RecordBatch], seed: int,
          failures: FailurePlan, expected: pa.Table | None = None, **kw: object) -> SimResult:
    """Run a seed and enforce the contract against the failure-free output."""
    if expected is None:
        expected = simulate(plan_factory(), batches, seed, FailurePlan(), **kw).output  # type: ignore[arg-type]
    res = simulate(plan_factory(), batches, seed, failures, **kw)  # type: ignore[arg-type]
    total = sum(validate(b, res_plan_schema(plan_factory))[0].num_rows for b in batches)
    if res.admitted != total:
        raise Violation(f"seed {seed}: the ingress admitted {res.admitted} of {total} inputs")
    if not res.ended:
        raise Violation(f"seed {seed}: the egress never saw the end of the stream "
                        f"(crashes {res.crashed}, {res.steps} steps)")
    if res.output.num_rows != expected.num_rows or digest_of(res.output) != digest_of(expected):
        raise Violation(
            f"seed {seed}: egress output differs from the failure-free run "
            f"({res.output.num_rows} rows vs {expected.num_rows}; crashes {res.crashed})")
    if any(res.leftover.values()):
        raise Violation(f"seed {seed}: buffers did not drain: {res.leftover}")
    return res
