"""A move's catch-up after an earlier move of the same copy was abandoned (``--recovery
survivors``: the first move's destination died and the copy is re-placed at once).

Every producer retains for a moved copy when it applies the move and tells the survivor
(``retaining``); the survivor's cu-start asks nobody. So a ``retaining`` the survivor drops,
or a stash a stale cu-start clears, is never sent again and the catch-up waits forever. Both
orders were found in review by driving ``SiteCore`` directly, as here.

Partition 1's replica 0 lives on site 1 and replica 1 on site 2, the survivor S. Move e1 sends
replica 0 to site 3, which dies; move e2 re-places it on site 0. Also: a snapshot, a cu-start
and an ``installed`` that arrive for an incarnation other than the current one.
"""

from __future__ import annotations

from sparkflux.dataflow.placement import DRIVER, Layout
from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.messages import (
    CuDone,
    CuStart,
    Installed,
    Message,
    Outgoing,
    Retaining,
    State,
)
from sparkflux.protocol.site import Received, SiteCore
from sparkflux.sim.workload import tiny_plan

Q, R, S = 1, 0, 2  # the partition, the moved replica, the survivor's site
STAGE = 1


def survivor() -> SiteCore:
    plan = tiny_plan()[0]
    layout = Layout(plan.sites, plan.partitions, 2)
    assert (layout.site_of(Q, R), layout.site_of(Q, 1 - R)) == (1, S)
    return SiteCore(S, plan, layout)


def got(core: SiteCore, src: int, msg: Message) -> list[Outgoing]:
    """``msg`` from ``src``, alone in a scheduler pass."""
    return core.handle(Received([(src, msg)]))


def states(outs: list) -> list:
    return [o for o in outs if isinstance(o.message, State)]


def test_a_newer_moves_retaining_is_kept_while_the_abandoned_catch_up_is_listed() -> None:
    """X's ``retaining`` for e2 reaches S before S has seen the failure that abandoned e1."""
    core = survivor()
    core.handle(cm.Move(q=Q, r=R, dst=3, epoch=1))
    got(core, DRIVER, CuStart(STAGE, Q, R, 1, retained=True))  # e1's catch-up starts
    got(core, 0, Retaining(STAGE, Q, R, 2))  # site 0 applied the failure and move e2
    core.handle(cm.Fail(dead=(3,)))  # the new copy's site died: e1 is abandoned here
    core.handle(cm.Move(q=Q, r=R, dst=0, epoch=2))  # S's own retaining for e2 goes to itself
    assert not states(got(core, DRIVER, CuStart(STAGE, Q, R, 2, retained=True)))
    outs = got(core, 1, Retaining(STAGE, Q, R, 2))  # the last producer site
    assert [o.site for o in states(outs)] == [0]  # snapshot to e2's destination


def test_a_stale_cu_start_neither_starts_nor_clears_the_newer_moves_replies() -> None:
    """The cu-start of e1 is handled only after move e2 (it sat in S's inbox)."""
    core = survivor()
    core.handle(cm.Move(q=Q, r=R, dst=3, epoch=1))
    core.handle(cm.Fail(dead=(3,)))
    core.handle(cm.Move(q=Q, r=R, dst=0, epoch=2))
    got(core, 0, Retaining(STAGE, Q, R, 2))
    got(core, 1, Retaining(STAGE, Q, R, 2))
    assert got(core, DRIVER, CuStart(STAGE, Q, R, 1, retained=True)) == []  # stale
    outs = got(core, DRIVER, CuStart(STAGE, Q, R, 2, retained=True))
    assert [o.site for o in states(outs)] == [0]  # every producer had already replied


def test_the_stash_of_an_abandoned_move_goes_with_its_incarnation() -> None:
    """e1's ``retaining`` reaches S before its move, e1 is abandoned before S's cu-start comes,
    and the copy is re-placed (e2): the stash for e1 is dropped, e2's is kept."""
    core = survivor()
    got(core, 0, Retaining(STAGE, Q, R, 1))  # ahead of move e1 here: stashed
    assert core.catchups.early
    core.handle(cm.Move(q=Q, r=R, dst=3, epoch=1))
    got(core, 0, Retaining(STAGE, Q, R, 2))  # site 0 already re-placed it (e2)
    core.handle(cm.Fail(dead=(3,)))
    core.handle(cm.Move(q=Q, r=R, dst=0, epoch=2))
    assert [k[1] for k in core.catchups.early] == [2]
    got(core, 1, Retaining(STAGE, Q, R, 2))
    outs = got(core, DRIVER, CuStart(STAGE, Q, R, 2, retained=True))
    assert [o.site for o in states(outs)] == [0]
    assert not core.catchups.early


