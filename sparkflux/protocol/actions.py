"""Actions returned by the protocol cores, carried out by the runtime or the simulator."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sparkflux.model.progress import Progress


@dataclass(frozen=True, slots=True, kw_only=True)
class SendData:
    """Send rows (maybe none) of ``stage`` from ``producer`` to ``site`` with a progress marker."""

    site: int
    stage: int
    producer: int
    progress: Progress
    batch: pa.RecordBatch | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Deliver:
    """Hand rows to the sink, in SN order, exactly once."""

    batch: pa.RecordBatch
    progress: Progress
