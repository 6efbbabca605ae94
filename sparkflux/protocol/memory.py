"""A site's memory under its budget: which whole mini-partitions go to disk and which come back
(thesis ch. 4, FL-Cons' spilling; docs/memory.md).

A site holds the state of every (stage, partition) copy it hosts. When the measured bytes (the
operators' ``partition_info``, plus the rows the site buffers: pending input, FH-Prod buffers)
exceed its budget, whole partitions go to disk: their operators' state is taken and written
asynchronously, and the partition's merge holds where it stands while its input keeps being
received and acknowledged (so Flux-HA's guarantees hold). A spilled partition comes back when
there is room, or in turn: **local round robin with t_gap** -- when the partition loaded last
has been in memory longer than ``t_gap`` (the measured time to load one, the thesis' rule of
thumb), the head of the in-memory queue is evicted and the head of the on-disk queue loaded;
it then processes its pending input. The input a spilled partition receives goes to disk
beside its state once the site's pending rows pass a share of the budget
(``SiteCore.memory_tick``), and comes back with its load (``add_input`` counts it). Spills
and loads are asynchronous: the site keeps processing its other partitions meanwhile. One
load runs at a time.

``Memory.plan`` is the whole decision, from the sizes, the budget and the clock; the site core
carries it out (``SiteCore.memory_tick``). Rules, in order:

1. No budget: every spilled partition is loaded back, one at a time.
2. Over budget: the in-memory partitions leave from the head of the queue (loaded longest
   ago), skipping pinned ones (a checkpoint's cut pending, a catch-up), until the rest
   fits; the one loaded last stays while others are on disk (something must run).
3. Nothing loading: the head of the on-disk queue is loaded if it fits (its size when it
   was spilled); else, once the partition loaded last has been in memory ``t_gap``, the
   head of the in-memory queue is evicted and the head on disk loaded, over budget or not:
   the input a spilled partition holds back is counted too, and only its turn releases it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Key = tuple[int, int]  # (stage, partition)
T_GAP_S = 0.25  # the rotation's t_gap until a load has been timed
MIN_T_GAP_S = 0.05


@dataclass(frozen=True, slots=True)
class Spill:
    key: Key


@dataclass(frozen=True, slots=True)
class Load:
    key: Key


@dataclass
class Memory:
    """One site's spilling state: its budget (bytes; None: none), the in-memory partitions in
    load order (head: loaded longest ago), the spilled ones in spill order with their sizes,
    the writes and the load in flight, and when the last load ended."""

    budget: int | None = None
    t_gap: float = T_GAP_S
    resident: list[Key] = field(default_factory=list)
    spilled: dict[Key, int] = field(default_factory=dict)  # on disk (or being written)
    writing: dict[Key, int] = field(default_factory=dict)  # bytes still held by the writer
    loading: Key | None = None
    load_started: float = 0.0
    loaded_at: float = 0.0
    spills: int = 0
    loads: int = 0  # also the number of the load under way (``LoadPartition.seq``)
    input_spills: int = 0  # batches of a spilled partition's input written beside it

    def track(self, keys: list[Key]) -> None:
        """The partitions hosted now: new ones join the in-memory queue's tail, gone ones
        leave both queues."""
        present = set(keys)
        self.resident = [k for k in self.resident if k in present]
        for k in list(self.spilled):
            if k not in present:
                del self.spilled[k]
                self.writing.pop(k, None)
        known = set(self.resident) | set(self.spilled)
        if self.loading is not None and self.loading not in present:
            self.loading = None
        self.resident += [k for k in keys if k not in known and k != self.loading]

    def used(self, sizes: Mapping[Key, int], other: int) -> int:
        """Bytes held: the in-memory partitions, what the writer still holds, ``other``."""
        return sum(sizes.get(k, 0) for k in self.resident) + sum(self.writing.values()) + other

    def plan(self, now: float, sizes: Mapping[Key, int], other: int,
             pinned: frozenset[Key] = frozenset()) -> list[Spill | Load]:
        """What to spill and load now (module docstring's rules)."""
        out: list[Spill | Load] = []
        if self.budget is None:  # rule 1
            if self.spilled and self.loading is None:
                out.append(self._load(next(iter(self.spilled)), now))
            return out
        # what the writer still holds is leaving: more spills would not free it sooner
        used = self.used(sizes, other) - sum(self.writing.values())
        if used > self.budget:  # rule 2
            keep = self.resident[-1] if self.resident else None
            for k in list(self.resident):
                if used <= self.budget:
                    break
                if k in pinned or k == keep:
                    continue
                used -= sizes.get(k, 0)
                out.append(self._spill(k, sizes.get(k, 0)))
        if not self.spilled or self.loading is not None:
            return out
        head = next(iter(self.spilled))
        if head in self.writing:
            return out  # a load reads what the writer wrote: not yet
        if used + sum(self.writing.values()) + self.spilled[head] <= self.budget:  # rule 3
            out.append(self._load(head, now))
        elif now - self.loaded_at >= self.t_gap:  # rule 3: its turn
            victim = next((k for k in self.resident if k not in pinned), None)
            if victim is not None:
                out.append(self._spill(victim, sizes.get(victim, 0)))
            out.append(self._load(head, now))
        return out

    def _spill(self, k: Key, nbytes: int) -> Spill:
        self.resident.remove(k)
        self.spilled[k] = nbytes
        self.writing[k] = nbytes
        self.spills += 1
        return Spill(k)

    def _load(self, k: Key, now: float) -> Load:
        del self.spilled[k]
        self.loading, self.load_started = k, now
        self.loads += 1
        return Load(k)

    def add_input(self, k: Key, nbytes: int) -> None:
        """Rows received for spilled partition ``k`` went to disk beside its state: they
        come back with it, so its size on disk grows."""
        if k in self.spilled:
            self.spilled[k] += nbytes
            self.input_spills += 1

    def written(self, k: Key) -> None:
        """The writer has the partition on disk: its bytes are free."""
        self.writing.pop(k, None)

    def loaded(self, k: Key, now: float) -> None:
        """The partition is back in memory (the queue's tail); ``t_gap`` follows the
        measured load time."""
        if self.loading == k:
            self.loading = None
            self.t_gap = max(MIN_T_GAP_S, now - self.load_started)
        self.loaded_at = now
        if k not in self.resident:
            self.resident.append(k)

    @property
    def spilled_bytes(self) -> int:
        return sum(self.spilled.values())
