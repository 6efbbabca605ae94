"""The message of a run that cannot go on: a failure left a partition of some stage with no
live and complete replica (the controller's ``Abort``, raised before the view change that
would make the egress notice)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from sparkflux.dataflow.placement import NOWHERE, Layout


def lost_partition(layout: Layout, stages: int, complete: Callable[[int, int, int], bool],
                   dead: Collection[int], site: int, recovery: str) -> str | None:
    """Why the run cannot go on, if ``site``'s failure left a partition of some stage
    with no live and complete replica: the message the user sees (the runtime carries
    out the ``Abort`` before the view change that would make the egress notice). It names
    the failed sites that held the lost partitions (and the live ones whose copies were
    still being caught up), the partitions per stage as the plan lists the stages (the
    egress is no stage), and what makes such failures survivable."""
    replicas = layout.replicas
    lost: dict[int, list[int]] = {}  # stage -> partitions with no complete live replica
    failed: set[int] = set()  # failed sites that held a copy of a lost partition
    rebuilding: set[int] = set()  # live sites whose copy was not caught up yet
    for s in range(stages):
        for q in range(layout.partitions):
            holders = [layout.site_of(q, r) for r in range(layout.columns)
                       if layout.site_of(q, r) != NOWHERE]
            if any(complete(s, q, r) for r in range(layout.columns)):
                continue
            lost.setdefault(s, []).append(q)
            failed |= {j for j in holders if j in dead}
            rebuilding |= {j for j in holders if j not in dead}
    if not lost:
        return None
    who = f"{_sites(sorted(failed or {site}))} failed"
    if rebuilding:
        who += (f" while {_sites(sorted(rebuilding))} "
                f"{'was' if len(rebuilding) == 1 else 'were'} still being caught up")
    elif len(failed) > 1:
        who += (" before either could be recovered" if len(failed) == 2
                else " before any of them could be recovered")
    gone = "; ".join(f"stage {s}: partition{'s' if len(qs) > 1 else ''} {_some(qs)}"
                     for s, qs in sorted(lost.items()))
    sooner = (": standbys launched up front (--spare-sites) start a recovery at once "
              "instead of after Spark restarts the failed task" if recovery ==
              "standby" else "")
    n = layout.sites
    start = ("where --placement latency put it, by the latency matrix" if layout.deployed else
             f"on site (q + r) mod {n}" if layout.ring == tuple(range(n)) else
             f"on site ring[(q + r) mod {n}], ring {', '.join(map(str, layout.ring))}")
    return (f"{who}; no complete replica is left of {gone}. Their state is lost, so the "
            f"run cannot go on. Each partition has {replicas} "
            f"replica{'s' if replicas > 1 else ''} (at the start, replica r of partition q "
            f"{start}), so the run survives {replicas} sites "
            f"that share a partition failing only if the first is recovered before the "
            f"last fails. Have fewer sites fail at once, recover sooner{sooner}, or keep "
            f"more replicas (--replicas {replicas + 1} survives any {replicas} sites "
            f"failing at once; it needs --sites >= {replicas + 1}).")


def _sites(sites: Sequence[int]) -> str:
    """``site 1``, ``sites 1 and 2`` or ``sites 0, 1 and 2``."""
    if len(sites) == 1:
        return f"site {sites[0]}"
    return f"sites {', '.join(map(str, sites[:-1]))} and {sites[-1]}"


def _some(items: Sequence[int], at_most: int = 8) -> str:
    """``1, 5, 9`` or ``1, 5, 9, ... (12 in all)``."""
    shown = ", ".join(map(str, items[:at_most]))
    return shown if len(items) <= at_most else f"{shown}, ... ({len(items)} in all)"
