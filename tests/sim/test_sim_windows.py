"""Windowed operators on many sites, in the deterministic simulator.

``tiny_windows_plan`` chains two event-time window aggregates (a count per key over sliding
windows, then the largest count per window): the shape that hung on more than one site (each
operator was handed the minimum progress over every partition, the unhosted ones included,
which never move) and that gave run-to-run different output (the first aggregate passed its
input watermark on while it still held windows back, so the second closed windows early).

- on 1 and 4 sites, one and two replicas, the output equals a direct computation of the two
  windows (``tiny_windows_model``), and every seed gives the same rows in the same order;
- one crash per seed, with catch-up onto standbys (the window state moves per partition):
  the output equals the failure-free run, 200 seeds;
- a global top with ties (``exchange(by=[])``, then ``WindowTopK(by=[], ties=True)``) equals
  its model on 1 and 4 sites, and through crashes;
- mutations: the old shell (one progress for all partitions) never ends on 4 sites; the old
  operator (the input watermark passed on) gives other rows; each is caught by a seed that
  passes unmutated.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import sparkflux.protocol.site as site_mod
from sparkflux.dataflow.api import Dataflow
from sparkflux.dataflow.compiler import compile_plan
from sparkflux.model.progress import Frontier
from sparkflux.operators.time_window import TimeWindowAggregate
from sparkflux.operators.topk import WindowTopK
from sparkflux.sim.run import FailurePlan, SimResult, Violation, check, simulate
from sparkflux.sim.workload import (
    HOT_SIZE,
    HOT_SLIDE,
    TinySessions,
    tiny_windows_model,
    tiny_windows_plan,
)
from tests.support.seeds import seeds

from .test_sim_catchup import plan_for

COLUMNS = ["app", "top_start", "top_end", "top", "windows"]
# Input batches admitted ahead of the output: all of them. An open window holds the SN
# frontier of every stage after it, so output waits on input no flow control may hold back.
WINDOW = 100
CRASH_SEEDS, CHUNKS = seeds(200), 4


def rows(res: SimResult) -> list[tuple]:
    return sorted(zip(*[res.output.column(c).to_pylist() for c in COLUMNS], strict=True))


@pytest.fixture(scope="module")
def reference() -> tuple[list[pa.RecordBatch], list[tuple], pa.Table, int]:
    plan, batches = tiny_windows_plan(sites=4)
    res = simulate(plan, batches, 0, FailurePlan(), replicas=2, window=WINDOW)
    assert res.ended
    return batches, tiny_windows_model(batches), res.output, res.steps


@pytest.mark.parametrize(("sites", "replicas"), [(1, 1), (4, 1), (4, 2)])
@pytest.mark.parametrize("seed", range(3))
def test_chained_windows_equal_the_model(reference: Any, sites: int, replicas: int,
                                         seed: int) -> None:
    batches, model, expected, _ = reference
    plan, _ = tiny_windows_plan(sites=sites)
    res = simulate(plan, batches, seed, FailurePlan(), replicas=replicas, window=WINDOW)
    assert res.ended, f"{sites} sites, seed {seed}: the output never ended"
    assert len(model) > 100 and rows(res) == model
    assert res.output.equals(expected), "the rows or their order depend on sites or seed"


@pytest.mark.parametrize("seed", range(3))
def test_small_batches_equal_the_model(seed: int) -> None:
    """Batches of 10 events: claims far apart from one partition to the next."""
    plan, batches = tiny_windows_plan(sites=4, batch=10)
    res = simulate(plan, batches, seed, FailurePlan(), replicas=1, window=WINDOW)
    assert res.ended and rows(res) == tiny_windows_model(batches)


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_chained_windows_survive_a_crash_and_catch_up(reference: Any, chunk: int) -> None:
    batches, _, expected, steps = reference
    size = CRASH_SEEDS // CHUNKS
    failed = []
    for seed in range(chunk * size, (chunk + 1) * size):
        fp, _ = plan_for(seed, steps)
        try:
            check(lambda: tiny_windows_plan(sites=4)[0], batches, seed, fp, expected=expected,
                  window=WINDOW)
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])


# -- mutations ---------------------------------------------------------------------------------
@pytest.fixture
def one_progress_for_all(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The old shell: every operator sees the minimum over all P partitions."""
    def frontier(sn: np.ndarray, wm: np.ndarray) -> Frontier:
        return Frontier(np.full_like(sn, sn.min()), np.full_like(wm, wm.min()))
    monkeypatch.setattr(site_mod, "Frontier", frontier)
    yield


