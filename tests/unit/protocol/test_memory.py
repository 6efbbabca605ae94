"""A site's spilling decisions (``protocol/memory.py``), exactly: what goes to disk over the
budget, what comes back when it fits, and the round robin with t_gap when it does not."""

from __future__ import annotations

from sparkflux.protocol.memory import MIN_T_GAP_S, Load, Memory, Spill

A, B, C, D = (1, 0), (1, 1), (1, 2), (1, 3)
SIZES = {A: 100, B: 100, C: 100, D: 100}


def tracked(budget: int | None) -> Memory:
    m = Memory(budget=budget)
    m.track([A, B, C, D])
    return m


def test_within_the_budget_nothing_moves() -> None:
    m = tracked(400)
    assert m.plan(0.0, SIZES, other=0) == [] and m.resident == [A, B, C, D]


def test_over_the_budget_the_head_of_the_queue_goes_until_the_rest_fits() -> None:
    m = tracked(250)
    assert m.plan(0.0, SIZES, other=0) == [Spill(A), Spill(B)]
    assert m.resident == [C, D] and m.spilled == {A: 100, B: 100}
    assert m.writing == {A: 100, B: 100} and m.used(SIZES, 0) == 400  # the writer holds them
    m.written(A)
    m.written(B)
    assert m.used(SIZES, 0) == 200


def test_pinned_partitions_and_the_last_one_stay() -> None:
    m = tracked(50)
    assert m.plan(0.0, SIZES, other=0, pinned=frozenset({A})) == [Spill(B), Spill(C)]
    assert m.resident == [A, D]  # A pinned, D the last loaded: something must run


def test_a_spilled_partition_comes_back_when_it_fits() -> None:
    m = tracked(250)
    m.plan(0.0, SIZES, other=0)
    assert m.plan(0.1, SIZES, other=0) == []  # A is still being written
    m.written(A)
    m.written(B)
    m.budget = 300
    assert m.plan(0.2, SIZES, other=0) == [Load(A)] and m.loading == A
    assert m.plan(0.3, SIZES, other=0) == []  # one load at a time
    m.loaded(A, now=0.5)
    assert m.resident == [C, D, A] and abs(m.t_gap - 0.3) < 1e-9  # the load took 0.3 s


def test_round_robin_with_t_gap_when_nothing_fits() -> None:
    m = tracked(250)
    m.plan(0.0, SIZES, other=0)
    m.written(A)
    m.written(B)
    m.loaded_at = 0.0
    m.t_gap = 0.5
    assert m.plan(0.4, SIZES, other=50) == []  # C, D and 50 bytes of buffers: A does not fit
    assert m.plan(0.6, SIZES, other=50) == [Spill(C), Load(A)]  # C's turn on disk, A's back
    m.loaded(A, now=0.61)
    assert m.t_gap == MIN_T_GAP_S and m.resident == [D, A]
    assert list(m.spilled) == [B, C]


def test_buffers_over_the_budget_still_let_the_turns_go_round() -> None:
    """The input a spilled partition holds back counts against the budget; only its turn
    releases it, so the rotation goes on over budget."""
    m = tracked(100)
    assert m.plan(0.0, SIZES, other=0) == [Spill(A), Spill(B), Spill(C)]
    for k in (A, B, C):
        m.written(k)
    assert m.plan(1.0, SIZES, other=10_000) == [Spill(D), Load(A)]


def test_without_a_budget_everything_comes_back_one_at_a_time() -> None:
    m = tracked(250)
    m.plan(0.0, SIZES, other=0)
    m.budget = None
    assert m.plan(1.0, SIZES, other=0) == [Load(A)]
    assert m.plan(1.1, SIZES, other=0) == []
    m.loaded(A, 1.2)
    assert m.plan(1.3, SIZES, other=0) == [Load(B)]


def test_partitions_that_leave_leave_both_queues() -> None:
    m = tracked(250)
    m.plan(0.0, SIZES, other=0)
    m.track([B, C])
    assert m.resident == [C] and m.spilled == {B: 100} and m.writing == {B: 100}


def test_the_input_a_spilled_partition_receives_comes_back_with_it() -> None:
    m = tracked(250)
    m.plan(0.0, SIZES, other=0)
    m.written(A)
    m.written(B)
    m.add_input(A, 120)
    m.add_input(C, 50)  # C is in memory: nothing of it is on disk
    assert m.spilled == {A: 220, B: 100} and m.spilled_bytes == 320
    m.budget = 420  # C, D and A with its input fit: 420 bytes
    assert m.plan(0.1, SIZES, other=0) == [Load(A)]


def test_a_late_answer_to_an_earlier_load_is_not_taken_for_the_current_one() -> None:
    """``SiteCore`` under a budget below anything (its partitions are empty): they go to
    disk but the last; once
    written, the head comes back in turn (``LoadPartition`` number 1). An answer numbered
    otherwise (an earlier load of the same partition, come late) installs nothing."""
    from sparkflux.dataflow.placement import Layout
    from sparkflux.protocol.messages import SPILL, LoadPartition, StoredPartition
    from sparkflux.protocol.site import SiteCore
    from sparkflux.sim.workload import tiny_plan

    plan = tiny_plan()[0]
    core = SiteCore(2, plan, Layout(plan.sites, plan.partitions, 2))
    core.memory.budget = -1
    spilled = {(m.stage, m.q): m for o in core.memory_tick(0.0)
               if isinstance(m := o.message, StoredPartition) and m.checkpoint == SPILL}
    assert spilled and core.memory.loading is None
    for s, q in spilled:
        core.spill_written(s, q)
    [load] = [o.message for o in core.memory_tick(1.0) if isinstance(o.message, LoadPartition)]
    assert load.seq == core.memory.loads == 1
    snap = spilled[(load.stage, load.q)].snapshot
    assert core.spill_loaded(load.stage, load.q, snap, 1.1, seq=0) == []
    assert core.memory.loading == (load.stage, load.q)  # still waiting for its own answer
    core.spill_loaded(load.stage, load.q, snap, 1.2, seq=1)
    assert core.memory.loading is None and (load.stage, load.q) in core.memory.resident
