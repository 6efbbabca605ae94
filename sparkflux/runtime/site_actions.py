"""The site host's hands: every action of the site's core (``protocol/site_boundary.py``)
carried out on the host's connections, its DTSB, its StateMover and its scheduler, in the
order the core gave them. A frame goes by the channel the core gave it: a report on the
control connection, a snapshot or ``installed`` to the StateMover, every other frame
through the DTSB (``outbox.py``)."""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING

import pyarrow as pa

from sparkflux.control.checkpoints import part_name
from sparkflux.model.batch import concat
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.channels import Channel
from sparkflux.protocol.messages import (
    SPILL,
    Installed,
    LoadPartition,
    SpillInput,
    State,
    StoredPartition,
)
from sparkflux.protocol.site_boundary import (
    Close,
    Crash,
    Dial,
    DriverLost,
    Loaded,
    Reject,
    Scale,
    Send,
    SiteBoundaryAction,
    Spilled,
    Stop,
)
from sparkflux.runtime.snapshots import SnapshotStore
from sparkflux.runtime.transport import ConnectionLost

if TYPE_CHECKING:
    from sparkflux.runtime.site import Site


def spill_name(stage: int, q: int) -> str:
    """A spilled partition's file in its site's spill store (each spill replaces it)."""
    return f"spill-{stage}-{q}.arrow"


def spill_input_name(stage: int, q: int, n: int) -> str:
    """The ``n``-th batch of input a spilled partition received while on disk (the next
    spill of its state starts again at 0)."""
    return f"spill-{stage}-{q}-input-{n}.arrow"


