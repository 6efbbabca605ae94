"""The driver's death in the simulator (docs/design.md §9): a run that takes checkpoints is
stopped whole at chosen steps (the driver dies and every site with it, fail-stop), then run
again from its newest complete checkpoint, as ``sparkflux run`` run again with the same
``--checkpoint`` does, until one incarnation ends.

The output a sink keeps is what a ``TableSink`` keeps: every incarnation's rows up to the
cut its successor restarts from (committed before that checkpoint was complete), and the
last one's rows after it. ``run`` returns that output and the incarnations' results; the
contract is that it equals a failure-free run's, row for row, in order, with no duplicate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from sparkflux.control.checkpoints import MANIFEST
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.schema import SN
from sparkflux.sim.run import FailurePlan, SimResult, simulate


@dataclass
class Incarnations:
    """What a run with driver crashes left: the sink's output, each incarnation's result,
    and the cut each restart went on from (-1: from the start, no checkpoint yet)."""

    output: pa.Table
    results: list[SimResult] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)


def newest(store: dict[str, Any]) -> tuple[dict[str, Any], list[Any]] | None:
    """The newest complete checkpoint in ``store`` (its manifest and held records)."""
    names = sorted(n for n in store if n.endswith("/" + MANIFEST))
    return store[names[-1]] if names else None


def resumed(batches: list[Any], positions: list[int]) -> list[Any]:
    """The input after each source's position: its first ``positions[k]`` records
    dropped (a source resumed by ``Source.batches_from``)."""
    skip = list(positions)
    out: list[Any] = []
    for item in batches:
        k, b = item if isinstance(item, tuple) else (0, item)
        if skip[k] >= b.num_rows:
            skip[k] -= b.num_rows
            continue
        if skip[k]:
            b, skip[k] = b.slice(skip[k]), 0
        out.append((k, b) if isinstance(item, tuple) else b)
    return out


def run(plan_factory: Callable[[], PhysicalPlan], batches: list[Any], seed: int,
        crashes: list[int], checkpoint_every: int, failures: FailurePlan | None = None,
        **kw: Any) -> Incarnations:
    """Run with the driver killed at step ``crashes[i]`` of incarnation ``i`` (its site
    ``failures`` in the first only), each restarted from the store's newest complete
    checkpoint."""
    store: dict[str, Any] = {}
    restore: tuple[dict[str, Any], list[Any]] | None = None
    kept: list[pa.Table] = []
    done = Incarnations(pa.table({}))
    cut = -1
    for i, crash in enumerate([*crashes, None]):
        rest = batches if restore is None else resumed(
            batches, [int(n) for n in restore[0]["driver"]["sources"]])
        res = simulate(plan_factory(), rest, seed * 1009 + i,
                       failures if i == 0 and failures else FailurePlan(), driver_crash=crash,
                       checkpoint_every=checkpoint_every, restore=restore, store=store, **kw)
        done.results.append(res)
        if not res.driver_crashed:
            kept.append(res.output)
            break
        restore = newest(store)
        new_cut = -1 if restore is None else int(restore[0]["cut"])
        if new_cut < 0:
            kept = []  # no checkpoint yet: the rerun writes the output from the start
        else:
            sn = res.output.column(SN)
            kept.append(res.output.filter(pc.and_(pc.greater(sn, cut),
                                                  pc.less_equal(sn, new_cut))))
        cut = max(cut, new_cut)
        done.restarts.append(new_cut)
    schema = done.results[-1].output.schema
    done.output = pa.concat_tables([t.cast(schema) for t in kept]) if kept else \
        schema.empty_table()
    return done

