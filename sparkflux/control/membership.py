"""Membership, views and recovery as tables (thesis §3.4: process pairs, take-over; ch. 5:
recovery by catch-up onto a standby or the survivors).

Three tables; the controller feeds them events and carries out the actions they name
(``Controller._slot_step``, ``_standby_step``, ``_recovery_step``).

A site slot's life (``SLOT_TRANSITIONS``, one table per recovery mode: ``--ha none``,
``--recovery standby``, ``--recovery survivors``):

1. Before view 1 a slot is ``open`` until a process registers for it (``registered``,
   ``admit``). A newer attempt of the slot's task takes it over (``retried``: ``replace``,
   ``admit``); a registration for a slot that has a live one is refused (``duplicate``:
   ``stop``). A registered process lost before view 1 is forgotten (``lost``: ``forget``):
   Spark retries it, nothing was running.
2. View 1 forms once every slot is registered (``view``): each becomes a ``member``. A
   member's ``ready`` counts towards starting the ingress (``count-ready``; the controller
   feeds it only before the start, and an adoptee's first one to the recovery task).
3. With ``--ha none`` a member failing (``failed``) stops the job (``abort``); so does,
   with Flux-HA, the last member failing (``last-failed``). A slot that failed so keeps
   counting a late ``ready`` (the run has stopped; nothing comes of it).
4. With ``--recovery standby`` a failed member gets the next view without it
   (``fail``: ``FailSites``, take-over by the other copies) and is ``awaiting a standby``
   (``await``, at the tail). Given to an idle standby (``adopt``: the view with the new
   process) it is ``adopted`` while its replicas are caught up; once they are
   (``recovered``) it is a ``member`` again (a ``ready`` of its process before the start
   is counted as a member's), and its replicas that share a failure domain
   with another copy are moved (``relayout``). An adopted slot whose new process fails goes
   back to the head of the queue (``fail``, ``await-first``): the recovery starts over.
   A slot no standby has adopted after the standby wait (``waited``) leaves the queue and is
   recovered onto the survivors instead (``dequeue``, ``re-place``).
   Rescaling (``rescale.py``) opens slots and retires them: a ``vacant`` slot (beyond the
   query's size, or retired by a shrink) opened by a grow (``open``) is ``awaiting a
   standby`` (``open``: at the tail, with no standby wait: the grow has its own), and
   adopted as a failed one is. A shrink's slot, once it holds nothing, leaves (``retire``:
   its process stopped, the view without it) and is ``vacant``; one that failed while it
   was retiring, or that a grow opened and no process took, is closed (``retire``:
   ``vacate``).
5. With ``--recovery survivors`` a failed member's replicas are re-placed on the live sites
   at once (``fail``, ``re-place``, as moves of reason ``recovery``): the slot stays
   ``recovered onto the survivors`` (no process ever takes it again).

A standby process's life (``STANDBY_TRANSITIONS``): a process registering after view 1, or
for a spare slot (``--spare-sites``), with Flux-HA:

6. With ``--recovery standby`` it is ``idle`` (``standby``, then ``next-task``: it may adopt
   a slot at once); chosen for the oldest awaiting slot (``chosen``) it leaves the idle ones
   (``take-over``) and is ``adopting``: the slot's process from now on, its life the slot's
   (rule 4).
7. With ``--recovery survivors`` (nothing to adopt) or ``--ha none`` (a restarted site has
   no role after view 1) it is ``stopped`` (``stop``).

The recovery task (``RECOVERY_TRANSITIONS``): one slot is recovered at a time, and not
while a group of moves runs (``Controller._next_task`` offers work in this order: adopt an
awaiting slot, then the queued moves, then the balancing round's end):

8. ``idle`` --an awaiting slot and an idle standby (``adopt``)--> ``adopting`` (``adopt``:
   the standby chosen, the slot adopted, its replicas queued bottom-up).
9. ``adopting`` --the new process is ``ready`` (it installed the view)--> ``catching up``
   (``catch-up``: ``CATCH_UP_PARALLEL`` at a time, a stage after the one below).
10. ``catching up`` --every replica caught up (``caught-up``)--> ``idle`` (``recovered``:
    the slot's ``recovered``; ``next-task``).
11. The new process failing in either phase (``adoptee-failed``) ends the task
    (``start-over``: its catch-ups forgotten, stale ``cu-done`` ignored); rule 4 queues the
    slot again at the head.

Any pair missing from a table is impossible: ``SlotError``, ``StandbyError`` or
``RecoveryError`` names the slot (or process, or the slot being recovered), the state and
the event. Adopting a slot while another recovery runs is one.
"""

