"""The driver host's hands: every action of the driver core (``control/boundary.py``) carried
out on the host's connections, sinks and records, in the order the core gave them."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pyarrow as pa

from sparkflux.control.boundary import (
    AdoptProcess,
    BoundaryAction,
    CaughtUp,
    Deliver,
    OutputEnded,
    Rejects,
    SendView,
    StartTimes,
    Tell,
)
from sparkflux.control.checkpoints import (
    CheckpointDone,
    CheckpointGivenUp,
    CommitSinks,
    WriteManifest,
)
from sparkflux.control.events import (
    Abort,
    CatchUp,
    FailSites,
    InstallView,
    LaunchSites,
    Move,
    Recovered,
    Rescaled,
    StartIngress,
    StopSite,
)
from sparkflux.io.tentative_output import Op, with_op
from sparkflux.model.validate import Rejected
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.messages import Outgoing
from sparkflux.runtime import trace
from sparkflux.runtime.causes import sink_failure

if TYPE_CHECKING:
    from sparkflux.runtime.driver import Host


class Actions:
    """Carries out the core's actions for ``host``: sends, the sink's output, the dead
    letters, connections forgotten and adopted, and the records the metrics are made of."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self._catch_up_started: dict[tuple[int, int], float] = {}  # (stage, q) -> wall time
        self._tentative_noted = False  # the open episode's first tentative rows were noted
        self._episode_cause = "the cut source"  # what the open episode waited for
        self._catching_sites: set[int] = set()  # sites being caught up (noted once each)

    def carry_out(self, actions: list[BoundaryAction]) -> None:
        """Carry out the core's actions, in order: the host's whole part of the protocol."""
        host = self.host
        for a in actions:
            match a:
                case Outgoing(site=site, message=message):
                    host.outbox.send(site, message)
                case Tell(site=site, message=message):
                    host.tell(site, message)
                case SendView(site=site, view=view):
                    host.conns[site].send(view)
                case Deliver():
                    self._deliver(a)
                case Rejects(rejected=rejected):
                    self._reject(list(rejected))
                case InstallView():
                    host.stats.phase = "connecting sites"
                    if host.site_start_s is None and host.launched_at is not None:
                        host.site_start_s = time.time() - host.launched_at
                        self.measure_standby_wait()
                case StartIngress():
                    assert host.start_ingress is not None
                    host.start_ingress.set()
                case FailSites(dead=dead, retired=retired):
                    self._failed(set(dead) - set(retired))
                    self._retired(retired)
                case LaunchSites(count=count):
                    host.launch_more(count)
                case Rescaled(record=record):
                    host.rescales.append(record)
                    text = (f"rescaled from {record['before']} to {record['sites']} sites in "
                            f"{record['seconds']} s: {record['moves']} copies moved"
                            + (f" ({record['note']})" if record["note"] else ""))
                    host.progress.note("rescale", None, text)
                    host.announce(text)
                    host.rescaled.set()
                    host.faults.rescaled()
                case AdoptProcess():
                    self._adopt(a)
                case CatchUp(stage=stage, q=q, r=r, survivor=survivor):
                    self._catch_up_started[(stage, q)] = time.time()
                    self._note_catch_up(stage, q, r, survivor)
                case CaughtUp():
                    self._caught_up(a)
                case Recovered(slot=slot):
                    host.recovered.append({"site": slot, "time": time.time()})
                    host.progress.recovered(slot)
                    self._catching_sites.discard(slot)
                    host.stats.phase = "running"
                    if len(host.recovered) == 1:
                        host.faults.after_recovery()
                case Move(reason="retire"):
                    pass  # a move's old copy (or a given-up build) leaves: nothing to show
                case Move():
                    self._move(a)
                case StopSite(site=site, attempt=attempt, reason=reason):
                    # (a registration's comes as its ``Answer``, carried out by the door)
                    conn = next((c for c, (s, att, _) in host.identity.items()
                                 if (s, att) == (site, attempt)), None)
                    if conn is not None:
                        host.stop_process(conn, cm.Stop(excluded=True, reason=reason))
                case Abort(reason=reason):
                    host.abort(reason)
                case OutputEnded():
                    host.metrics.end = time.time()
                    host.cpu_end = time.process_time()
                    host.stats.phase = "finished"
                    assert host.finished is not None
                    host.finished.set()
                case CommitSinks() | WriteManifest() | CheckpointDone() | CheckpointGivenUp():
                    host.checkpointing.carry_out(a)
                case _:
                    pass  # Answer, Adopt: the door and AdoptProcess do their part
        host.watch.safety()
        assert host.heard is not None
        host.heard.set()

    def measure_standby_wait(self) -> None:
        """This run's measured starts and adoptions to the core (``StartTimes``: the core
        sets the standby wait from them)."""
        host = self.host
        self.carry_out(host.core.handle(StartTimes(
            fixed=host.cfg.standby_wait, start_s=host.site_start_s,
            adoptions_s=tuple(a["after_s"] for a in host.adoptions),
            executor_start_s=host.executor_start_s)))

    def _adopt(self, a: AdoptProcess) -> None:
        """``avail``: the standby process becomes site ``slot`` (the core tells the
        members, who dial it)."""
        host = self.host
        conn = next((c for c in host.standbys if host.identity[c][2] == a.pid), None)
        if conn is None:
            return  # it died meanwhile: the members cannot reach it and report it
        host.standbys.remove(conn)
        now = time.time()
        failed_at = max((f["time"] for f in host.failures if f["site"] == a.slot), default=now)
        host.adoptions.append({"slot": a.slot, "registered_as": a.registered,
                               "attempt": a.attempt, "pid": a.pid, "time": now,
                               "after_s": round(now - failed_at, 3)})
        self.measure_standby_wait()
        host.identity[conn] = (a.slot, a.attempt, a.pid)
        host.conns[a.slot] = host.wan_link(conn, a.slot)
        host.stats.phase = f"recovering site {a.slot}"
        host.progress.note("adoption", a.slot, f"standby process {a.pid} adopted site "
                                               f"{a.slot} {now - failed_at:.2f} s after it "
                                               f"failed")
        conn.send(a.message)
        host.faults.adopted(a.slot)

    def _failed(self, dead: set[int]) -> None:
        """The view lost these sites: forget their connections and what waits for them."""
        host = self.host
        new = [s for s in dead if s in host.conns]
        now = time.time()
        reasons = {site: reason for _, site, reason in host.controller.failures}
        for s in new:
            host.outbox.drop(s)
            host.failures.append({"site": s, "time": now, "reason": reasons.get(s, "")})
            host.progress.note("failure", s, f"site {s} failed: {reasons.get(s, '') or 'lost'}")
            self._note_take_over(s)
            conn = host.conns.pop(s)
            # A live process that was excluded (cut off, hung, suspected) finds its driver
            # connections closed and ends its task with an error: Spark then starts the slot
            # a fresh process, which registers as a standby and adopts it, as after a crash.
            conn.close()
            host.control_of.get(conn, conn).close()

    def _retired(self, slots: tuple[int, ...]) -> None:
        """A rescale retired these slots (their copies moved off, ``stop`` sent): nothing
        more goes to them. Their processes end their tasks and close their connections."""
        host = self.host
        for s in slots:
            host.outbox.drop(s)
            host.conns.pop(s, None)
            host.progress.note("retired", s, f"site {s} retired: its copies moved to the "
                                             f"other sites")

    def _note_take_over(self, site: int) -> None:
        """Flux-HA's take-over of a failed site: its partitions' other copies, on the
        sites named, serve them at once (the failure's event says so; ``--ha none`` has none)."""
        layout = self.host.controller.layout
        if layout is None or (self.host.replicas or 1) < 2:
            return
        by: dict[int, int] = {}
        for q, r in layout.hosted(site).items():
            for other in layout.others(q, r):
                if other not in self.host.dead:
                    by[other] = by.get(other, 0) + 1
        if by:
            self.host.progress.note("take-over", site, f"site {site}'s partitions served by "
                                    f"their other copies on " + ", ".join(
                                        f"site {s} ({n})" for s, n in sorted(by.items())))

    def _note_catch_up(self, stage: int, q: int, r: int, survivor: int) -> None:
        """A catch-up's start, noted once per site being rebuilt (its first copy)."""
        layout = self.host.controller.layout
        if layout is None:
            return
        site = layout.site_of(q, r)
        if site not in self._catching_sites:
            self._catching_sites.add(site)
            self.host.progress.note("catch-up", site, f"catching up site {site} from its "
                                    f"partitions' surviving copies (first: stage {stage} "
                                    f"partition {q} from site {survivor})")

    def _deliver(self, d: Deliver) -> None:
        """The egress's output to each sink it belongs to, with its digests and counts (a
        sink that fails stops the run). Tentative rows and an episode's markers go to the
        sinks that take them (``Sink.tentative``) alone."""
        host = self.host
        now = time.time()
        if d.op != "insert":
            if d.op == "tentative":
                self._note_episode()
                host.metrics.tentative(d.batch, now)
            else:
                host.metrics.marker(d.op, now)
                if d.op == "rec_done":
                    host.progress.note("corrected", None, f"{self._episode_cause} is back: "
                                       "the tentative results are replaced by the stable "
                                       "ones")
                    self._tentative_noted = False
            self._ops(d.batch if d.op == "tentative" else None, d.op)
            return
        if d.batch.num_rows:
            for k, rows in host.plan.by_sink(d.batch):
                try:
                    if not (host.eventual and host.sinks[k].tentative):  # (``_ops`` does)
                        host.sinks[k].write(rows)
                except Exception as e:  # noqa: BLE001 - a sink that fails stops the run
                    host.abort(sink_failure(host.plan, k, host.sinks[k], "failed to write", e))
                    return
                host.digests[k].update(rows)
                host.rows_digests[k].update(rows)
                host.sink_rows[k] += rows.num_rows
            host.metrics.delivered(d.batch, now, d.correction, d.first)
            if trace.TRACE is not None:
                trace.TRACE.note("delivered", len(host.plan.stages), d.batch)
            host.stats.results_out = host.egress.delivered
            if host.eventual:
                self._ops(d.batch, "insert")
        host.completed.append((now, d.progress.sn))

    def _note_episode(self) -> None:
        """The first tentative rows of an episode: the live view says so, once."""
        if self._tentative_noted:
            return
        self._tentative_noted = True
        eps = self.host.core.episodes
        if eps is not None and not eps.input_failed:  # a merge waits, the input is whole
            self._episode_cause = "the silent upstream partition"
            self.host.progress.note(
                "tentative", None, "tentative results: a merge has waited the delay bound for "
                "an upstream partition it cannot hear (a network partition between sites)")
            return
        self._episode_cause = "the cut source"
        names = [self.host.plan.streams[j].name for j in sorted(eps.episode.failed)] \
            if eps is not None else []
        self.host.progress.note("tentative", None, "tentative results: "
                                + (f"source {', '.join(map(repr, names))} silent" if names
                                   else "a source is silent"))

    def _ops(self, batch: pa.RecordBatch | None, op: Op) -> None:
        """A delivery of ``--consistency eventual`` to the sinks that take every kind
        (``io/tentative_output.py``): rows marked ``op``, or the marker row of an ``undo`` or
        a ``rec_done``."""
        host = self.host
        for k, sink in enumerate(host.sinks):
            if not sink.tentative:
                continue
            schema = host.plan.sink_schema(k)
            parts = [None] if batch is None else [r for j, r in host.plan.by_sink(batch)
                                                  if j == k]
            for rows in parts:
                try:
                    sink.write_ops(with_op(rows, op, schema))
                except Exception as e:  # noqa: BLE001 - a sink that fails stops the run
                    host.abort(sink_failure(host.plan, k, sink, "failed to write", e))
                    return
        if host.tentative_out is not None:
            host.tentative_out.write_ops(with_op(batch, op, host.plan.output_schema))

    def _move(self, a: Move) -> None:
        """A move starts: its start time for the metrics, the phase for the display, and the
        kills timed inside it (``--kill ROLE@move+SECONDS``). The controller's record names
        the old copy's site (a move made before it breaks builds from ``NOWHERE``)."""
        host = self.host
        host.move_started[a.epoch] = time.time()
        if a.reason != "recovery":
            host.progress.note("move", a.dst, f"moving partition {a.q} to site {a.dst} "
                                              f"({a.reason})")
        rec = host.controller.moving.get(a.epoch)
        src = rec.src if rec is not None else a.src
        host.stats.phase = (
            f"moving partition {a.q} from site {src} to {a.dst}" if a.reason == "balance" else
            f"moving partition {a.q} off a shared failure domain, site {src} to {a.dst}"
            if a.reason == "domain" else f"recovering partition {a.q} onto site {a.dst}")
        if rec is not None and host.controller.layout is not None:
            host.faults.moving(src, a.dst, host.controller.layout.site_of(a.q, rec.survivor))

    def _caught_up(self, c: CaughtUp) -> None:
        """A replica's catch-up ended: recorded with its start, for the metrics."""
        now = time.time()
        start = self._catch_up_started.pop((c.stage, c.q), now)
        if c.site is not None:
            self.host.progress.caught_up(c.site)
        self.host.catch_ups.append({
            "stage": c.stage, "partition": c.q, "replica": c.r, "site": c.site,
            "state_bytes": c.nbytes, "move_s": c.move_s, "start": start, "end": now,
        })

    def _reject(self, rejected: list[Rejected]) -> None:
        """Input the ingress rejected to the dead letters, counted per kind of reason (what
        comes before its first colon)."""
        host = self.host
        if rejected:
            host.dead_letters.write(rejected)
            host.stats.dead_letters += len(rejected)
            for r in rejected:
                kind = r.reason.split(":", 1)[0]
                if kind not in host.dead_reasons:
                    host.dead_reasons[kind] = [0, r.reason]
                host.dead_reasons[kind][0] += 1
