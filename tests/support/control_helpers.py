"""Driving the controller as the sites would: four sites registered and ready (``started``),
a catch-up through ``cu-done`` and then ``folded`` from every party that gets the ``psync``
(every live site for a consumer stage, the egress for the last)."""

from __future__ import annotations

from sparkflux.control.controller import Controller, ControlOptions
from sparkflux.control.events import (
    Action,
    CatchUp,
    CatchUpDone,
    Folded,
    Move,
    Registered,
    SiteAddress,
    SiteReady,
)
from sparkflux.control.policy import PolicyConfig
from sparkflux.dataflow.placement import DRIVER, Layout

P = 8  # partitions of ``started``'s controller


def finish(c: Controller, cu: CatchUp, now: float, nbytes: int = 0) -> list[Action]:
    """The catch-up ``cu`` completes: its ``cu-done``, then every party's ``folded``."""
    out = c.handle(CatchUpDone(stage=cu.stage, q=cu.q, r=cu.r, nbytes=nbytes, now=now))
    stage = cu.stage + 1
    parties = [DRIVER] if stage == c.stages else sorted(set(c.view.members) - c.dead)
    for j in parties:
        out += c.handle(Folded(site=j, stage=stage, q=cu.q, c=cu.r, epoch=cu.epoch, now=now))
    return out


def started(balance: bool = True, window_s: float = 4.0) -> Controller:
    """A controller of 4 sites and ``P`` partitions, two copies each, every site ready."""
    policy = PolicyConfig(delta_start=1.0, delta_min=0.25, window_s=window_s)
    c = Controller(4, ha=True, layout=Layout(4, P, 2), stages=2,
                   options=ControlOptions(balance=balance, policy=policy))
    for s in range(4):
        c.handle(Registered(address=SiteAddress(site=s, attempt=0, host="h", port=s, pid=s),
                            now=0.0))
    for s in range(4):
        c.handle(SiteReady(site=s, attempt=0))
    return c


def moves_of(acts: list) -> list[Move]:
    return [a for a in acts if isinstance(a, Move)]
