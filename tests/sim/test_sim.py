"""Flux-HA under the deterministic simulator (docs/design.md §5; SIGMOD 2004 §3-5).

Every test drives the real protocol cores (``SiteCore``, ``Ingress``, ``Egress``,
``Controller``) through ``sparkflux.sim.run.simulate`` on the tiny session workload (4 sites,
8 mini-partitions, chained declustering: replica r of partition q on site (q + r) % 4).

- failure-free: the replicated run's output equals the unreplicated run's, for several seeds;
- one crash (a random site at a random scheduler step) for 1,000 seeds: ``check`` passes;
- two crashes that leave a replica of every partition ({0, 2} or {1, 3}) for 200 seeds;
- two crashes of adjacent sites (both replicas of a partition) are a clear ``Violation``;
- mutation tests: each deliberately broken rule of FH-Prod / FH-Cons is caught by some seed,
  and that seed passes with the unmutated protocol; one of them only because the runtime's
  order lets a frame overtake held data (with strict FIFO links it survives 200 seeds);
- a seed and a failure plan replay exactly.

A failing seed is named in the assertion message together with its failure plan, so
``simulate(tiny_plan()[0], batches, seed, FailurePlan(crashes))`` reproduces it.
"""

from __future__ import annotations

import dataclasses
import re
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.dataflow.plan import PhysicalPlan
from sparkflux.model.digest import digest_of
from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.protocol.messages import Data, Outgoing, Reverse
from sparkflux.protocol.producer import ProducerBuffer
from sparkflux.sim.run import FailurePlan, SimResult, Violation, check, simulate
from sparkflux.sim.workload import tiny_plan
from tests.support.seeds import hunt_order, seeds

from . import test_sim_moves

SITES = 4
PARTITIONS = 8
SINGLE_SEEDS, SINGLE_CHUNKS = seeds(1000), 10
DOUBLE_SEEDS, DOUBLE_CHUNKS = seeds(200), 4
MUTATION_SEEDS = 200
# strict-FIFO seeds a mutant that only the overtaking order exposes survives
FIFO_SEEDS = seeds(200)
FAILURE_FREE_SEEDS = range(4)
NON_ADJACENT = ((0, 2), (1, 3))  # no partition has both replicas on such a pair
ADJACENT = ((0, 1), (1, 2), (2, 3), (3, 0))  # sites k, k+1 share partitions k+1, k+1+N
ADJACENT_SEEDS = range(12)

# Violation messages that mean "output was lost or never completed" / "output was duplicated".
LOSS = ("differs from the failure-free", "never saw the end", "the ingress admitted")
LEAK = ("buffers did not drain",)


def plan_factory() -> PhysicalPlan:
    return tiny_plan(sites=SITES, partitions=PARTITIONS)[0]


@dataclass(frozen=True)
class Baseline:
    batches: list[pa.RecordBatch]
    expected: pa.Table  # the unreplicated (replicas=1) failure-free output
    steps: int  # scheduler steps of the replicated failure-free run (the crash-step range)
    rows_in: int


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    _, batches = tiny_plan(sites=SITES, partitions=PARTITIONS)
    plain = simulate(plan_factory(), batches, 0, FailurePlan(), replicas=1)
    flux = simulate(plan_factory(), batches, 0, FailurePlan(), replicas=2)
    assert plain.ended and plain.output.num_rows > 0
    return Baseline(batches, plain.output, flux.steps, sum(b.num_rows for b in batches))


# -- failure plans: drawn from their own stream, independent of the scheduler's generator ----
def single_failure(seed: int, steps: int) -> FailurePlan:
    """A random site crashes at a random step in [1, steps]."""
    rng = np.random.default_rng((seed, 1))
    return FailurePlan(((int(rng.integers(SITES)), int(rng.integers(1, steps + 1))),))


def _two_steps(rng: np.random.Generator, lo: int, hi: int) -> tuple[int, int]:
    """Two independent, distinct steps in [lo, hi] (simulate keys crashes by step)."""
    a = int(rng.integers(lo, hi + 1))
    b = int(rng.integers(lo, hi))
    return a, b + (b >= a)


