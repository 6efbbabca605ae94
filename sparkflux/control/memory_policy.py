"""The global memory policy and the hybrid one (thesis ch. 4: memory; docs/memory.md).

Beside the CPU policy (``policy.py``), run in the same balancing rounds from the same
samples (``Stats``), which carry each site's memory: its budget, the bytes it holds, the bytes
of its partitions on disk, and the state bytes of each partition it holds in memory.

**Memory policy** (the thesis' global memory policy): sites ranked by spare memory (budget
minus what they hold; a site with partitions on disk counts those too, as they want to come
back), the one with the least paired with the one with the most, inward; on each pair, the
donor's partitions in memory first (moving one frees its memory at once, so the donor can
load one from disk), then those on disk, each by size, largest first, and the first one
whose move reduces the pair's imbalance and fits in the receiver moves, by the same
make-before-break move as load balancing. Each receiver takes at most one partition a round
(from the donor shortest of memory first); only donors short of memory (over budget, or
with partitions on disk) give, and only to sites that are not.

**Hybrid** (the default with ``--ha flux``): the memory policy runs while any site is short
of memory; otherwise the CPU policy does, and a move of it is kept only where the receiver has
room for the partition's state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from sparkflux.control.policy import PlannedMove
from sparkflux.dataflow.placement import NOWHERE, Domain, clash

POLICIES = ("cpu", "memory", "hybrid")


@dataclass(frozen=True, slots=True)
class SiteMemory:
    """One site's memory in a round's sample: its budget (None: none), the bytes it holds,
    the bytes of its partitions on disk, each partition's state bytes, in memory or on
    disk (all stages; 0 for a partition it does not hold), and which partitions it has on
    disk (any stage)."""

    budget: int | None
    used: int
    spilled: int
    part_bytes: np.ndarray
    on_disk: frozenset[int] = frozenset()

    @property
    def spare(self) -> float:
        """Budget left, less what waits on disk to come back (inf: no budget)."""
        if self.budget is None:
            return float("inf")
        return float(self.budget - self.used - self.spilled)

    @property
    def short(self) -> bool:
        return self.budget is not None and (self.spilled > 0 or self.used > self.budget)


def any_short(memory: Mapping[int, SiteMemory]) -> bool:
    """Whether some site is short of memory (the hybrid policy's switch)."""
    return any(m.short for m in memory.values())


def why(memory: Mapping[int, SiteMemory], mode: str) -> tuple[str, str]:
    """The policy a round runs (``cpu`` or ``memory``) under ``--policy mode``, and why, in
    words for the round's record: which sites are short of memory and by how much."""
    if not any(m.budget is not None for m in memory.values()):
        return "cpu", "no site has a memory budget"
    short = [f"site {j} holds {m.used / 1e6:.2f} MB of {(m.budget or 0) / 1e6:.2f} MB"
             + (f" with {m.spilled / 1e6:.2f} MB on disk" if m.spilled else "")
             for j, m in sorted(memory.items()) if m.short]
    if mode == "memory":
        return "memory", "--policy memory" + (f": {'; '.join(short)}" if short else "")
    if mode == "cpu":
        return "cpu", "--policy cpu"
    if short:
        return "memory", "short of memory: " + "; ".join(short)
    return "cpu", "no site is short of memory (moves only where the receiver has room)"


def plan_memory_moves(memory: Mapping[int, SiteMemory], table: np.ndarray,
                      recent: frozenset[int] = frozenset(),
                      domains: Mapping[int, Domain] | None = None) -> list[PlannedMove]:
    """One movement phase of the memory policy (module docstring). ``recent``: partitions
    moved in the last rounds stay put; ``domains``: a copy never moves where it would share
    a failure domain with another copy of its partition more than it does now."""
    sites = sorted(memory, key=lambda j: (memory[j].spare, j))
    spare = {j: memory[j].spare for j in sites}
    planned: list[PlannedMove] = []
    taken: set[int] = set()  # receivers given a partition this round
    moved: set[int] = set()
    for d in sites:
        if not memory[d].short:
            break  # sorted by spare: the rest are not short either
        for r in sorted(sites, key=lambda j: (-spare[j], j)):
            if r == d or r in taken or memory[r].short or spare[r] <= spare[d]:
                continue
            move = _first_fit(d, r, memory[d], spare, table, recent | moved, domains)
            if move is None:
                continue
            planned.append(move)
            taken.add(r)
            moved.add(move.q)
    return planned


def _first_fit(d: int, r: int, donor: SiteMemory, spare: dict[int, float],
               table: np.ndarray, skip: frozenset[int] | set[int],
               domains: Mapping[int, Domain] | None) -> PlannedMove | None:
    """The donor's first partition, in memory before on disk and largest first, that fits
    in the receiver and reduces the pair's imbalance (``spare`` updated), or None."""
    sizes = donor.part_bytes
    order = sorted(range(sizes.size), key=lambda q: (q in donor.on_disk, -int(sizes[q]), q))
    for q in order:
        size = float(sizes[q])
        if size <= 0 or q in skip or size > spare[r]:
            continue
        row = [int(s) for s in table[q]]
        if d not in row or r in row:
            continue  # not the donor's, or the receiver has a copy already
        if spare[r] != float("inf") and abs((spare[d] + size) - (spare[r] - size)) >= abs(
                spare[d] - spare[r]):
            continue  # it would not reduce the imbalance
        c = row.index(d)
        others = [s for k, s in enumerate(row) if k != c and s != NOWHERE]
        if domains and clash(r, others, domains) > clash(d, others, domains):
            continue
        spare[d] += size
        spare[r] -= size
        return PlannedMove(q=q, r=c, donor=d, receiver=r, n_p=int(size),
                           u_donor=spare[d], u_receiver=spare[r])
    return None


def with_room(planned: list[PlannedMove], memory: Mapping[int, SiteMemory]
              ) -> list[PlannedMove]:
    """The CPU policy's moves whose receivers have room for the partition's state."""
    spare = {j: m.spare for j, m in memory.items()}
    kept = []
    for m in planned:
        size = float(memory[m.donor].part_bytes[m.q]) if m.donor in memory else 0.0
        if m.receiver not in spare or size <= spare[m.receiver]:
            kept.append(m)
            if m.receiver in spare:
                spare[m.receiver] -= size
    return kept
