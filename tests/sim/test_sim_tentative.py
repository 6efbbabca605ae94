"""Eventual consistency (``--consistency eventual``, ``protocol/consistency.py``) in the
deterministic simulator: a source cut for a random while at a random time, a random delay
bound, each of the three modes, with and without a site crash, on two workloads of two
sources (``tiny_union_plan``: windows per page; ``tiny_dag_plan``: three sinks, joins, two
exchanges in a row).

Every seed checks:

- the stable output (what ``TableSink`` and ``--output`` keep) equals the failure-free
  run's, row for row and SN for SN, on every sink;
- the deliveries that are not stable rows are well formed: tentative rows, then ``undo``
  and ``rec_done`` together, per episode, and the run never ends inside an episode; no
  stable row of the episode (above its base) is delivered before its ``undo``;
- the availability bound at the ingress, on every tick: no record that the sources still
  speaking have made certain waits longer than the delay bound (plus a tick) without going
  on, stably or tentatively (``InputEpisodes.overdue``);
- with a cut longer than the delay bound, tentative rows reached the output.

Mutants: a branch that processes in the stable operators (no fork: tentative rows reach the
stable state), an ingress that numbers tentative rows with stable SNs, and an egress that
does not hold an episode's stable rows back are caught by a seed each, which passes
unmutated.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.control import eventual as eventual_mod
from sparkflux.model.digest import digest_of
from sparkflux.protocol import tentative as tentative_mod
from sparkflux.protocol.consistency import MODES, Eventual
from sparkflux.sim.run import FailurePlan, SimClock, SimResult, Violation, simulate
from sparkflux.sim.workload import (
    tiny_dag_plan,
    tiny_union_arrivals,
    tiny_union_plan,
    tiny_union_records,
)
from tests.support.seeds import hunt_order, seeds

pytestmark = pytest.mark.usefixtures("quiet_log")

CLOCK = SimClock()
SEEDS = {"union": seeds(80), "dag": seeds(24)}  # the dag's seeds take four times as long
MUTATION_SEEDS = 40
PLANS = {"union": tiny_union_plan, "dag": tiny_dag_plan}


@pytest.fixture(scope="module")
def records() -> tuple[pa.Table, pa.Table]:
    return tiny_union_records()


def schedule(seed: int, steps: int) -> tuple[FailurePlan, Eventual]:
    """A cut of one source (random source, start, length), a delay bound, a mode, and on
    every third seed a crash with a standby."""
    rng = np.random.default_rng((seed, 29))
    at = int(rng.integers(1, max(2, steps)))
    length = int(rng.integers(20, 600))
    cut = ((int(rng.integers(2)), at, length),)
    crash: tuple[tuple[int, int], ...] = ()
    standbys: tuple[int, ...] = ()
    if seed % 3 == 2:
        when = int(rng.integers(1, steps + length))
        crash, standbys = ((int(rng.integers(4)), when),), (when + int(rng.integers(1, 200)),)
    mode = MODES[seed % len(MODES)]
    return (FailurePlan(crash, standbys=standbys, source_cuts=cut),
            Eventual(float(rng.integers(5, 80)), mode))


def run_seed(plan_name: str, records: Any, seed: int, base: SimResult,
             failures: FailurePlan, eventual: Eventual, **kw: Any) -> SimResult:
    res = simulate(PLANS[plan_name](), tiny_union_arrivals(*records, seed), seed, failures,
                   clock=CLOCK, eventual=eventual, **kw)
    where = f"seed {seed} ({plan_name}, {failures}, {eventual})"
    if not res.ended:
        raise Violation(f"{where}: the output never ended")
    got = [digest_of(t) for t in res.outputs]
    if got != [digest_of(t) for t in base.outputs] or \
            [t.num_rows for t in res.outputs] != [t.num_rows for t in base.outputs]:
        raise Violation(f"{where}: the stable output differs from the failure-free run "
                        f"({[t.num_rows for t in res.outputs]} rows vs "
                        f"{[t.num_rows for t in base.outputs]})")
    episodes_well_formed(res, where)
    if res.overdue:
        raise Violation(f"{where}: {res.overdue} times a held record waited past the delay "
                        f"bound (the longest sent tentatively waited {res.tentative_wait})")
    return res


def episodes_well_formed(res: SimResult, where: str) -> None:
    """The deliveries that are not stable rows: each ``undo`` right before its ``rec_done``,
    the run not ended inside an episode, and no stable row of an open episode (above its
    base) delivered before its ``undo``."""
    ops = [op for _, op, _ in res.tentative]
    for i, op in enumerate(ops):
        if op == "undo" and (i + 1 == len(ops) or ops[i + 1] != "rec_done"):
            raise Violation(f"{where}: an undo without its rec_done right after: {ops}")
        if op == "rec_done" and (i == 0 or ops[i - 1] != "undo"):
            raise Violation(f"{where}: a rec_done without its undo: {ops}")
    if ops and ops[-1] != "rec_done":
        raise Violation(f"{where}: the run ended inside an episode: {ops[-5:]}")
    if res.early:
        raise Violation(f"{where}: {res.early} stable rows above an open episode's base were "
                        f"delivered before its undo")


@pytest.fixture(scope="module")
def bases(records: Any) -> dict[tuple[str, int], SimResult]:
    return {}


def base_for(bases: dict[tuple[str, int], SimResult], plan_name: str, records: Any,
             seed: int) -> SimResult:
    if (plan_name, seed) not in bases:
        bases[(plan_name, seed)] = simulate(PLANS[plan_name](),
                                            tiny_union_arrivals(*records, seed), seed,
                                            FailurePlan(), clock=CLOCK)
    return bases[(plan_name, seed)]


@pytest.mark.parametrize("plan_name", list(PLANS))
def test_the_stable_output_is_exact_and_tentative_rows_come_within_the_bound(
        records: Any, bases: Any, plan_name: str) -> None:
    failed: list[str] = []
    with_rows = long_cuts = 0
    for seed in range(SEEDS[plan_name]):
        base = base_for(bases, plan_name, records, seed)
        failures, eventual = schedule(seed, base.steps)
        try:
            res = run_seed(plan_name, records, seed, base, failures, eventual)
        except Violation as e:
            failed.append(str(e))
            continue
        _, at, length = failures.source_cuts[0]
        if at + eventual.max_delay + 2 * CLOCK.tick_every < base.steps \
                and length > 3 * eventual.max_delay and not failures.crashes:
            long_cuts += 1
            with_rows += any(op == "tentative" for _, op, _ in res.tentative)
    assert not failed, "\n".join(failed[:5])
    assert with_rows >= long_cuts * 3 // 4, (
        f"only {with_rows} of {long_cuts} long cuts gave tentative rows")


def test_strict_mode_waits_the_cut_out(records: Any, bases: Any) -> None:
    """The same cut without eventual consistency: no tentative row, the same output, and
    the run lasts at least as long as the cut."""
    base = base_for(bases, "union", records, 0)
    cut = FailurePlan(source_cuts=((0, 20, 800),))
    res = simulate(tiny_union_plan(), tiny_union_arrivals(*records, 0), 0, cut, clock=CLOCK)
    assert res.ended and not res.tentative
    assert digest_of(res.output) == digest_of(base.output)
    assert res.steps >= 820


def test_a_cut_gives_tentative_rows_then_the_corrections(records: Any, bases: Any) -> None:
    """One seed, exactly: tentative windows while clicks are cut, then one undo, the
    corrections (stable rows above the episode's base), rec_done; the stable output is the
    failure-free one."""
    base = base_for(bases, "union", records, 0)
    res = run_seed("union", records, 0, base, FailurePlan(source_cuts=((0, 30, 400),)),
                   Eventual(30.0, "process"))
    ops = [op for _, op, _ in res.tentative]
    assert ops.count("undo") == ops.count("rec_done") == 1
    assert ops[-2:] == ["undo", "rec_done"]
    assert set(ops[:-2]) == {"tentative"}
    assert res.corrections > 0
    assert res.steps > base.steps  # the cut delayed the stable output


def hunt(records: Any, bases: Any, first: int) -> tuple[int, FailurePlan, Eventual] | None:
    for seed in hunt_order(MUTATION_SEEDS, first):
        base = base_for(bases, "union", records, seed)
        failures, eventual = schedule(seed, base.steps)
        try:
            run_seed("union", records, seed, base, failures, eventual)
        except Violation:
            return seed, failures, eventual
    return None


def caught_then_clean(monkeypatch: pytest.MonkeyPatch, records: Any, bases: Any) -> None:
    """The mutant in place is caught by a seed, and that seed passes without it."""
    caught = hunt(records, bases, 0)
    assert caught is not None, f"the mutation survived {MUTATION_SEEDS} seeds"
    monkeypatch.undo()
    seed, failures, eventual = caught
    run_seed("union", records, seed, base_for(bases, "union", records, seed), failures,
             eventual)


def test_mutation_tentative_rows_in_the_stable_state(monkeypatch: pytest.MonkeyPatch,
                                                     records: Any, bases: Any) -> None:
    """A branch that is the stable program itself (no fork): tentative rows reach the
    stable state, and the stable output is wrong."""
    real = tentative_mod.Branches.feed_many

    def no_fork(self: Any, s: int, epoch: int, parts: Any, stable: Any, mine: Any,
                fork: Any) -> Any:
        self.programs[s] = stable
        self.forked[s] = set(range(mine.size))
        return real(self, s, epoch, parts, stable, mine, fork)

    monkeypatch.setattr(tentative_mod.Branches, "feed_many", no_fork)
    caught_then_clean(monkeypatch, records, bases)


def test_mutation_tentative_rows_take_stable_numbers(monkeypatch: pytest.MonkeyPatch,
                                                     records: Any, bases: Any) -> None:
    """An ingress that numbers tentative rows from its stable sequence: the stable rows
    after the episode get other SNs than a run without the failure."""
    real_send = eventual_mod.InputEpisodes._send

    def send(self: Any, now: float, released: Any, dead: set[int]) -> Any:
        before = self.episode.next_tsn
        out = real_send(self, now, released, dead)
        self.ingress.next_isn += self.episode.next_tsn - before  # taken from the stable ones
        return out

    monkeypatch.setattr(eventual_mod.InputEpisodes, "_send", send)
    caught_then_clean(monkeypatch, records, bases)


def test_mutation_corrections_are_not_held(monkeypatch: pytest.MonkeyPatch, records: Any,
                                           bases: Any) -> None:
    """An egress that delivers an open episode's stable rows at once: they reach the sink
    among the tentative ones, before the undo that voids those."""
    real_open = eventual_mod.InputEpisodes.judge

    def judge(self: Any, now: float, released: Any, dead: set[int]) -> Any:
        out = real_open(self, now, released, dead)
        self.egress.holding = None
        return out

    monkeypatch.setattr(eventual_mod.InputEpisodes, "judge", judge)
    caught_then_clean(monkeypatch, records, bases)