def test_mutation_one_progress_for_all_partitions_hangs(reference: Any,
                                                        one_progress_for_all: None) -> None:
    batches, _, _, _ = reference
    plan, _ = tiny_windows_plan(sites=4)
    res = simulate(plan, batches, 0, FailurePlan(), replicas=1, max_steps=20_000,
                   window=WINDOW)
    assert not res.ended


@pytest.fixture
def watermark_passed_on(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The old operator: it claims the input watermark while it holds windows back."""
    advance = TimeWindowAggregate.advance

    def mutant(self: TimeWindowAggregate, frontier: Frontier) -> Any:
        out, claimed = advance(self, frontier)
        return out, Frontier(claimed.sn, frontier.wm)
    monkeypatch.setattr(TimeWindowAggregate, "advance", mutant)
    yield


def test_mutation_watermark_passed_on_gives_other_rows(watermark_passed_on: None) -> None:
    caught = []
    for seed in range(3):  # the seeds test_small_batches_equal_the_model passes
        plan, batches = tiny_windows_plan(sites=4, batch=10)
        res = simulate(plan, batches, seed, FailurePlan(), replicas=1, window=WINDOW)
        if rows(res) != tiny_windows_model(batches):
            caught.append(seed)
    assert caught, "the early-closing second window went unnoticed"


# -- a global top with ties, through exchange(by=[]) ---------------------------------------------
def global_top_plan(sites: int = 4) -> tuple[Any, list[pa.RecordBatch]]:
    """The hot-items shape with one window aggregate: a count per (src, app) over sliding
    windows, then, through ``exchange(by=[])`` (every row to partition 0), every count tied
    for the largest of its window (``WindowTopK(by=[], ties=True)``)."""
    src = TinySessions(400, 40, 1)
    df = Dataflow("global_top")
    (df.source(src, name="events")
       .exchange(by=["src"])
       .apply(TimeWindowAggregate(by=["src", "app"], time="ts", size=HOT_SIZE, slide=HOT_SLIDE,
                                  aggs={"n": "count"}), name="hot")
       .exchange(by=[])
       .apply(WindowTopK(by=[], time="window_start", size=HOT_SLIDE, order=[("n", "desc")],
                         ties=True, names=("top_start", "top_end")), name="top")
       .sink())
    return compile_plan(df, 8, sites), list(src.batches())


def global_top_model(batches: list[pa.RecordBatch]) -> list[tuple]:
    """(src, app, window_start, n) of every count equal to its window's largest, sorted."""
    counts: dict[tuple[int, int, int], int] = {}
    for r in pa.Table.from_batches(batches).to_pylist():
        start = r["ts"] // HOT_SLIDE * HOT_SLIDE
        while start > r["ts"] - HOT_SIZE:
            counts[(r["src"], r["app"], start)] = counts.get((r["src"], r["app"], start), 0) + 1
            start -= HOT_SLIDE
    top: dict[int, int] = {}
    for (_, _, start), n in counts.items():
        top[start] = max(top.get(start, 0), n)
    return sorted((s, a, start, n) for (s, a, start), n in counts.items() if n == top[start])


def global_rows(res: SimResult) -> list[tuple]:
    out = res.output
    return sorted(zip(*(out.column(c).to_pylist() for c in ("src", "app", "window_start", "n")),
                      strict=True))


@pytest.mark.parametrize(("sites", "replicas"), [(1, 1), (4, 2)])
def test_a_global_top_with_ties_equals_the_model(sites: int, replicas: int) -> None:
    plan, batches = global_top_plan(sites)
    assert [s.key for s in plan.stages] == [("src",), ()]
    model = global_top_model(batches)
    assert len(model) > len({start for _, _, start, _ in model}) > 10  # ties, many windows
    for seed in range(2):
        res = simulate(plan, batches, seed, FailurePlan(), replicas=replicas, window=WINDOW)
        assert res.ended and global_rows(res) == model
        assert set(res.output.column("_part").to_pylist()) == {0}


def test_a_global_top_survives_crashes() -> None:
    plan, batches = global_top_plan(4)
    base = simulate(plan, batches, 0, FailurePlan(), replicas=2, window=WINDOW)
    for seed in range(4):
        fp, _ = plan_for(seed, base.steps)
        res = check(lambda: global_top_plan(4)[0], batches, seed, fp, expected=base.output,
                    window=WINDOW)
        assert res.crashed and global_rows(res) == global_top_model(batches)
