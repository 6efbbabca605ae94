"""The memory policy, the hybrid one's filter and the reason each round gives for its policy
(``control/memory_policy.py``), exactly."""

from __future__ import annotations

import numpy as np

from sparkflux.control.memory_policy import (
    SiteMemory,
    any_short,
    plan_memory_moves,
    why,
    with_room,
)
from sparkflux.control.policy import PlannedMove
from sparkflux.dataflow.placement import Layout

P = 8
TABLE = Layout(4, P, 2).table()  # partition q on sites q mod 4 and q + 1 mod 4


def site(budget: int | None, used: int, spilled: int = 0, disk: frozenset[int] = frozenset(),
         **sizes: int) -> SiteMemory:
    b = np.zeros(P, dtype=np.int64)
    for q, n in sizes.items():
        b[int(q[1:])] = n
    return SiteMemory(budget, used, spilled, b, disk)


def test_nobody_short_nothing_moves() -> None:
    mem = {j: site(1000, 500) for j in range(4)}
    assert not any_short(mem) and plan_memory_moves(mem, TABLE) == []


def test_the_short_site_gives_its_largest_fitting_partition_to_each_site_with_room() -> None:
    # site 2 holds copies of partitions 1, 2, 5, 6; over budget, 300 bytes on disk
    mem = {0: site(1000, 200), 1: site(1000, 600), 3: site(1000, 300),
           2: site(500, 700, 300, q1=100, q2=400, q5=900, q6=200)}
    assert any_short(mem)
    moves = plan_memory_moves(mem, TABLE)
    # receivers by spare: 0 (800), 3 (700), 1 (400); the donor's sizes: 5 (900, fits nowhere),
    # 2 (400) to site 0; then site 3: 6 has its other copy there, so 1 (100); then site 1: 6
    assert [(m.q, m.donor, m.receiver) for m in moves] == [(2, 2, 0), (1, 2, 3), (6, 2, 1)]
    assert [m.r for m in moves] == [0, 1, 0]  # the donor's column of each


def test_a_receiver_short_itself_takes_nothing_and_recent_partitions_stay() -> None:
    mem = {0: site(100, 200), 1: site(1000, 0), 2: site(1000, 900, q1=50, q2=50),
           3: site(None, 0)}
    moves = plan_memory_moves(mem, TABLE, recent=frozenset({0}))
    # site 0 (short) holds 0, 3, 4, 7; 0 is recent; the largest of the rest is 0 bytes here:
    assert moves == []
    mem[0] = site(100, 200, q3=80, q4=60)
    # receivers: 3 (no budget) takes 4 (3 holds a copy of 3), 1 takes 3; site 2 has room for
    # nothing left, and it is not short itself, so it gives nothing
    assert [(m.q, m.receiver) for m in plan_memory_moves(mem, TABLE)] == [(4, 3), (3, 1)]


def test_the_hybrids_cpu_moves_need_room_at_the_receiver() -> None:
    mem = {0: site(1000, 950), 1: site(1000, 100, q1=300, q2=100)}
    planned = [PlannedMove(1, 0, 1, 0, 10, 0.9, 0.5), PlannedMove(2, 1, 1, 0, 10, 0.9, 0.5)]
    assert with_room(planned, mem) == []  # 50 bytes of room for 300 or 100
    mem[0] = site(1000, 700)
    assert with_room(planned, mem) == [planned[0]]  # 300 fits, then 100 does not


def test_partitions_in_memory_go_before_those_on_disk() -> None:
    # site 2 holds 1, 2, 5, 6; 5 (the largest) and 2 are on disk: 6 goes first, then 1
    mem = {0: site(5000, 0), 3: site(4000, 0),
           2: site(500, 700, 1300, frozenset({2, 5}), q1=100, q2=400, q5=900, q6=200)}
    moves = plan_memory_moves(mem, TABLE)
    assert [(m.q, m.receiver) for m in moves] == [(6, 0), (1, 3)]


def test_each_round_says_which_policy_runs_and_why() -> None:
    calm = {0: site(1000, 500), 1: site(None, 0)}
    short = {0: site(1000, 1500, 250_000), 1: site(1000, 10)}
    assert why({0: site(None, 5)}, "hybrid") == ("cpu", "no site has a memory budget")
    assert why(calm, "hybrid") == (
        "cpu", "no site is short of memory (moves only where the receiver has room)")
    assert why(short, "hybrid") == (
        "memory", "short of memory: site 0 holds 0.00 MB of 0.00 MB with 0.25 MB on disk")
    assert why(short, "cpu") == ("cpu", "--policy cpu")
    assert why(calm, "memory") == ("memory", "--policy memory")
