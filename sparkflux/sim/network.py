"""Simulated FIFO links between nodes (sites and the driver) with a seeded scheduler.

A link is a FIFO queue per ordered pair of nodes and channel (TCP's guarantee per
connection, DESIGN.md §4). Channel ``DATA`` is the pair's data connection; channel
``CONTROL`` is the driver's control connection to a site, which the runtime keeps apart so
that a ``move`` or a ``fail`` never waits behind input the site has not read yet, or between
two sites the StateMover's connection (a snapshot one way, ``installed`` back): nothing
orders the two channels. The scheduler picks, with the seed's random generator, which
non-empty link delivers its head next, so every interleaving the real network allows can
occur, and a seed replays exactly.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

DATA, CONTROL = 0, 1


@dataclass
class Network:
    rng: np.random.Generator
    links: dict[tuple[int, int, int], deque[Any]] = field(default_factory=dict)
    delivered: int = 0

    def send(self, src: int, dst: int, message: Any, channel: int = DATA) -> None:
        self.links.setdefault((src, dst, channel), deque()).append(message)

    def busy(self) -> list[tuple[int, int, int]]:
        return [k for k, q in self.links.items() if q]

    def pop(self) -> tuple[int, int, Any] | None:
        """Deliver the head of a randomly chosen non-empty link."""
        busy = self.busy()
        if not busy:
            return None
        link = busy[int(self.rng.integers(len(busy)))]
        self.delivered += 1
        return link[0], link[1], self.links[link].popleft()

    def pop_to(self, dst: int) -> tuple[int, Any] | None:
        """Deliver the head of a random non-empty link into ``dst`` whose head is a protocol
        message (not a driver control tuple), or None."""
        busy = [k for k, q in self.links.items()
                if k[1] == dst and q and not isinstance(q[0], tuple)]
        if not busy:
            return None
        link = busy[int(self.rng.integers(len(busy)))]
        self.delivered += 1
        return link[0], self.links[link].popleft()

    def drop_to(self, node: int) -> None:
        """A crashed node receives nothing more."""
        for (_, dst, _), q in self.links.items():
            if dst == node:
                q.clear()

    def forget(self, node: int) -> None:
        """A new process takes the node's place: nothing of the old one's traffic remains."""
        for (src, dst, _), q in self.links.items():
            if node in (src, dst):
                q.clear()

    def drop_some_from(self, node: int) -> None:
        """A crash loses a random suffix of what the node had sent but not yet delivered."""
        for (src, _, _), q in self.links.items():
            if src == node and q:
                keep = int(self.rng.integers(len(q) + 1))
                while len(q) > keep:
                    q.pop()
