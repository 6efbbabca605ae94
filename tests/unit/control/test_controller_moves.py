"""The controller's moves, made before they break: the exact actions (a sans-I/O core driven by
hand, as the sites and the egress would).

Partition 1 of a two-stage dataflow has copy 0 on site 1 and copy 1 on site 2 (chained
declustering over 4 sites) and its free column 2. Moving copy 0 to site 3 builds copy 2 there
from copy 1, and retires copy 0 only once copy 2 is caught up in both stages and folded in by
every party: each live site for stage 1 (the consumer stage the sites host roles of) and the
egress for the last.
"""

from __future__ import annotations

from sparkflux.control.controller import Controller, ControlOptions
from sparkflux.control.events import (
    CatchUp,
    CatchUpDone,
    ConnectionClosed,
    FailSites,
    Folded,
    Move,
    Moved,
    Registered,
    SiteAddress,
    SiteReady,
    Tick,
)
from sparkflux.dataflow.placement import DRIVER, NOWHERE, Layout
from tests.support.control_helpers import finish


def started() -> Controller:
    c = Controller(4, ha=True, layout=Layout(4, 8, 2), stages=2,
                   options=ControlOptions(heartbeat_timeout=1e9))
    for s in range(4):
        c.handle(Registered(address=SiteAddress(site=s, attempt=0, host="h", port=s, pid=s),
                            now=0.0))
    for s in range(4):
        c.handle(SiteReady(site=s, attempt=0))
    c.handle(Tick(now=1.0))
    return c


def built(c: Controller) -> tuple[Move, list[CatchUp]]:
    """Move copy 0 of partition 1 to site 3; every site confirms it."""
    [move] = c.request_moves([(1, 0, 3)])
    assert move == Move(q=1, r=2, src=NOWHERE, dst=3, epoch=1, reason="balance", survivor=1)
    assert c.layout is not None and c.layout.table()[1].tolist() == [1, 2, 3]
    cus = c.handle(*[Moved(site=j, epoch=1, now=1.1) for j in range(4)])
    assert cus == [CatchUp(stage=0, q=1, r=2, survivor=2, epoch=1, retained=True)]
    return move, cus


def test_the_old_copy_is_retired_only_after_every_fold_in() -> None:
    c = started()
    _, [cu0] = built(c)
    [cu1] = finish(c, cu0, now=1.2)  # stage 0 caught up and folded in by every site
    assert cu1 == CatchUp(stage=1, q=1, r=2, survivor=2, epoch=1, retained=True)
    # the last stage's cu-done: nothing is retired while the egress has not folded it in
    assert c.handle(CatchUpDone(stage=1, q=1, r=2, nbytes=0, now=1.3)) == []
    m = c.moving[1]
    assert m.end == 1.3 and m.retired is None and c._complete_copies(1) == 3
    assert c.handle(Folded(site=DRIVER, stage=2, q=1, c=2, epoch=1, now=1.4)) == [
        Move(q=1, r=0, src=1, dst=NOWHERE, epoch=2, reason="retire")]
    assert c.layout is not None and c.layout.table()[1].tolist() == [NOWHERE, 2, 3]
    assert not c.moving and c.moves == [m] and m.short_s == 0.0 and m.retired == 1.4


def test_a_fold_in_of_another_incarnation_counts_for_nothing() -> None:
    c = started()
    _, [cu0] = built(c)
    assert c.handle(CatchUpDone(stage=0, q=1, r=2, nbytes=0, now=1.2))[0].stage == 1
    for j in range(4):  # an earlier incarnation's psync, or another copy's
        assert c.handle(Folded(site=j, stage=1, q=1, c=2, epoch=0, now=1.2)) == []
        assert c.handle(Folded(site=j, stage=1, q=1, c=1, epoch=1, now=1.2)) == []
    c.handle(CatchUpDone(stage=1, q=1, r=2, nbytes=0, now=1.3))
    assert c.handle(Folded(site=DRIVER, stage=2, q=1, c=2, epoch=1, now=1.4)) == []
    assert c.moving[1].retired is None  # the sites' fold-ins of stage 1 are still missing


def test_a_site_failing_while_the_parties_fold_in_is_not_waited_for() -> None:
    """Site 0, a bystander, fails before its fold-in of stage 1 came: the others' suffice."""
    c = started()
    _, [cu0] = built(c)
    c.handle(CatchUpDone(stage=0, q=1, r=2, nbytes=0, now=1.2))
    for j in (1, 2, 3):
        c.handle(Folded(site=j, stage=1, q=1, c=2, epoch=1, now=1.2))
    c.handle(CatchUpDone(stage=1, q=1, r=2, nbytes=0, now=1.3))
    assert c.handle(Folded(site=DRIVER, stage=2, q=1, c=2, epoch=1, now=1.3)) == []
    acts = c.handle(ConnectionClosed(site=0, attempt=0, reason="killed", now=1.5))
    assert isinstance(acts[0], FailSites)
    assert Move(q=1, r=0, src=1, dst=NOWHERE, epoch=2, reason="retire") in acts
    assert c.moves[0].short_s == 0.0


def test_the_build_is_given_up_when_its_survivor_fails_while_folding_in() -> None:
    """Site 2 (copy 1, which copy 2 is built from) fails after the last cu-done, before the
    egress folded copy 2 in: copy 2 may lack rows only copy 1 had, so it is retired, and
    copy 0, never retired, is the partition's complete copy."""
    c = started()
    _, [cu0] = built(c)
    [cu1] = finish(c, cu0, now=1.2)
    c.handle(CatchUpDone(stage=1, q=1, r=2, nbytes=0, now=1.3))
    acts = c.handle(ConnectionClosed(site=2, attempt=0, reason="killed", now=1.5))
    assert isinstance(acts[0], FailSites) and not c.aborted
    assert Move(q=1, r=2, src=3, dst=NOWHERE, epoch=2, reason="retire") in acts
    assert c.layout is not None and c.layout.table()[1].tolist() == [1, 2, NOWHERE]
    [m] = c.moves
    assert m.abandoned == "site 2, which it was being built from, failed" and m.short_s == 0.0


def test_the_old_copys_site_failing_retires_it_and_the_build_goes_on() -> None:
    c = started()
    _, [cu0] = built(c)
    acts = c.handle(ConnectionClosed(site=1, attempt=0, reason="killed", now=1.2))
    assert Move(q=1, r=0, src=1, dst=NOWHERE, epoch=2, reason="retire") in acts
    assert not c.aborted and 1 not in c.layout.hosted(1)  # type: ignore[union-attr]
    assert c.layout.table()[1].tolist() == [NOWHERE, 2, 3]  # type: ignore[union-attr]
    [cu1] = finish(c, cu0, now=1.3)
    assert finish(c, cu1, now=1.4) == []  # the move ends: nothing left to retire
    assert [m.epoch for m in c.moves] == [1] and c.moves[0].short_s == 0.0
