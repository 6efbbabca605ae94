"""Rescaling a running query in the deterministic simulator (``control/rescale.py``,
docs/design.md §9): the tiny two-stage workload (4 sites, 8 partitions, windowed state in the
second stage) grows to 5 or 6 sites while its input flows (the new site tasks start after a
random delay, register as standbys and adopt the slots the grow opened; the copies then move
by make-before-break moves), then shrinks to 2 or 3 (the copies move off the highest slots,
which then leave). For half the seeds a site crashes at a random step, a standby comes for
it, and the rescales go on around its recovery. Every seed's output equals the failure-free
run's, row for row, with no duplicate; both rescales end with the placement spread over the
target sites, two copies of every partition on distinct live sites, and the surplus slots
retired. Mutants: sites that do not learn of a grown slot, and a shrink that retires its
slots before their copies have moved, each caught by a seed that passes unmutated."""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.control.events import Action
from sparkflux.control.membership import Slot, SlotEv
from sparkflux.control.rescale import RescaleRecord
from sparkflux.control.rescaling import Rescaling
from sparkflux.dataflow.placement import Layout
from sparkflux.model.compare import duplicate_rows
from sparkflux.model.digest import digest_of
from sparkflux.sim.run import FailurePlan, SimResult, Violation, simulate
from sparkflux.sim.workload import tiny_plan
from tests.support import tiny_runs
from tests.support.seeds import seeds
from tests.support.tiny_runs import Baseline, chunk_of, tiny_baseline

pytestmark = pytest.mark.usefixtures("quiet_log")

SEEDS, CHUNKS = seeds(48), 2
MUTATION_SEEDS = 20
EVENTS = 1200


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    return tiny_baseline(EVENTS)


def schedule(seed: int, steps: int) -> tuple[int, int, FailurePlan]:
    rng = np.random.default_rng(seed)
    grow, shrink = int(rng.integers(5, 7)), int(rng.integers(2, 4))
    crashes: tuple[tuple[int, int], ...] = ()
    standbys: tuple[int, ...] = ()
    if seed % 2:
        at = int(rng.integers(steps // 10, 2 * steps))
        crashes = ((int(rng.integers(0, 4)), at),)
        standbys = (at + int(rng.integers(1, 80)),)
    first = int(rng.integers(5, steps // 4))
    return grow, shrink, FailurePlan(
        rescales=((first, grow), (first + int(rng.integers(0, steps // 2)), shrink)),
        crashes=crashes, standbys=standbys, launch_delay=(1, int(rng.integers(2, 120))))


def run_seed(base: Baseline, seed: int) -> SimResult:
    grow, shrink, failures = schedule(seed, base.steps)
    where = f"seed {seed}: grow to {grow}, shrink to {shrink}, {failures}"
    plan, _ = tiny_plan(events=EVENTS)
    try:  # (a run takes 2-4 thousand steps: a rescale that never ends is cut short)
        res = simulate(plan, base.batches, seed, failures, max_steps=30 * base.steps)
    except Violation as e:
        raise AssertionError(f"{where}: {e}") from e
    out = res.output
    if not res.ended:
        raise AssertionError(f"{where}: the output did not end; rescales {res.rescales}")
    if duplicate_rows(out):
        raise AssertionError(f"{where}: {duplicate_rows(out)} duplicate rows")
    if out.num_rows != base.output.num_rows or digest_of(out) != digest_of(base.output):
        raise AssertionError(f"{where}: output differs from the failure-free run "
                             f"({out.num_rows} rows vs {base.output.num_rows})")
    done = [(r["sites"], r["note"]) for r in res.rescales]
    if [s for s, _ in done] != [grow, shrink] or any(note for _, note in done):
        raise AssertionError(f"{where}: rescales {done}")
    if len(res.hosted) != shrink or res.rescales[1]["retired"] != list(range(shrink, grow)):
        raise AssertionError(f"{where}: live sites {sorted(res.hosted)} at the end, "
                             f"retired {res.rescales[1]['retired']}")
    copies = sorted(q for qs in res.hosted.values() for q in qs)
    if copies != sorted([*range(8), *range(8)]):
        raise AssertionError(f"{where}: copies on the live sites {res.hosted}")
    held = [len(qs) for qs in res.hosted.values()]
    if max(held) - min(held) > 2:
        raise AssertionError(f"{where}: not spread over the sites: {res.hosted}")
    return res


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_a_running_query_grows_and_shrinks_and_its_output_is_exact(
        baseline: Baseline, chunk: int) -> None:
    seeds_ = chunk_of(SEEDS, CHUNKS, chunk)
    failed, moved, crashed = [], 0, 0
    for seed in seeds_:
        try:
            res = run_seed(baseline, seed)
        except AssertionError as e:
            failed.append(str(e))
            continue
        moved += min(r["moves"] for r in res.rescales) > 0
        crashed += bool(res.crashed)
    assert not failed, f"{len(failed)} failing seed(s):\n" + "\n".join(failed[:5])
    # not vacuous: both rescales of every seed moved copies, and half the seeds had a crash
    assert moved == len(seeds_)
    assert crashed >= len(seeds_) // 2 - 1


def caught(monkeypatch: pytest.MonkeyPatch, base: Baseline, symptom: str, name: str) -> None:
    tiny_runs.caught(monkeypatch, run_seed, base, MUTATION_SEEDS, symptom, name)


def test_mutation_sites_do_not_learn_of_a_grown_slot(monkeypatch: pytest.MonkeyPatch,
                                                     baseline: Baseline) -> None:
    """Nobody's table grows past the plan's sites: a new slot's copies never get their
    ``psync`` sent to them, so their moves never fold in everywhere and the rescale never
    ends."""
    monkeypatch.setattr(Layout, "grow", lambda self, sites: None)
    caught(monkeypatch, baseline, "rescales [", "sites do not learn of a grown slot")


def test_mutation_a_shrink_retires_its_slots_before_their_copies_moved(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """A shrink plans no moves and retires its slots holding their copies: a partition
    whose copies were all on them is lost, which the egress finds (the run stops)."""
    real_moves = Rescaling._rescale_moves

    def no_moves(self: Rescaling) -> list[tuple[int, int, int]]:
        r = self.rescaling
        return [] if r is not None and r.retiring else real_moves(self)

    def retire_all(self: Rescaling, r: RescaleRecord) -> list[Action]:
        out: list[Action] = []
        for s in r.retiring:
            if self.slot_state[s] in (Slot.MEMBER, Slot.AWAITING):
                out += self._slot_step(s, SlotEv.RETIRE)
                r.retired.append(s)
        return out

    monkeypatch.setattr(Rescaling, "_rescale_moves", no_moves)
    monkeypatch.setattr(Rescaling, "_retire_surplus", retire_all)
    caught(monkeypatch, baseline, "every replica of partition", "retire before the copies moved")