from __future__ import annotations

from enum import Enum, StrEnum

from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.tables import transition


class MembershipError(ProtocolError):
    """An impossible transition of the controller's membership or recovery."""


class SlotError(MembershipError):
    """An impossible transition of a site slot."""


class StandbyError(MembershipError):
    """An impossible transition of a standby process."""


class RecoveryError(MembershipError):
    """An impossible transition of the recovery task."""


class Mode(StrEnum):
    """What a failure leads to: the run's ``--ha`` and ``--recovery``."""

    NONE = "--ha none"
    STANDBY = "--recovery standby"
    SURVIVORS = "--recovery survivors"


class Slot(StrEnum):
    OPEN = "open"
    REGISTERED = "registered"
    MEMBER = "member"
    AWAITING = "awaiting a standby"
    ADOPTED = "adopted"
    ON_SURVIVORS = "recovered onto the survivors"
    FAILED = "failed"  # the run stopped with it
    VACANT = "vacant"  # beyond the query's size: a rescale may open it


class SlotEv(Enum):
    REGISTERED = "registered"
    RETRIED = "retried"
    DUPLICATE = "duplicate"
    LOST = "lost"
    VIEW = "view"
    READY = "ready"
    FAILED = "failed"
    LAST_FAILED = "last-failed"
    ADOPT = "adopt"
    RECOVERED = "recovered"
    WAITED = "waited"
    OPEN = "open"
    RETIRE = "retire"


S, SE = Slot, SlotEv
Rules = dict[tuple[Slot, SlotEv], tuple[Slot, tuple[str, ...]]]

# rules 1 and 2: every mode
_JOIN: Rules = {
    (S.OPEN, SE.REGISTERED): (S.REGISTERED, ("admit",)),
    (S.REGISTERED, SE.RETRIED): (S.REGISTERED, ("replace", "admit")),
    (S.REGISTERED, SE.DUPLICATE): (S.REGISTERED, ("stop",)),
    (S.REGISTERED, SE.LOST): (S.OPEN, ("forget",)),
    (S.REGISTERED, SE.VIEW): (S.MEMBER, ()),
    (S.MEMBER, SE.READY): (S.MEMBER, ("count-ready",)),
}

SLOT_TRANSITIONS: dict[Mode, Rules] = {
    Mode.NONE: {
        **_JOIN,
        # rule 3
        (S.MEMBER, SE.FAILED): (S.FAILED, ("abort",)),
        (S.FAILED, SE.READY): (S.FAILED, ("count-ready",)),
    },
    Mode.STANDBY: {
        **_JOIN,
        **{(s, SE.LAST_FAILED): (S.FAILED, ("abort",)) for s in (S.MEMBER, S.ADOPTED)},
        (S.FAILED, SE.READY): (S.FAILED, ("count-ready",)),
        # rule 4
        (S.MEMBER, SE.FAILED): (S.AWAITING, ("fail", "await")),
        (S.AWAITING, SE.ADOPT): (S.ADOPTED, ("adopt",)),
        (S.ADOPTED, SE.READY): (S.ADOPTED, ("count-ready",)),
        (S.ADOPTED, SE.RECOVERED): (S.MEMBER, ("relayout",)),
        (S.ADOPTED, SE.FAILED): (S.AWAITING, ("fail", "await-first")),
        (S.AWAITING, SE.WAITED): (S.ON_SURVIVORS, ("dequeue", "re-place")),
        # rule 4, rescaling
        (S.VACANT, SE.OPEN): (S.AWAITING, ("open",)),
        (S.MEMBER, SE.RETIRE): (S.VACANT, ("retire",)),
        (S.AWAITING, SE.RETIRE): (S.VACANT, ("vacate",)),
    },
    Mode.SURVIVORS: {
        **_JOIN,
        (S.MEMBER, SE.LAST_FAILED): (S.FAILED, ("abort",)),
        (S.FAILED, SE.READY): (S.FAILED, ("count-ready",)),
        # rule 5
        (S.MEMBER, SE.FAILED): (S.ON_SURVIVORS, ("fail", "re-place")),
    },
}


