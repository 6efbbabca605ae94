"""Placement over failure domains under the deterministic simulator: whole executors die at
once (every site of one JVM at one step) and the output must still equal the failure-free run
(``check``, as in ``test_sim.py``).

Four sites, 8 mini-partitions, two replicas. Per seed two random sites share executor ``x``
(the others have executors of their own), so the identity ring puts them next to each other
in one case of three (sites k and k + 1, or 3 and 0) and ``x``'s death would lose two
partitions; the controller's ring keeps them apart. ``x`` dies at a random step; two standbys
(Spark's retries) come later, each in a random executor, often one a survivor is in. Once
they have recovered and the controller has moved whatever now shares an executor (the
re-layout), the executor of one of them dies as a whole too.

Mutation tests, each caught by some seed whose very plan passes with the real controller:
the ring ignores the domains (the first executor death loses a partition), and no re-layout
after a recovery (the second one does).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.control import controller as controller_module
from sparkflux.control.controller import Controller
from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.sim.run import FailurePlan, SimResult, Violation, check, simulate
from sparkflux.sim.workload import tiny_plan
from tests.support.seeds import seeds

SITES, PARTITIONS = 4, 8
SEEDS, CHUNKS = seeds(100), 4
MUTATION_SEEDS = 60
LOST = "no complete replica is left"


def plan_factory() -> PhysicalPlan:
    return tiny_plan(sites=SITES, partitions=PARTITIONS)[0]


@dataclass(frozen=True)
class Baseline:
    batches: list[pa.RecordBatch]
    expected: pa.Table
    steps: int


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    _, batches = tiny_plan(sites=SITES, partitions=PARTITIONS)
    plain = simulate(plan_factory(), batches, 0, FailurePlan(), replicas=1)
    flux = simulate(plan_factory(), batches, 0, FailurePlan(), replicas=2)
    return Baseline(batches, plain.output, flux.steps)


def domain_kills(seed: int, steps: int, neighbours: bool = False) -> FailurePlan:
    """Two sites share executor x (``neighbours``: sites k and k + 1, which the identity ring
    pairs); x dies at a random step in the first half of the run; two standbys register
    20-150 steps later in random executors (a survivor's, or a fresh one); once recovery and
    re-layout are done, the first standby's executor dies as a whole."""
    rng = np.random.default_rng((seed, 21))
    if neighbours:
        k = int(rng.integers(SITES))
        pair = {k, (k + 1) % SITES}
    else:
        pair = {int(s) for s in rng.choice(SITES, 2, replace=False)}
    executors = tuple("x" if s in pair else f"e{s}" for s in range(SITES))
    at = int(rng.integers(1, steps // 2))
    gap = int(rng.integers(20, 150))
    survivors = sorted(f"e{s}" for s in range(SITES) if s not in pair)
    standby_executors = tuple(str(rng.choice([*survivors, "fresh1", "fresh2"]))
                              for _ in range(2))
    return FailurePlan(crashes=tuple((s, at) for s in sorted(pair)), executors=executors,
                       standbys=(at + gap, at + gap + 1 + int(rng.integers(40))),
                       standby_executors=standby_executors,
                       after_settled=((standby_executors[0], int(rng.integers(1, 30))),))


def run_check(base: Baseline, seed: int, failures: FailurePlan) -> SimResult:
    try:
        return check(plan_factory, base.batches, seed, failures, expected=base.expected)
    except Violation:
        raise
    except Exception as e:
        raise AssertionError(f"seed {seed} {failures}: {type(e).__name__}: {e}") from e


@pytest.mark.parametrize("part", range(CHUNKS))
def test_whole_executors_die_and_the_output_is_exact(baseline: Baseline, part: int) -> None:
    size = -(-SEEDS // CHUNKS)
    failed, killed_twice, relayouts = [], 0, 0
    chunk = range(part * size, min((part + 1) * size, SEEDS))  # the last may be shorter
    for seed in chunk:
        failures = domain_kills(seed, baseline.steps, neighbours=seed % 2 == 0)
        try:
            res = run_check(baseline, seed, failures)
        except AssertionError as e:
            failed.append(f"seed {seed} {failures}: {e}")
            continue
        killed_twice += len(res.crashed) > 2
        relayouts += bool(res.moves)
    assert not failed, f"{len(failed)} failing seed(s):\n" + "\n".join(failed[:5])
    # not vacuous: most runs lose a second executor, and some had to re-lay copies first
    assert killed_twice >= 0.6 * len(chunk), f"only {killed_twice} of {len(chunk)} runs lost a " \
        f"second executor"
    assert relayouts >= 0.2 * len(chunk), f"only {relayouts} of {len(chunk)} runs moved copies " \
        f"off a shared domain"


def hunt(base: Baseline, neighbours: bool) -> tuple[int, FailurePlan, str]:
    others = []
    for seed in range(MUTATION_SEEDS):
        failures = domain_kills(seed, base.steps, neighbours)
        try:
            run_check(base, seed, failures)
        except Violation as e:
            if LOST in str(e):
                assert str(e).startswith(f"seed {seed}:")
                return seed, failures, str(e)
            others.append(f"seed {seed}: {e}")
    raise AssertionError(f"the mutation survived {MUTATION_SEEDS} seeds; other violations: "
                         f"{others[:3]}")


def caught(monkeypatch: pytest.MonkeyPatch, base: Baseline, name: str,
           neighbours: bool) -> None:
    seed, failures, msg = hunt(base, neighbours)
    print(f"mutation {name!r}: caught by seed {seed} {failures}: {msg}")
    monkeypatch.undo()  # control: the very same seed passes with the real controller
    run_check(base, seed, failures)


def test_mutation_ring_ignores_domains(monkeypatch: pytest.MonkeyPatch,
                                       baseline: Baseline) -> None:
    """View 1's ring is the identity whatever the domains: x's sites are ring neighbours,
    and x's death takes both copies of two partitions."""
    monkeypatch.setattr(controller_module, "choose_ring", lambda domains, k: list(
        range(len(domains))))
    caught(monkeypatch, baseline, "ring ignores domains", neighbours=True)


def test_mutation_no_relayout(monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """A standby that lands in a survivor's executor keeps the copies it adopted: that
    executor's death then takes both copies of some partition."""
    monkeypatch.setattr(Controller, "_relayout", lambda self, slot: [])
    caught(monkeypatch, baseline, "no re-layout", neighbours=False)
