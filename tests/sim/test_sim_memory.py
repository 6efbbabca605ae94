"""Spilling under a memory budget in the deterministic simulator (``protocol/memory.py``;
docs/memory.md): the tiny two-stage workload (4 sites, 8 partitions, windowed state in the
second stage) with every site's budget a few hundred to a few thousand bytes, so that whole
partitions go to disk and come back in turn (local round robin with t_gap) all run long, each
write and read taking a random number of steps; for half the seeds one site's budget is cut
to almost nothing mid-run (``--squeeze``), and for half a site crashes and a standby is
caught up from copies that may be on disk (for a quarter of those, the survivor crashes
next, so that the copies caught up from it serve). Every seed's output equals the
failure-free run's, row for row; with the balancing rounds on, the hybrid policy moves
copies off the sites short of memory among all of it. Spilled partitions' input goes to disk beside
them and comes back with their load. Mutants: a load that drops the partition's pending
input, a load that leaves the input it had on disk there, input that goes to disk for the
partition whose load has read the disk already, a catch-up that snapshots a partition on
disk without loading it, and a spill that lets the partition's merge go on without its
state, each caught by a seed that passes unmutated. The schedules run with racing copies too."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.model.digest import digest_of
from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.protocol.site import SiteCore
from sparkflux.sim.run import FailurePlan, SimResult, Violation, simulate
from sparkflux.sim.workload import tiny_plan
from tests.support import tiny_runs
from tests.support.seeds import seeds
from tests.support.tiny_runs import Baseline, chunk_of, tiny_baseline

pytestmark = pytest.mark.usefixtures("quiet_log")

SEEDS, CHUNKS = seeds(120), 2
MUTATION_SEEDS = 40
EVENTS = 1200


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    return tiny_baseline(EVENTS)


def schedule(seed: int, steps: int) -> FailurePlan:
    rng = np.random.default_rng(seed)
    squeezes: tuple[tuple[int, int, int], ...] = ()
    crashes: tuple[tuple[int, int], ...] = ()
    standbys: tuple[int, ...] = ()
    if seed % 2:
        squeezes = ((int(rng.integers(0, 4)), int(rng.integers(1, steps)), 50),)
    after: tuple[tuple[int, int], ...] = ()
    if seed % 4 >= 2:
        at = int(rng.integers(steps // 10, steps))
        site = int(rng.integers(0, 4))
        crashes = ((site, at),)
        standbys = (at + int(rng.integers(1, 80)),)
        if seed % 8 >= 6:  # then its neighbour, a survivor, once the first recovery is done:
            # the copies caught up from it serve their partitions from then on
            after = (((site + 1) % 4, int(rng.integers(1, 60))),)
            standbys += (at + int(rng.integers(100, 400)),)
    return FailurePlan(budget=int(rng.integers(300, 3000)), squeezes=squeezes,
                       crashes=crashes, standbys=standbys, after_recovery=after,
                       memory_every=int(rng.integers(1, 10)),
                       io_delay=(1, int(rng.integers(2, 40))))


def run_seed(base: Baseline, seed: int, balance: bool = False, race: bool = False
             ) -> SimResult:
    failures = schedule(seed, base.steps)
    where = (f"seed {seed}{' with the hybrid policy' if balance else ''}"
             f"{' with racing copies' if race else ''}: {failures}")
    plan, _ = tiny_plan(events=EVENTS)
    try:  # (a run takes 1-3 thousand steps: one that never ends is cut short)
        res = simulate(plan, base.batches, seed, failures, max_steps=40 * base.steps,
                       balance=balance, race=race)
    except Violation as e:
        raise AssertionError(f"{where}: {e}") from e
    out = res.output
    if not res.ended:
        raise AssertionError(f"{where}: the output did not end ({res.steps} steps)")
    if out.num_rows != base.output.num_rows or digest_of(out) != digest_of(base.output):
        raise AssertionError(f"{where}: output differs from the failure-free run "
                             f"({out.num_rows} rows vs {base.output.num_rows})")
    return res


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_spilling_in_turn_through_squeezes_and_crashes_keeps_the_output_exact(
        baseline: Baseline, chunk: int) -> None:
    seeds_ = chunk_of(SEEDS, CHUNKS, chunk)
    failed, spills, inputs, crashed = [], 0, 0, 0
    for seed in seeds_:
        try:
            res = run_seed(baseline, seed)
        except AssertionError as e:
            failed.append(str(e))
            continue
        spills += res.spills
        inputs += res.input_spills
        crashed += bool(res.crashed)
    assert not failed, f"{len(failed)} failing seed(s):\n" + "\n".join(failed[:5])
    # not vacuous: partitions went to disk in every seed, many times; crashes happened
    assert spills >= 10 * len(seeds_), spills
    assert inputs >= len(seeds_), inputs  # spilled partitions' input went to disk too
    assert crashed >= len(seeds_) // 4 - 1


def test_the_hybrid_policy_moves_partitions_off_sites_short_of_memory(
        baseline: Baseline) -> None:
    """The same schedules with the balancing rounds on (the hybrid policy,
    ``control/memory_policy.py``): the memory policy moves copies off sites short of memory,
    among spills, loads, squeezes and crashes, and the output stays exact."""
    failed, memory_moves = [], 0
    for seed in range(SEEDS // 4):
        try:
            res = run_seed(baseline, seed, balance=True)
        except AssertionError as e:
            failed.append(str(e))
            continue
        memory_moves += res.move_reasons.count("memory")
    assert not failed, f"{len(failed)} failing seed(s):\n" + "\n".join(failed[:5])
    assert memory_moves >= SEEDS // 8, memory_moves


def test_racing_copies_spill_in_turn_through_squeezes_and_crashes(baseline: Baseline) -> None:
    """The same schedules with racing copies (``--ha race``), the hybrid policy on for every
    other seed: every copy of a partition spills on its own site's budget, and the copies
    feeding it hold what it has not acknowledged, on disk or not."""
    failed, spills = [], 0
    for seed in range(SEEDS // 2):
        try:
            res = run_seed(baseline, seed, balance=bool(seed % 3 == 0), race=True)
        except AssertionError as e:
            failed.append(str(e))
            continue
        spills += res.spills
    assert not failed, f"{len(failed)} failing seed(s):\n" + "\n".join(failed[:5])
    assert spills >= 10 * (SEEDS // 2), spills


def caught(monkeypatch: pytest.MonkeyPatch, base: Baseline, symptom: str, name: str) -> None:
    tiny_runs.caught(monkeypatch, run_seed, base, MUTATION_SEEDS, symptom, name)


def test_mutation_a_load_drops_the_pending_input(monkeypatch: pytest.MonkeyPatch,
                                                 baseline: Baseline) -> None:
    """The partition comes back without the rows it received while on disk."""
    real = SiteCore.spill_loaded

    def dropping(self: SiteCore, s: int, q: int, snapshot: Any, now: float,
                 seq: int = 0) -> Any:
        cons = self.cons[s]
        cons.pending = [b.filter(pa.array(b.column("_part").to_numpy() != q))
                        for b in cons.pending]
        cons._lowest = {}
        return real(self, s, q, snapshot, now, seq)

    monkeypatch.setattr(SiteCore, "spill_loaded", dropping)
    caught(monkeypatch, baseline, "seed", "a load drops the pending input")


def test_mutation_a_load_leaves_the_input_it_had_on_disk(monkeypatch: pytest.MonkeyPatch,
                                                          baseline: Baseline) -> None:
    """The partition comes back with its state but not the rows that went to disk beside
    it while it was there."""
    monkeypatch.setattr(ConsumerSet, "put_pending", lambda self, rows: None)
    caught(monkeypatch, baseline, "seed", "a load leaves the input it had on disk")


def test_mutation_input_goes_to_disk_for_the_partition_being_loaded(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """Rows of the partition whose load is under way go to disk too: the load has read the
    disk already, so they stay there."""
    real_tick = SiteCore._spill_input

    def with_loading(self: SiteCore) -> Any:
        m = self.memory
        if m.loading is None:
            return real_tick(self)
        m.spilled[m.loading] = 0  # as if it were still on disk
        try:
            return real_tick(self)
        finally:
            del m.spilled[m.loading]

    monkeypatch.setattr(SiteCore, "_spill_input", with_loading)
    caught(monkeypatch, baseline, "seed", "input goes to disk for the partition being loaded")


def test_mutation_a_catch_up_snapshots_a_partition_on_disk(monkeypatch: pytest.MonkeyPatch,
                                                          baseline: Baseline) -> None:
    """The survivor's snapshot of a spilled partition is taken at once: its operators hold
    nothing of it then, so the new copy starts empty."""
    monkeypatch.setattr(SiteCore, "_on_disk", lambda self, k: False)
    caught(monkeypatch, baseline, "seed", "a catch-up snapshots a partition on disk")


def test_mutation_a_spilled_partition_goes_on_without_its_state(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """The merge of a partition on disk is not held: its input is processed without its
    operators' state."""
    monkeypatch.setattr(SiteCore, "_held_on_disk", lambda self, s: None)
    caught(monkeypatch, baseline, "seed", "a spilled partition goes on without its state")