def slot_step(slot: int, mode: Mode, state: Slot, event: SlotEv
              ) -> tuple[Slot, tuple[str, ...]]:
    """The slot's next state and the actions of ``event`` in ``state``."""
    return transition(SLOT_TRANSITIONS[mode], state, event, SlotError,
                      f"site slot {slot} ({mode.value})")


class Standby(StrEnum):
    NEW = "registering"
    IDLE = "idle"
    ADOPTING = "adopting"
    STOPPED = "stopped"


class StandbyEv(Enum):
    REGISTERED = "registered"
    CHOSEN = "chosen"


STANDBY_TRANSITIONS: dict[Mode, dict[tuple[Standby, StandbyEv],
                                     tuple[Standby, tuple[str, ...]]]] = {
    # rule 6
    Mode.STANDBY: {
        (Standby.NEW, StandbyEv.REGISTERED): (Standby.IDLE, ("standby", "next-task")),
        (Standby.IDLE, StandbyEv.CHOSEN): (Standby.ADOPTING, ("take-over",)),
    },
    # rule 7
    Mode.SURVIVORS: {(Standby.NEW, StandbyEv.REGISTERED): (Standby.STOPPED, ("stop",))},
    Mode.NONE: {(Standby.NEW, StandbyEv.REGISTERED): (Standby.STOPPED, ("stop",))},
}


def standby_step(process: str, mode: Mode, state: Standby, event: StandbyEv
                 ) -> tuple[Standby, tuple[str, ...]]:
    """The standby process's next state and the actions of ``event`` in ``state``."""
    return transition(STANDBY_TRANSITIONS[mode], state, event, StandbyError,
                      f"standby {process} ({mode.value})")


class Recovery(StrEnum):
    IDLE = "idle"
    ADOPTING = "adopting"
    CATCHING_UP = "catching up"


class RecoveryEv(Enum):
    ADOPT = "adopt"
    READY = "ready"
    CAUGHT_UP = "caught-up"
    ADOPTEE_FAILED = "adoptee-failed"


R, RE = Recovery, RecoveryEv

RECOVERY_TRANSITIONS: dict[tuple[Recovery, RecoveryEv], tuple[Recovery, tuple[str, ...]]] = {
    (R.IDLE, RE.ADOPT): (R.ADOPTING, ("adopt",)),  # rule 8
    (R.ADOPTING, RE.READY): (R.CATCHING_UP, ("catch-up",)),  # rule 9
    (R.CATCHING_UP, RE.CAUGHT_UP): (R.IDLE, ("recovered", "next-task")),  # rule 10
    # rule 11
    (R.ADOPTING, RE.ADOPTEE_FAILED): (R.IDLE, ("start-over",)),
    (R.CATCHING_UP, RE.ADOPTEE_FAILED): (R.IDLE, ("start-over",)),
}


def recovery_step(slot: int | None, phase: Recovery, event: RecoveryEv
                  ) -> tuple[Recovery, tuple[str, ...]]:
    """The recovery task's next phase and the actions of ``event`` in ``phase``."""
    who = "no slot" if slot is None else f"site slot {slot}"
    return transition(RECOVERY_TRANSITIONS, phase, event, RecoveryError, f"recovery ({who})")