def test_a_state_taken_for_an_older_incarnation_is_not_installed() -> None:
    """S snapshots for move e1 to site 3 before it learns that site 3's process died; the
    process that takes slot 3 over (e2) gets that state first, then its own."""
    core = survivor()
    core.handle(cm.Move(q=Q, r=R, dst=3, epoch=1))
    for site in (0, 1, 3):
        got(core, site, Retaining(STAGE, Q, R, 1))
    stale = states(got(core, DRIVER, CuStart(STAGE, Q, R, 1, retained=True)))
    assert [o.site for o in stale] == [3] and stale[0].message.epoch == 1
    core.handle(cm.Fail(dead=(3,)))
    # slot 3 adopted under epoch 2
    core.handle(cm.Avail(slot=3, epoch=2, host="h", port=1, attempt=1, registered=3))
    got(core, DRIVER, CuStart(STAGE, Q, R, 2, retained=False))
    fresh: list = []
    for site in (0, 1, 3):
        fresh += states(got(core, site, Retaining(STAGE, Q, R, 2)))
    assert [o.message.epoch for o in fresh] == [2]

    new = SiteCore(3, tiny_plan()[0], core.layout.copy(), standby=True)
    new.epochs = core.epochs.copy()
    assert got(new, S, stale[0].message) == []
    assert not new.cons[STAGE].installed[new.cons[STAGE].index[Q]]
    assert got(new, S, fresh[0].message)  # installed: rejoins and `installed`
    assert new.cons[STAGE].installed[new.cons[STAGE].index[Q]]


def test_a_cu_start_for_a_copy_whose_site_failed_since_asks_nobody_to_retain() -> None:
    """A standby's cu-start (not retained) reaches S after the ``fail`` of that standby's
    site (the site handles control frames at once and queues cu-start): retaining for a
    dead copy would keep every producer's rows for nobody."""
    core = survivor()
    core.handle(cm.Fail(dead=(1,)))  # replica 0's site died: a standby adopts it (epoch 1) ...
    core.handle(cm.Avail(slot=1, epoch=1, host="h", port=1, attempt=1, registered=1))
    core.handle(cm.Fail(dead=(1,)))  # ... and dies in turn before S handles its cu-start
    assert got(core, DRIVER, CuStart(STAGE, Q, R, 1, retained=False)) == []
    assert (STAGE, Q) not in core.catchups.running


def test_an_installed_of_an_older_incarnation_does_not_fold_in_the_current_one() -> None:
    """Move e1's destination, site 3, hangs and is declared failed; a standby adopts slot 3
    (epoch 2) and its catch-up starts. The old process wakes, installs e1's snapshot and
    says so over its StateMover connection, which nobody closed: from slot 3, no longer
    dead. Folding in on that would end the new process's catch-up before it has any state."""
    core = survivor()
    core.handle(cm.Move(q=Q, r=R, dst=3, epoch=1))
    core.handle(cm.Fail(dead=(3,)))
    core.handle(cm.Avail(slot=3, epoch=2, host="h", port=1, attempt=1, registered=3))
    assert got(core, DRIVER, CuStart(STAGE, Q, R, 2, retained=False))  # retain asks
    assert got(core, 3, Installed(STAGE, Q, R, 1)) == []  # the zombie's: ignored
    assert (STAGE, Q) in core.catchups.running
    for site in (0, 1, 3):  # the producers retain: the state goes to the new process
        got(core, site, Retaining(STAGE, Q, R, 2))
    assert got(core, 3, Installed(STAGE, Q, R, 1)) == []  # still ignored while transferring
    outs = got(core, 3, Installed(STAGE, Q, R, 2))
    assert any(isinstance(o.message, CuDone) for o in outs)
