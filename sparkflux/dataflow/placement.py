"""Replica placement: chained declustering over mini-partitions (thesis §3.1, digest §3), then
whatever the moves of unified Flux made of it (thesis ch. 5, digest §7).

Initially replica ``r`` of mini-partition ``q`` (the same for every stage) lives on site
``(q + r) mod N``: the primary of partition k on site k, its copy on k+1. Two replicas of a
partition never share a site, and with N = 4 one site failure produces all four survival
cases of a partition-pair quartet. A move (load balancing, or recovery onto the surviving
sites) re-places one replica; every party keeps its own copy of the table and changes it when
it handles the move, in its own message order. The driver (ingress and egress) is ``DRIVER``.
"""

from __future__ import annotations

import numpy as np

from sparkflux.operators.base import PlanError

DRIVER = -1


class Layout:
    """Where every replica of every mini-partition lives (``site[q, r]``, mutable by moves)."""

    def __init__(self, sites: int, partitions: int, replicas: int) -> None:
        if replicas not in (1, 2):
            raise PlanError(f"replicas must be 1 or 2 (got {replicas})")
        if replicas == 2 and sites < 2:
            raise PlanError("--ha flux keeps two replicas on different sites: use --sites >= 2")
        self.sites = sites
        self.partitions = partitions
        self.replicas = replicas
        q = np.arange(partitions)[:, None]
        r = np.arange(replicas)[None, :]
        self._site = ((q + r) % sites).astype(np.int32)

    def copy(self) -> Layout:
        out = Layout(self.sites, self.partitions, self.replicas)
        out._site = self._site.copy()
        return out

    def site_of(self, part: int, replica: int) -> int:
        return int(self._site[part, replica])

    def table(self) -> np.ndarray:
        """``site[q, r]`` for every partition and replica (int32). The live array: role arrays
        that hold it see every move."""
        return self._site

    def hosted(self, site: int) -> dict[int, int]:
        """The partitions site ``site`` holds a replica of, as {partition: replica}."""
        q, r = np.nonzero(self._site == site)
        return {int(a): int(b) for a, b in zip(q, r, strict=True)}

    def only(self, part: int, replica: int) -> np.ndarray:
        """A ``[P, R]`` mask of just this replica (what a move fails)."""
        mask = np.zeros(self._site.shape, dtype=bool)
        mask[part, replica] = True
        return mask

    def move(self, part: int, replica: int, site: int) -> None:
        """Re-place one replica; its partner must live elsewhere (never two on one site)."""
        other = self._site[part, 1 - replica] if self.replicas == 2 else -2
        if site == other:
            raise PlanError(f"partition {part}: both replicas would be on site {site}")
        self._site[part, replica] = site

    def load(self, table: list[list[int]] | np.ndarray) -> None:
        self._site[...] = np.asarray(table, dtype=np.int32)
