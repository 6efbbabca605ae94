"""Routing across an exchange: key -> mini-partition -> site (the Ex-Prod's route function).

The partition of a row is ``hash(key columns) mod P`` (``sparkflux.model.keys``), the same in
every process; its site is ``PhysicalPlan.site_of(part)``.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkflux.dataflow.plan import PhysicalPlan, StagePlan
from sparkflux.model.batch import empty
from sparkflux.model.keys import partition_of
from sparkflux.model.schema import PART


class Router:
    """Splits a stage's output by the next stage's key into per-site batches (with ``_part``)."""

    def __init__(self, plan: PhysicalPlan, next_stage: StagePlan) -> None:
        self.key = list(next_stage.key)
        self.partitions = plan.partitions
        self.sites = plan.sites
        self.schema = next_stage.input_schema
        self._part_index = self.schema.get_field_index(PART)

    def route(self, batch: pa.RecordBatch) -> dict[int, pa.RecordBatch]:
        """Rows per destination site, each in SN order, ``_part`` set to the mini-partition."""
        if batch.num_rows == 0:
            return {}
        parts = partition_of(batch, self.key, self.partitions)
        idx = batch.schema.get_field_index(PART)
        col = pa.array(parts, type=pa.int32())
        if idx >= 0:
            batch = batch.set_column(idx, PART, col)
        else:
            batch = batch.append_column(pa.field(PART, pa.int32(), nullable=False), col)
        if not batch.schema.equals(self.schema):
            batch = conform(batch, self.schema)
        dest = parts % self.sites  # PhysicalPlan.site_of
        order = np.argsort(dest, kind="stable")
        sorted_dest = dest[order]
        bounds = np.searchsorted(sorted_dest, np.arange(self.sites + 1))
        taken = batch.take(pa.array(order)) if self.sites > 1 else batch
        out = {}
        for site in range(self.sites):
            lo, hi = int(bounds[site]), int(bounds[site + 1])
            if hi > lo:
                out[site] = taken.slice(lo, hi - lo)
        return out

    def empty(self) -> pa.RecordBatch:
        return empty(self.schema)


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` relabelled with ``schema`` (same columns; nullability may differ)."""
    if batch.schema.names != schema.names:
        raise ValueError(
            f"batch columns {batch.schema.names} do not match the plan's {schema.names}"
        )
    return pa.RecordBatch.from_arrays(batch.columns, schema=schema)
