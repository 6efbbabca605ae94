"""Driving the controller through a catch-up as the sites would: ``cu-done``, then ``folded``
from every party that gets the ``psync`` (every live site for a consumer stage, the egress for
the last)."""

from __future__ import annotations

from sparkflux.control.controller import Controller
from sparkflux.control.events import Action, CatchUp, CatchUpDone, Folded
from sparkflux.dataflow.placement import DRIVER


def finish(c: Controller, cu: CatchUp, now: float, nbytes: int = 0) -> list[Action]:
    """The catch-up ``cu`` completes: its ``cu-done``, then every party's ``folded``."""
    out = c.handle(CatchUpDone(stage=cu.stage, q=cu.q, r=cu.r, nbytes=nbytes, now=now))
    stage = cu.stage + 1
    parties = [DRIVER] if stage == c.stages else sorted(set(c.view.members) - c.dead)
    for j in parties:
        out += c.handle(Folded(site=j, stage=stage, q=cu.q, c=cu.r, epoch=cu.epoch, now=now))
    return out
