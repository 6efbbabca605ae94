"""Garbage collection of stream replicas under racing copies (``--stream-replicas``, the
racing-replicas paper's Sections V-B and V-C) in the deterministic simulator.

Each consumer copy keeps, per input stream, the ``keep`` producer copies whose claims came
first most often, and asks the others to stop sending (they still hold every row until it
acknowledges). When fewer than ``keep`` complete live copies send a stream (one crashed, or
was moved), a collected copy is revived: it resends what it holds above the consumer's
progress, then sends on. Seeds:

- K = 2 keeping one, K = 3 keeping one and two, on five sites, with K - 1 sites crashing at
  random steps while the input flows (paced), with and without standbys: the output equals
  the run without replication, row for row; streams were collected, and the crashes
  revived some;
- without failures, collection sends fewer messages than racing every copy;
- a site hung past the heartbeat timeout, K = 2 and 3 keeping one: the streams it alone
  sent are revived on the sites' clocks (their stall), the output exact;
- the moves simulator's schedules (moves, failures during them, recovery onto the
  survivors, groups of moves, balancing off a slowed site) with two copies keeping one:
  a moved or retired sender revives its streams, the rebuilt copy sends from its ``psync``;
- mutations: a revival that does nothing (the crash of a stream's last sender stalls it for
  good), and a collection that keeps no copy (the stream goes silent): each is caught, and
  the seed that catches it passes unmutated.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.sim.run import FailurePlan, SimResult, Violation, check, simulate
from sparkflux.sim.workload import tiny_plan
from tests.support.seeds import FULL, hunt_order, seeds

from .test_sim_catchup import assert_recovered
from .test_sim_moves import plan_for
from .test_sim_race import CLOCK, crashes, hang_plan

SITES, PARTITIONS = 5, 10
EVENTS, BATCH = 1200, 20  # 60 input batches: streams make enough claims to be judged
SEEDS = seeds(24)  # per (K, keep) and recovery kind
PACE = 40
MOVES_SEEDS = 80 if FULL else 4  # about 10 s each


# steps a collected stream may stand still behind its copy's others: well above the paced
# input's batch interval (a stream moves once a batch), well below the heartbeat timeout
STALL = 150.0


def plan(keep: int) -> Any:
    return replace(tiny_plan(EVENTS, BATCH, sites=SITES, partitions=PARTITIONS)[0],
                   stream_replicas=keep, stream_stall=STALL)


@pytest.fixture(scope="module")
def base() -> tuple[list[pa.RecordBatch], pa.Table, dict[int, int]]:
    _, batches = tiny_plan(EVENTS, BATCH, sites=SITES, partitions=PARTITIONS)
    expected = simulate(plan(0), batches, 0, FailurePlan(), replicas=1).output
    steps = {k: simulate(plan(0), batches, 0, FailurePlan(), replicas=k, race=True,
                         pace=PACE).steps for k in (2, 3)}
    assert expected.num_rows > 0
    return batches, expected, steps


def run(base: Any, seed: int, k: int, keep: int, fp: FailurePlan) -> SimResult:
    batches, expected, _ = base
    return check(lambda: plan(keep), batches, seed, fp, expected=expected, replicas=k,
                 race=True, pace=PACE)


def test_collection_sends_less_than_racing_every_copy(base: Any) -> None:
    batches, _, _ = base
    for k, keep in ((2, 1), (3, 1), (3, 2)):
        gc = run(base, k, k, keep, FailurePlan())
        every = simulate(plan(0), batches, k, FailurePlan(), replicas=k, race=True, pace=PACE)
        # every consumer copy (10 per copy column) and the egress judged its 10 streams;
        # a kept sender that fell behind the others for the stall was revived around and
        # judged again (the scheduler lets a site lag)
        judged = (k - keep) * 10 * (k * PARTITIONS + 1)
        assert judged <= gc.collected <= judged + gc.revived, (k, keep, gc.collected)
        assert gc.messages < every.messages and gc.raced < every.raced, (k, keep)


@pytest.mark.parametrize("standbys", [False, True], ids=["no-standby", "standbys"])
@pytest.mark.parametrize("k,keep", [(2, 1), (3, 1), (3, 2)])
def test_collected_streams_are_revived_when_their_senders_crash(
        base: Any, k: int, keep: int, standbys: bool) -> None:
    _, _, steps = base
    failed, revived = [], 0
    for seed in range(SEEDS):
        fp = crashes(seed, k, steps[k], standbys, salt=47)
        try:
            res = run(base, seed, k, keep, fp)
            revived += res.revived
            if standbys:
                short = {key: c for key, c in res.replicas_live.items() if c != k}
                assert not short, f"seed {seed}: not {k} live copies: {short}"
        except (Violation, AssertionError) as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])
    assert revived > 0, "no crash revived a collected stream"


def test_moves_of_collecting_copies_interleaved_with_failures() -> None:
    def moves_plan(keep: int) -> Any:  # the moves simulator's 4 sites and 8 partitions
        return replace(tiny_plan(EVENTS, BATCH)[0], stream_replicas=keep)

    _, batches = tiny_plan(EVENTS, BATCH)
    expected = simulate(moves_plan(0), batches, 0, FailurePlan(), replicas=1).output
    steps = simulate(moves_plan(0), batches, 0, FailurePlan(), race=True).steps
    failed, collected = [], 0
    for seed in range(MOVES_SEEDS):
        fp, kw = plan_for(seed, steps)
        try:
            res = check(lambda: moves_plan(1), batches, seed, fp, expected=expected,
                        race=True, **kw)
            collected += res.collected
            if kw.get("recovery") != "survivors":
                assert_recovered(res, seed, fp)
        except (Violation, AssertionError) as e:
            failed.append(f"{e} [{fp} {kw}]")
    assert not failed, "\n".join(failed[:5])
    assert collected > 0


@pytest.mark.parametrize("k", [2, 3])
def test_a_hung_sender_is_revived_around_before_its_exclusion(base: Any, k: int) -> None:
    """A site hangs past the heartbeat timeout while the input flows (paced), then goes on
    or is excluded: the streams it was the only sender of stand still while the others
    move, and their collected copies are taken back on the sites' clocks, before the
    controller excludes it; the output equals the run without replication."""
    batches, expected, steps = base
    failed, revived = [], 0
    for seed in range(SEEDS):
        fp = hang_plan(seed, steps[k])
        try:
            res = check(lambda: plan(1), batches, seed, fp, expected=expected, replicas=k,
                        race=True, pace=PACE, clock=CLOCK,
                        recovery="standby" if fp.standbys else "survivors")
            revived += res.revived
        except Violation as e:
            failed.append(f"{e} [{fp}]")
    assert not failed, "\n".join(failed[:5])
    assert revived > 0


# -- mutations ------------------------------------------------------------------------------
def hunt(base: Any, k: int, keep: int, first: int) -> tuple[int, FailurePlan]:
    """The first seed (from ``first`` on, wrapping round) whose crash plan breaks the run."""
    _, _, steps = base
    for seed in hunt_order(100, first):
        fp = crashes(seed, k, steps[k], False, salt=47)
        try:
            run(base, seed, k, keep, fp)
        except Violation:
            return seed, fp
    raise AssertionError("the mutation survived 100 seeds")


def test_mutation_no_revival_is_caught(base: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ConsumerSet, "_revive", lambda self: [])
    seed, fp = hunt(base, 2, 1, 0)
    monkeypatch.undo()
    run(base, seed, 2, 1, fp)


def test_mutation_collecting_every_copy_is_caught(
        base: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    real = ConsumerSet._collect

    def keep_none(self: ConsumerSet, qi: np.ndarray, p: np.ndarray) -> Any:
        self.keep, k = 0, self.keep
        try:
            return real(self, qi, p)
        finally:
            self.keep = k

    monkeypatch.setattr(ConsumerSet, "_collect", keep_none)
    seed, fp = hunt(base, 2, 1, 0)
    monkeypatch.undo()
    run(base, seed, 2, 1, fp)
