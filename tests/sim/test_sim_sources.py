"""Several input streams in the deterministic simulator: a union of two sources with
different columns and interleaved event times, one of them shuffled within its allowed
lateness (``tiny_union_plan``), windowed per page.

- whatever order the two sources' batches reach the driver in (5 interleavings, 1 and 4
  sites, one and two replicas): nothing is rejected, the output is the same rows with the same
  sequence numbers in the same order, and equals a direct computation (``tiny_union_model``);
- one crash per seed with catch-up onto standbys, 200 seeds: the output equals the
  failure-free run;
- mutation: a sequencer that releases what it may in arrival order, not in event-time
  order, makes the output depend on the interleaving (caught by interleavings that pass
  unmutated).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.protocol.sequencer as sequencer_mod
from sparkflux.sim.run import FailurePlan, Violation, check, simulate
from sparkflux.sim.workload import (
    tiny_union_arrivals,
    tiny_union_model,
    tiny_union_plan,
    tiny_union_records,
)
from tests.support.seeds import seeds

from .test_sim_catchup import plan_for

COLUMNS = ["page", "window_start", "window_end", "events", "top_user"]
ORDERS = range(5)
CRASH_SEEDS = seeds(200)


@pytest.fixture(scope="module")
def records() -> tuple[pa.Table, pa.Table]:
    return tiny_union_records()


@pytest.fixture(scope="module")
def expected(records: Any) -> tuple[pa.Table, int]:
    res = simulate(tiny_union_plan(), tiny_union_arrivals(*records, 0), 0, FailurePlan())
    assert res.ended
    return res.output, res.steps


def rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*[table.column(c).to_pylist() for c in COLUMNS], strict=True))


@pytest.mark.parametrize(("sites", "replicas"), [(1, 1), (4, 1), (4, 2)])
@pytest.mark.parametrize("order", ORDERS)
def test_any_arrival_order_gives_one_output(records: Any, expected: Any, sites: int,
                                            replicas: int, order: int) -> None:
    views, clicks = records
    res = simulate(tiny_union_plan(sites=sites), tiny_union_arrivals(views, clicks, order),
                   order, FailurePlan(), replicas=replicas)
    assert res.ended and res.admitted == views.num_rows + clicks.num_rows  # none rejected
    assert rows(res.output) == tiny_union_model(views, clicks)
    assert res.output.equals(expected[0]), f"interleaving {order} changed the output"


@pytest.mark.parametrize("chunk", range(2))
def test_sources_survive_a_crash_and_catch_up(records: Any, expected: Any, chunk: int) -> None:
    out, steps = expected
    failed = []
    for seed in range(chunk * CRASH_SEEDS // 2, (chunk + 1) * CRASH_SEEDS // 2):
        fp, _ = plan_for(seed, steps)
        try:
            check(tiny_union_plan, tiny_union_arrivals(*records, seed), seed, fp, expected=out)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


@pytest.fixture
def arrival_order(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The mutant: what may go is released source by source, as it arrived."""
    def order(et: np.ndarray, stream: np.ndarray, pos: np.ndarray) -> np.ndarray:
        return np.lexsort((pos, stream))
    monkeypatch.setattr(sequencer_mod, "merged_order", order)
    yield


def test_mutation_release_in_arrival_order_is_caught(records: Any, expected: Any,
                                                     arrival_order: None) -> None:
    outputs = [simulate(tiny_union_plan(), tiny_union_arrivals(*records, order), order,
                        FailurePlan()).output for order in ORDERS]
    assert any(not o.equals(expected[0]) for o in outputs)
