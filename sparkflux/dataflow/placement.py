"""Replica placement: chained declustering over mini-partitions (thesis §3.1, digest §3), then
whatever the moves of unified Flux made of it (thesis ch. 5, digest §7).

Initially replica ``r`` of mini-partition ``q`` (the same for every stage) lives on site
``(q + r) mod N``: the primary of partition k on site k, its copies on k+1, ..., k+K-1 for K
replicas. Two replicas of a partition never share a site, and with N = 4 and K = 2 one site
failure produces all four survival cases of a partition-pair quartet. With K replicas any
K - 1 sites may fail at once and every partition keeps a copy. A move (load balancing, or
recovery onto the surviving sites) re-places one replica; every party keeps its own copy of
the table and changes it when it handles the move, in its own message order. The driver
(ingress and egress) is ``DRIVER``.
"""

from __future__ import annotations

import numpy as np

from sparkflux.operators.base import PlanError

DRIVER = -1


class Layout:
    """Where every replica of every mini-partition lives (``site[q, r]``, mutable by moves)."""

    def __init__(self, sites: int, partitions: int, replicas: int) -> None:
        if replicas < 1:
            raise PlanError(f"replicas must be at least 1 (got {replicas})")
        if sites < replicas:
            raise PlanError(f"--ha flux keeps {replicas} replicas of every partition on "
                            f"different sites: use --sites >= {replicas} or fewer --replicas")
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

    def others(self, part: int, replica: int) -> list[int]:
        """The sites of the partition's other replicas."""
        return [int(s) for r, s in enumerate(self._site[part]) if r != replica]

    def move(self, part: int, replica: int, site: int) -> None:
        """Re-place one replica; the others must live elsewhere (never two on one site)."""
        if site in self.others(part, replica):
            raise PlanError(f"partition {part}: two replicas would be on site {site}")
        self._site[part, replica] = site

    def load(self, table: list[list[int]] | np.ndarray) -> None:
        self._site[...] = np.asarray(table, dtype=np.int32)
