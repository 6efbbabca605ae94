"""The controller's events and actions (``control/events.py``): frozen keyword-only records;
a site's failure domain comes from its address; the defaults the controller relies on."""

from __future__ import annotations

import dataclasses

import pytest

from sparkflux.control import events as ev
from sparkflux.dataflow.placement import Domain


def addr(**kw: object) -> ev.SiteAddress:
    return ev.SiteAddress(**{"site": 1, "attempt": 0, "host": "10.0.0.5", "port": 7000,
                             "pid": 42, **kw})


def test_a_sites_domain_is_its_machine_and_executor() -> None:
    assert addr().domain() == Domain(host="10.0.0.5", executor="")  # unknown: the address
    assert addr(machine="worker-2", executor="exec-7").domain() == Domain(
        host="worker-2", executor="exec-7")
    assert addr(executor="exec-7").domain() == Domain(host="10.0.0.5", executor="exec-7")


def test_events_and_actions_are_frozen_keyword_only_records() -> None:
    kinds = {*ev.Event.__args__, *ev.Action.__args__, ev.SiteAddress, ev.View}
    assert len(kinds) >= 20
    for t in kinds:
        assert t.__dataclass_params__.frozen and hasattr(t, "__slots__"), t
        assert all(f.kw_only for f in dataclasses.fields(t)), t
    with pytest.raises(dataclasses.FrozenInstanceError):
        addr().port = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        ev.Tick(1.0)  # type: ignore[misc]


def test_the_defaults() -> None:
    v = ev.View(number=1)
    assert v.members == {} and v.members is not ev.View(number=1).members
    assert ev.InstallView(view=v).ring == ()
    assert ev.Move(q=1, r=0, src=0, dst=2, epoch=3, reason="balance").survivor == -1
    assert ev.CatchUp(stage=0, q=1, r=0, survivor=1, epoch=2).retained is False
    assert ev.Suspected(site=1, attempt=0, by=2, reason="x", now=1.0).registered == -1
