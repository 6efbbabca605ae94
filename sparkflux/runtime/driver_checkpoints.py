"""The driver host's checkpoints (docs/checkpoints.md): the timer that asks the core for one
every ``--checkpoint-interval``, and the core's checkpoint actions carried out on the run's
snapshot store (``snapshots.py``): the sinks committed, the manifest written last (with the
records the sequencer held at the cut beside it), old checkpoints removed. What the core
decides (the cut, when the manifest is due, when one is given up) is in
``control/checkpoints.py``; this module does the I/O, never on the loop's critical path:
the store writes on its own thread and the loop hears back by ``call_soon_threadsafe``."""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sparkflux.control.checkpoints import (
    CheckpointDone,
    CheckpointGivenUp,
    CommitSinks,
    ManifestWritten,
    SinksCommitted,
    TakeCheckpoint,
    WriteManifest,
    checkpoint_dir,
)
from sparkflux.runtime.causes import cause, sink_failure
from sparkflux.runtime.snapshots import SnapshotStore

if TYPE_CHECKING:
    from sparkflux.runtime.driver import Host

log = logging.getLogger("sparkflux.runtime.driver")
HELD = "held-{stream}.arrow"  # beside a manifest: a stream's records the sequencer held


class Checkpointing:
    """The checkpoints of ``host``'s run, when it has a store (``--checkpoint``)."""

    def __init__(self, host: Host, store: SnapshotStore | None) -> None:
        self.host = host
        self.store = store
        self.taken: list[dict[str, Any]] = []  # each complete checkpoint: number, cut, times
        self.given_up: list[dict[str, Any]] = []
        self._begun: dict[int, float] = {}

    async def run(self) -> None:
        """Every ``--checkpoint-interval`` seconds while the input runs: a checkpoint asked
        of the core, between two admissions (this task runs on the loop, between them)."""
        host = self.host
        if self.store is None:
            return
        assert host.start_ingress is not None
        await host.start_ingress.wait()
        while True:
            await asyncio.sleep(host.cfg.checkpoint_interval)
            if host.input_state == "ended":
                return
            before = host.core.checkpoints.pending
            host.actions.carry_out(host.core.handle(TakeCheckpoint(
                now=time.monotonic(), sources=tuple(host.feed.positions()))))
            p = host.core.checkpoints.pending
            if p is not None and p is not before:
                self._begun[p.checkpoint] = time.monotonic()

    def carry_out(self, a: CommitSinks | WriteManifest | CheckpointDone | CheckpointGivenUp
                  ) -> None:
        match a:
            case CommitSinks():
                self._commit(a)
            case WriteManifest():
                self._write(a)
            case CheckpointDone():
                self._done(a)
            case CheckpointGivenUp(checkpoint=k, reason=reason):
                self.given_up.append({"checkpoint": k, "reason": reason})
                log.warning("checkpoint %d given up: %s", k, reason)

    def _commit(self, a: CommitSinks) -> None:
        """Every row at or below the cut is delivered: each sink makes them durable and says
        what a restart needs; the dead letters' length too."""
        host = self.host
        records: list[dict[str, Any]] = []
        for k, out in enumerate(host.sinks):
            try:
                records.append(out.commit(a.cut))
            except Exception as e:  # noqa: BLE001 - a sink that fails stops the run
                host.abort(sink_failure(host.plan, k, out, "failed to commit", e))
                return
        records.append({"dead_letters": host.dead_letters.commit()})
        host.actions.carry_out(host.core.handle(SinksCommitted(checkpoint=a.checkpoint,
                                                               sinks=tuple(records))))

    def _write(self, a: WriteManifest) -> None:
        """The sequencer's held records, then the manifest, on the store's thread (in that
        order: one thread); the core hears when the manifest is written."""
        assert self.store is not None and self.host._loop is not None
        loop = self.host._loop
        d = checkpoint_dir(a.checkpoint)
        for i, held in enumerate(a.held):
            if held:
                table = pa.Table.from_batches(list(held))
                self.store.put_arrow(f"{d}/{HELD.format(stream=i)}", table)
        manifest = dict(a.manifest)
        manifest["written_at"] = time.time()

        def written(f: Future[int]) -> None:
            e = f.exception()
            loop.call_soon_threadsafe(self._manifest_written, a.checkpoint,
                                      "" if e is None else cause(e))

        self.store.put_json(a.name, manifest).add_done_callback(written)

    def _manifest_written(self, checkpoint: int, error: str) -> None:
        host = self.host
        if host.finished is not None and host.finished.is_set():
            return
        host.actions.carry_out(host.core.handle(ManifestWritten(checkpoint=checkpoint,
                                                                error=error)))

    def _done(self, a: CheckpointDone) -> None:
        host = self.host
        began = self._begun.pop(a.checkpoint, None)
        took = time.monotonic() - began if began is not None else None
        self.taken.append({"checkpoint": a.checkpoint, "cut": a.cut,
                           "seconds": None if took is None else round(took, 3)})
        host.progress.note("checkpoint", None, f"checkpoint {a.checkpoint} complete: input up "
                           f"to record {a.cut + 1:,}" + (f" ({took:.2f} s)" if took else ""))
        assert self.store is not None
        for k in a.remove:
            self.store.delete_async(checkpoint_dir(k))
