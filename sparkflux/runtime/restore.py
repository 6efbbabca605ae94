"""A restart from a checkpoint (docs/checkpoints.md): the newest complete checkpoint in the
run's store found and checked against this run's dataflow, before anything starts.

A checkpoint is complete once its manifest exists (written last, atomically); a directory
without one is a checkpoint being written, or given up, when the driver died, and is
passed over. The manifest's dataflow fingerprint must equal this run's (the same stages,
operators, keys, schemas, partitions, sources and sinks; the sites may differ): a checkpoint
of another dataflow is refused with what differs, and the user is told to give the run a
checkpoint location of its own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkflux.control.checkpoints import (
    FORMAT,
    MANIFEST,
    differences,
    fingerprint,
)
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.errors import PlanError
from sparkflux.runtime.driver_checkpoints import HELD
from sparkflux.runtime.snapshots import SnapshotError, SnapshotStore


@dataclass(frozen=True)
class Restored:
    """The checkpoint a run goes on from: its manifest, and per stream the records the
    sequencer held at its cut (None: none)."""

    manifest: dict[str, Any]
    held: list[pa.RecordBatch | None]
    # the store's other checkpoints: complete ones (kept while the retention count allows)
    # and directories without a manifest (the dead run's last ones, removed)
    complete: tuple[int, ...] = ()
    incomplete: tuple[int, ...] = ()

    @property
    def checkpoint(self) -> int:
        return int(self.manifest["checkpoint"])

    @property
    def cut(self) -> int:
        return int(self.manifest["cut"])

    @property
    def sources(self) -> list[int]:
        """Each source's records handed over at the cut: where it resumes."""
        return [int(n) for n in self.manifest["driver"]["sources"]]

    def sink_record(self, k: int) -> dict[str, Any]:
        return dict(self.manifest["sinks"][k])

    @property
    def dead_letters(self) -> dict[str, Any]:
        return dict(self.manifest["sinks"][-1].get("dead_letters", {}))


def latest(store: SnapshotStore, plan: PhysicalPlan) -> Restored | None:
    """The newest complete checkpoint in ``store`` for ``plan``'s dataflow, or None when
    there is none (a first run). PlanError: a checkpoint of another dataflow, or one this
    version cannot read."""
    names = [n for n in store.list() if n.startswith("checkpoint-")
             and n[len("checkpoint-"):].isdigit()]
    done = {n for n in names if store.exists(f"{n}/{MANIFEST}")}
    number = {n: int(n[len("checkpoint-"):]) for n in names}
    for name in sorted(names, reverse=True):
        if name not in done:
            continue  # being written, or given up, when the run stopped
        try:
            manifest = store.get_json(f"{name}/{MANIFEST}")
        except SnapshotError as e:
            raise PlanError(f"the checkpoint at {store.uri} cannot be read: {e}") from None
        if manifest.get("format") != FORMAT:
            raise PlanError(f"the checkpoint {store.uri}/{name} has format "
                            f"{manifest.get('format')!r}, which this sparkflux does not read "
                            f"(it reads {FORMAT}); give the run a new checkpoint location")
        diff = differences(manifest.get("dataflow", {}), fingerprint(plan))
        if diff:
            shown = "\n  ".join(diff)
            raise PlanError(f"the checkpoint at {store.uri} is of another dataflow; what "
                            f"differs:\n  {shown}\nrun the dataflow that wrote it, or give this "
                            f"one a checkpoint location of its own")
        held: list[pa.RecordBatch | None] = []
        for i in range(len(plan.streams)):
            file = f"{name}/{HELD.format(stream=i)}"
            if store.exists(file):
                table = store.get_arrow(file).combine_chunks()
                held.append(table.to_batches()[0] if table.num_rows else None)
            else:
                held.append(None)
        return Restored(manifest, held,
                        complete=tuple(sorted(number[n] for n in done if n != name)),
                        incomplete=tuple(sorted(number[n] for n in names if n not in done)))
    return None