class Actions:
    """Carries out the core's actions for ``host``: sends, dials and links dropped (through
    its ``door``), ``--slow``, ``--kill`` and the site's stop."""

    def __init__(self, host: Site) -> None:
        self.host = host
        # per spilled (stage, q): how many batches of its input are on disk beside it
        self._inputs: dict[tuple[int, int], int] = {}

    def carry_out(self, actions: list[SiteBoundaryAction]) -> None:
        """The boundary's actions carried out, in order: the host's whole part of the
        protocol."""
        host = self.host
        for a in actions:
            match a:
                case Send(dest=dest, message=msg, channel=Channel.CONTROL):
                    # a site's reports to the controller: controller messages only
                    assert isinstance(msg, cm.CONTROL_TYPES)
                    self._report(msg)
                case Send(message=LoadPartition() as msg):
                    self._load(msg)
                case Send(message=StoredPartition() as msg) if msg.checkpoint == SPILL:
                    self._spill(msg)
                case Send(message=SpillInput() as msg):
                    self._spill_input(msg)
                case Send(message=msg, channel=Channel.STORE):
                    assert isinstance(msg, StoredPartition)  # a checkpoint's part
                    self._store(msg)
                case Send(dest=dest, message=msg, channel=Channel.STATE):
                    assert isinstance(msg, (State, Installed))  # the STATE channel's two
                    self._state_out(dest, msg)
                case Send(dest=dest, message=msg):
                    host.outbox.send(dest, msg)
                case Dial():
                    host.door.dial(a)
                case Close(site=s):
                    host.door.cancel_dial(s)  # e.g. a standby that died right after its adoption
                    host.outbox.drop(s)  # frames held for the failed incarnation
                    c = host.peers.pop(s, None)
                    if c is not None:
                        c.close()
                    for c in host.state_in.pop(s, []):  # a zombie's late state or installed
                        c.close()
                case Scale(factor=factor):  # --slow SITE@SECONDS=FACTOR
                    host.scheduler.scale(factor)
                case Crash():
                    # A real crash on request (clusters, where the driver cannot signal it).
                    os.kill(os.getpid(), signal.SIGKILL)
                case Stop(reason=reason, how=how):
                    host.stop(reason, how)
                case Reject():
                    pass  # handled where the link was offered (``Door.offer``)
        host.door.known.set()

    def _report(self, msg: cm.ControlMessage) -> None:
        """A report to the controller on the control connection (lost: the core's
        ``DriverLost``)."""
        host = self.host
        try:
            assert host.control is not None
            host.control.send(msg)
        except ConnectionLost as e:
            host.handle(DriverLost(reason=str(e) or "the control connection closed"))

    def _store(self, part: StoredPartition) -> None:
        """A checkpoint's part to the run's snapshot store, written on the store's thread
        (this loop goes on); the driver hears when it is written, or why it was not."""
        host = self.host
        name = part_name(part.checkpoint, part.stage, part.q)

        def report(nbytes: int, error: str) -> None:
            self._report(cm.PartStored(site=host.id, checkpoint=part.checkpoint,
                                       stage=part.stage, q=part.q, name=name, nbytes=nbytes,
                                       error=error))

        if host.cfg.checkpoint is None:  # a bug: the driver cuts only with a store
            report(0, "this site has no checkpoint store")
            return
        if host.store is None:
            host.store = SnapshotStore(host.cfg.checkpoint)
        loop = asyncio.get_running_loop()

        def done(f: Future[int]) -> None:
            e = f.exception()
            loop.call_soon_threadsafe(report, 0 if e else f.result(),
                                      f"{type(e).__name__}: {e}" if e else "")

        host.store.put(name, part).add_done_callback(done)

    def _spill_store(self) -> SnapshotStore:
        """This process's spill store: a directory of its own under the executor's local
        directories (Spark's ``SPARK_LOCAL_DIRS``, else the temporary directory)."""
        host = self.host
        if host.spill_store is None:
            base = (os.environ.get("SPARK_LOCAL_DIRS") or tempfile.gettempdir()).split(",")[0]
            root = tempfile.mkdtemp(prefix=f"sparkflux-spill-{host.id}-", dir=base)
            host.spill_store = SnapshotStore(root)
        return host.spill_store

    def _spill(self, part: StoredPartition) -> None:
        """A partition to disk on the store's thread; the core hears when it is written
        (its bytes are free then). A write that fails stops the site with the error: the
        state is not in memory any more."""
        host = self.host
        loop = asyncio.get_running_loop()
        done = Spilled(stage=part.stage, q=part.q)

        def written(f: Future[int]) -> None:
            e = f.exception()
            if e is not None:
                loop.call_soon_threadsafe(host.report_error, f"site {host.id} could not spill "
                                          f"partition {part.q} of stage {part.stage}: {e}")
            else:
                loop.call_soon_threadsafe(host.handle, done)

        self._inputs[(part.stage, part.q)] = 0
        self._spill_store().put_owned(spill_name(part.stage, part.q), part).add_done_callback(
            written)

    def _spill_input(self, msg: SpillInput) -> None:
        """Rows of a spilled partition to disk beside it, on the store's thread, in order
        with its state's write and its load. A write that fails stops the site with the
        error: the rows are not in memory any more."""
        host = self.host
        loop = asyncio.get_running_loop()
        n = self._inputs.get((msg.stage, msg.q), 0)
        self._inputs[(msg.stage, msg.q)] = n + 1

        def written(f: Future[int]) -> None:
            e = f.exception()
            if e is not None:
                loop.call_soon_threadsafe(host.report_error, f"site {host.id} could not spill "
                                          f"the input of partition {msg.q} of stage "
                                          f"{msg.stage}: {e}")

        self._spill_store().put_arrow_owned(spill_input_name(msg.stage, msg.q, n), msg.rows) \
            .add_done_callback(written)

    def _load(self, msg: LoadPartition) -> None:
        """A spilled partition read back on the store's thread (after its writes) with the
        input it received while on disk, handed to the core."""
        host = self.host
        loop = asyncio.get_running_loop()
        inputs = [spill_input_name(msg.stage, msg.q, n)
                  for n in range(self._inputs.pop((msg.stage, msg.q), 0))]

        def read(f: Future[tuple[StoredPartition, list[pa.Table]]]) -> None:
            e = f.exception()
            if e is not None:
                loop.call_soon_threadsafe(host.report_error, f"site {host.id} could not load "
                                          f"partition {msg.q} of stage {msg.stage}: {e}")
                return
            part, tables = f.result()
            snap = part.snapshot
            if tables:
                rows = concat([b for t in tables for b in t.to_batches()], tables[0].schema)
                snap = replace(snap, cons=replace(snap.cons, pending=rows))
            loop.call_soon_threadsafe(host.memory_step, Loaded(
                stage=msg.stage, q=msg.q, snapshot=snap, now=time.monotonic(), seq=msg.seq))

        self._spill_store().get_with_tables_async(spill_name(msg.stage, msg.q), inputs) \
            .add_done_callback(read)

    def _state_out(self, site: int, msg: State | Installed) -> None:
        """A snapshot or ``installed``: outside the data path, by the StateMover."""
        host = self.host
        member = host.boundary.members.get(site)
        expect = host.boundary.process_of(site)
        if member is None or expect is None:  # a bug: the catch-up would wait forever
            host.report_error(f"the StateMover has no address for site {site}")
            return
        host.mover.send(site, msg, (member.host, member.port), expect)