def double_failure(seed: int, steps: int) -> FailurePlan:
    """Both sites of {0, 2} or {1, 3} crash, at independent random steps in [1, steps // 2].

    A run with a failed site sends less and ends sooner than the failure-free one (it can end
    before step 300), so the range is the first half of the failure-free run: both crashes
    then happen while the dataflow runs.
    """
    rng = np.random.default_rng((seed, 2))
    x, y = NON_ADJACENT[int(rng.integers(len(NON_ADJACENT)))]
    a, b = _two_steps(rng, 1, steps // 2)
    return FailurePlan(((x, a), (y, b)))


def adjacent_failure(seed: int, steps: int) -> FailurePlan:
    """Both replicas of a partition fail: adjacent sites, early enough to be during the run."""
    rng = np.random.default_rng((seed, 3))
    x, y = ADJACENT[seed % len(ADJACENT)]
    a, b = _two_steps(rng, 1, steps // 3)
    return FailurePlan(((x, a), (y, b)))


# -- running seeds ---------------------------------------------------------------------------
def run_check(base: Baseline, seed: int, failures: FailurePlan) -> SimResult:
    """``check`` one seed; an error that is not a ``Violation`` is re-raised naming the seed."""
    try:
        return check(plan_factory, base.batches, seed, failures, expected=base.expected)
    except Violation:
        raise
    except Exception as e:  # the simulator let a raw error escape: still name the seed
        raise AssertionError(f"seed {seed} crashes {failures.crashes}: "
                             f"{type(e).__name__}: {e}") from e


def run_seeds(base: Baseline, seeds: Iterable[int],
              plan_of: Callable[[int, int], FailurePlan]) -> list[SimResult]:
    """Check every seed; fail listing every failing (seed, crashes, message)."""
    results, failed = [], []
    for seed in seeds:
        failures = plan_of(seed, base.steps)
        try:
            results.append(run_check(base, seed, failures))
        except AssertionError as e:  # Violation or a raw error, both name the seed
            failed.append(f"seed {seed} crashes (site, step) {failures.crashes}: {e}")
    assert not failed, f"{len(failed)} failing seed(s):\n" + "\n".join(failed)
    return results


def chunk(n_seeds: int, n_chunks: int, i: int) -> range:
    size = -(-n_seeds // n_chunks)
    return range(i * size, min((i + 1) * size, n_seeds))


# -- 1. failure-free ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed", FAILURE_FREE_SEEDS)
def test_failure_free_replicated_equals_unreplicated(baseline: Baseline, seed: int) -> None:
    plain = simulate(plan_factory(), baseline.batches, seed, FailurePlan(), replicas=1)
    flux = simulate(plan_factory(), baseline.batches, seed, FailurePlan(), replicas=2)
    for res in (plain, flux):
        assert res.ended, f"seed {seed}: the egress never saw the end of the stream"
        assert res.crashed == []
        assert res.admitted == baseline.rows_in
        assert not any(res.leftover.values()), f"seed {seed}: buffers left {res.leftover}"
    assert flux.output.num_rows > 0
    assert flux.output.equals(plain.output), f"seed {seed}: replicated output differs"
    assert digest_of(flux.output) == digest_of(plain.output)
    # The output does not depend on the interleaving either (the fixture ran seed 0).
    assert flux.output.equals(baseline.expected), f"seed {seed}: output depends on the seed"
    # Flux-HA sends more: the copy's data and the acknowledgements.
    assert flux.messages > plain.messages
    check(plan_factory, baseline.batches, seed, FailurePlan(), expected=baseline.expected)


def test_seeds_give_different_interleavings(baseline: Baseline) -> None:
    steps = {simulate(plan_factory(), baseline.batches, seed, FailurePlan()).steps
             for seed in range(6)}
    assert len(steps) > 1, "the scheduler ignores the seed"


# -- 2. one failure, 1,000 seeds ---------------------------------------------------------------
@pytest.mark.parametrize("part", range(SINGLE_CHUNKS))
def test_single_failure(baseline: Baseline, part: int) -> None:
    seeds = chunk(SINGLE_SEEDS, SINGLE_CHUNKS, part)
    results = run_seeds(baseline, seeds, single_failure)
    assert len(results) == len(seeds)
    # The plans are not vacuous: nearly every crash lands before the run ends.
    crashed = sum(bool(r.crashed) for r in results)
    assert crashed >= 0.9 * len(seeds), f"only {crashed} of {len(seeds)} runs had a crash"


# -- 3. two failures in different partition pairs ---------------------------------------------
@pytest.mark.parametrize("part", range(DOUBLE_CHUNKS))
def test_two_failures_non_adjacent(baseline: Baseline, part: int) -> None:
    seeds = chunk(DOUBLE_SEEDS, DOUBLE_CHUNKS, part)
    results = run_seeds(baseline, seeds, double_failure)
    missed = [r.seed for r in results if len(r.crashed) != 2]
    assert not missed, (f"seeds {missed}: the run ended before the second crash; the step "
                        f"range of double_failure no longer covers two failures")


# -- 4. two adjacent failures lose a partition -------------------------------------------------
def test_two_adjacent_failures_are_a_clear_violation(baseline: Baseline) -> None:
    wrong = []
    for seed in ADJACENT_SEEDS:
        failures = adjacent_failure(seed, baseline.steps)
        (x, _), (y, _) = failures.crashes
        lost = {q for q in range(PARTITIONS) if {q % SITES, (q + 1) % SITES} == {x, y}}
        where = f"seed {seed} crashes (site, step) {failures.crashes}"
        try:
            run_check(baseline, seed, failures)
        except Violation as e:
            m = re.search(r"no complete replica is left of stage 0: partitions? ([\d, ]+);",
                          str(e))
            named = {int(q) for q in m[1].split(", ")} if m else set()
            if not str(e).startswith(f"seed {seed}:") or named != lost \
                    or f"sites {min(x, y)} and {max(x, y)} failed" not in str(e):
                wrong.append(f"{where}: unclear violation (partitions {sorted(lost)}): {e}")
        except AssertionError as e:
            wrong.append(f"{where}: not reported as a Violation: {e}")
        else:
            wrong.append(f"{where}: passed although partitions {sorted(lost)} were lost")
    assert not wrong, "\n".join(wrong)


# -- 5. mutation tests -------------------------------------------------------------------------
def hunt(base: Baseline, symptoms: tuple[str, ...]) -> tuple[int, FailurePlan, str]:
    """The first single-failure seed whose violation shows one of ``symptoms``."""
    others = []
    for seed in range(MUTATION_SEEDS):
        failures = single_failure(seed, base.steps)
        try:
            run_check(base, seed, failures)
        except Violation as e:
            if any(s in str(e) for s in symptoms):
                assert str(e).startswith(f"seed {seed}:"), f"violation does not name seed: {e}"
                return seed, failures, str(e)
            others.append(f"seed {seed}: {e}")
    raise AssertionError(f"the mutation survived {MUTATION_SEEDS} single-failure seeds "
                         f"(no violation showing {symptoms}); other violations: {others[:5]}")


def caught(monkeypatch: pytest.MonkeyPatch, base: Baseline, symptoms: tuple[str, ...],
           name: str) -> None:
    seed, failures, msg = hunt(base, symptoms)
    print(f"mutation {name!r}: caught by seed {seed}, crashes (site, step) "
          f"{failures.crashes}: {msg}")
    monkeypatch.undo()  # control: the very same seed passes with the real protocol
    run_check(base, seed, failures)


def test_mutation_producer_does_not_wait_for_secondary(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """FH-Prod evicts rows as soon as they are sent: a reverse finds nothing to resend."""
    init = ProducerBuffer.__init__

    def no_wait(self: ProducerBuffer, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        if self.stage > 0:  # inter-site FH-Prod (the ingress keeps its buffer)
            self.wait[...] = False

    monkeypatch.setattr(ProducerBuffer, "__init__", no_wait)
    caught(monkeypatch, baseline, LOSS, "no wait for SEC ack")


def test_mutation_reverse_without_reset(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """``reverse`` switches the stream but does not resend the unacknowledged rows."""
    on_reverse = ProducerBuffer.on_reverse

    def no_reset(self: ProducerBuffer, rev: Reverse, src: int | None = None) -> list[Outgoing]:
        outs = on_reverse(self, rev, src)
        return [Outgoing(o.site, dataclasses.replace(o.message, batch=None))
                if isinstance(o.message, Data) else o for o in outs]

    monkeypatch.setattr(ProducerBuffer, "on_reverse", no_reset)
    caught(monkeypatch, baseline, LOSS, "reverse without reset")


def test_mutation_ack_after_processing(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """FH-Cons acknowledges one message late, so a ``reverse`` overtakes the last
    acknowledgement. Because ``reverse`` carries the consumer's received progress as its floor,
    the survivor still resends nothing the consumer has (no duplicates); what breaks is the
    buffers: rows wait forever for acknowledgements that were sent to a dead replica."""
    on_data = ConsumerSet.on_data
    # Per instance, and weakly: an id() of a finished run's consumer can be reused.
    held: weakref.WeakKeyDictionary[ConsumerSet, list[Outgoing]] = weakref.WeakKeyDictionary()

    def late_acks(self: ConsumerSet, msg: Data, src: int | None = None,
                  more: Sequence[Data] = ()) -> list[Outgoing]:
        acks = on_data(self, msg, src, more)
        previous = held.get(self, [])
        held[self] = acks
        return previous

    monkeypatch.setattr(ConsumerSet, "on_data", late_acks)
    caught(monkeypatch, baseline, LEAK, "ack after processing")


def test_mutation_consumer_ignores_fail(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """FH-Cons (and the egress) never reverse: nobody hears from the survivor."""

    def ignore(self: ConsumerSet, dead: np.ndarray) -> list[Outgoing]:
        return []

    monkeypatch.setattr(ConsumerSet, "on_fail", ignore)
    caught(monkeypatch, baseline, LOSS, "no reverse on fail")


def test_mutation_cu_done_overtakes_psync(
        monkeypatch: pytest.MonkeyPatch, baseline: Baseline) -> None:
    """``cu-done`` written at once instead of behind the data and ``psync`` on the
    survivor's connection to the driver. After a catch-up or a move the egress learns from
    the survivor's ``psync`` that the new copy is complete (it has every row up to the cut
    from the survivor); a ``cu-done`` that overtakes the held ``psync`` lets the controller
    count the copy as back, and a plan may then fail the survivor while the egress still
    lacks rows below the cut that only the survivor had. With strict FIFO links ``psync``
    always comes first, and no seed catches the mutant: only the runtime's overtaking order
    exposes it."""
    from sparkflux.protocol import channels
    from sparkflux.protocol.messages import CuDone

    # the one table both the runtime's DTSB and the simulator's links read
    monkeypatch.setitem(channels.ROUTES, CuDone, (channels.Channel.LINK, False))
    symptom = "still being caught up"
    caught_by = None
    for seed in hunt_order(MUTATION_SEEDS * 2, 37):
        failures, kw = test_sim_moves.plan_for(seed, baseline.steps)
        try:
            check(plan_factory, baseline.batches, seed, failures, expected=baseline.expected,
                  **kw)
        except Violation as e:
            assert symptom in str(e), f"seed {seed} {failures}: another violation: {e}"
            caught_by = (seed, failures, kw)
            break
    assert caught_by is not None, f"the mutation survived {MUTATION_SEEDS * 2} seeds of moves"
    seed, failures, kw = caught_by
    print(f"mutation 'cu-done overtakes psync': caught by seed {seed} {failures}")
    missed = []
    for fifo_seed in range(FIFO_SEEDS):  # strict FIFO links: the mutant survives
        fp, fkw = test_sim_moves.plan_for(fifo_seed, baseline.steps)
        try:
            check(plan_factory, baseline.batches, fifo_seed, fp, expected=baseline.expected,
                  fifo=True, **fkw)
        except Violation as e:
            missed.append(f"seed {fifo_seed} {fp}: {e}")
    assert not missed, "with FIFO links:\n" + "\n".join(missed[:5])
    monkeypatch.undo()  # control: the very same seed passes with the real protocol
    check(plan_factory, baseline.batches, seed, failures, expected=baseline.expected, **kw)


# -- 6. reproducibility ------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [3, 17, 123])
def test_seed_replays_exactly(baseline: Baseline, seed: int) -> None:
    for failures in (FailurePlan(), single_failure(seed, baseline.steps),
                     double_failure(seed, baseline.steps)):
        a = simulate(plan_factory(), baseline.batches, seed, failures)
        b = simulate(plan_factory(), baseline.batches, seed, failures)
        where = f"seed {seed} crashes {failures.crashes}"
        assert a.output.equals(b.output), where
        assert (a.steps, a.messages, a.admitted, a.ended, a.crashed, a.leftover) == \
            (b.steps, b.messages, b.admitted, b.ended, b.crashed, b.leftover), where
