"""The catch-up machine as a table (``protocol/catchup.py``) and the four survival cases of a
partition-pair quartet (thesis §3.3), each followed by its catch-up and fold-in.

The quartet: producer partition 0 with copies P^P (replica 0, site 0) and P^S (replica 1,
site 1), consumer partition 0 with copies C^P (replica 0, site 2) and C^S (replica 1, site 3).
Normal case: P^r sends to C^r and waits for C^(1-r)'s acknowledgement; C^c receives from
P^c and acknowledges to P^(1-c). The tests drive the real FH-Prod / FH-Cons objects over a
fake link and assert the exact messages. A failed consumer copy comes back in the normal case
(its install rejoins its own producer copy); a failed producer copy comes back as the
secondary of both consumer copies, which keep reading from the survivor (not the paper's
Fig 3.15: docs/catchup.md says why, and what it costs).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.dataflow.placement import DRIVER, Layout
from sparkflux.model.schema import PART, SN, SNM
from sparkflux.protocol import catchup
from sparkflux.protocol.catchup import (
    SURVIVOR_TRANSITIONS,
    AskRetain,
    CatchUpError,
    CatchUps,
    Ev,
    InstalledEvent,
    Phase,
    ReportCuDone,
    SendPSync,
    SurvivorCatchUp,
    TransferState,
)
from sparkflux.protocol.consumer import ConsumerSet
from sparkflux.protocol.messages import (
    SRC,
    Ack,
    CuDone,
    CuStart,
    Data,
    Installed,
    Message,
    Outgoing,
    PSync,
    Rejoin,
    Rejoined,
    Retain,
    Retaining,
    Reverse,
    State,
)
from sparkflux.protocol.producer import ProducerBuffer
from sparkflux.protocol.site import Received, SiteCore
from sparkflux.sim.workload import tiny_plan

SCHEMA = pa.schema([pa.field(SN, pa.int64()), pa.field(SNM, pa.int64()),
                    pa.field(PART, pa.int32()), pa.field(SRC, pa.int32())])
P_SITE = (0, 1)  # producer replica r lives on site r
C_SITE = (2, 3)  # consumer replica c lives on site 2 + c


# -- recording which rows of the table a test hits ------------------------------------------------
HITS: Counter[tuple[Phase, Ev]] = Counter()


class Recording(dict):
    def __getitem__(self, key: Any) -> Any:
        value = super().__getitem__(key)
        HITS[key] += 1
        return value


@pytest.fixture(autouse=True)
def record(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catchup, "SURVIVOR_TRANSITIONS", Recording(SURVIVOR_TRANSITIONS))


# -- the quartet ---------------------------------------------------------------------------------
def rows(p: int, sns: list[int]) -> pa.RecordBatch:
    n = len(sns)
    return pa.record_batch([pa.array(sns, pa.int64()), pa.array([0] * n, pa.int64()),
                            pa.array([0] * n, pa.int32()), pa.array([p] * n, pa.int32())],
                           schema=SCHEMA)


def plain(outs: list[Outgoing]) -> list[tuple]:
    """Messages as comparable tuples: (site, kind, fields...); Data as its row SNs and the
    progress it claims."""
    shown: list[tuple] = []
    for o in outs:
        m = o.message
        if isinstance(m, Data):
            sns = m.batch.column(SN).to_pylist() if m.batch is not None else []
            shown.append((o.site, "Data", sns, m.streams.sn.tolist()))
        elif isinstance(m, Ack):
            shown.append((o.site, "Ack", m.c.tolist(), m.upto.tolist()))
        elif isinstance(m, Reverse):
            shown.append((o.site, "Reverse", m.r.tolist(), m.c.tolist(), m.floor.tolist()))
        elif isinstance(m, Rejoin):
            shown.append((o.site, "Rejoin", m.r.tolist(), m.c.tolist(), m.floor.tolist(),
                          m.send.tolist(), m.wait.tolist()))
        elif isinstance(m, Rejoined):
            shown.append((o.site, "Rejoined", m.r.tolist(), m.c.tolist()))
        else:
            shown.append((o.site, m))
    return shown


class Quartet:
    def __init__(self) -> None:
        self.prod: dict[int, ProducerBuffer] = {}
        self.cons: dict[int, ConsumerSet] = {}
        for r in (0, 1):
            self.prod[r] = self._producer(r)
            self.cons[r] = ConsumerSet(1, {0: r}, np.array([P_SITE], np.int32),
                                       np.array([[r]], np.int8), np.array([[1 - r]], np.int8),
                                       SCHEMA)
        self.sn = 0

    def _producer(self, r: int) -> ProducerBuffer:
        c = np.arange(2)[None, None, :]
        return ProducerBuffer(1, {0: r}, np.array([C_SITE], np.int32), c == r, c == 1 - r,
                              SCHEMA)

    def produce(self, *copies: int) -> list[Outgoing]:
        """The next row (SN) at the given producer copies (both compute the same rows)."""
        self.sn += 1
        out: list[Outgoing] = []
        for r in copies:
            out += [Outgoing(o.site, o.message) for o in self.prod[r].produce(
                rows(0, [self.sn]), np.array([self.sn]), np.zeros(1, np.int64))]
        return out

    def deliver(self, src: int, outs: list[Outgoing]) -> list[tuple[int, Outgoing]]:
        """Hand each message to its site; returns what they send back, with their sites."""
        back: list[tuple[int, Outgoing]] = []
        for o in outs:
            m: Message = o.message
            if o.site in C_SITE:
                c = C_SITE.index(o.site)
                if isinstance(m, Data):
                    back += [(o.site, x) for x in self.cons[c].on_data(m, src)]
                elif isinstance(m, PSync):
                    back += [(o.site, x) for x in self.cons[c].on_psync(m)]
            else:
                r = P_SITE.index(o.site)
                if isinstance(m, Ack):
                    self.prod[r].on_ack(m, src)
                elif isinstance(m, Reverse):
                    back += [(o.site, x) for x in self.prod[r].on_reverse(m, src)]
                elif isinstance(m, Rejoin):
                    back += [(o.site, x) for x in self.prod[r].on_rejoin(m, src)]
        return back

    def roles(self) -> dict[str, Any]:
        return {"sender": [int(self.cons[c].sender[0, 0]) for c in (0, 1)],
                "ack_to": [next(iter(np.flatnonzero(self.cons[c].ack_to[0, 0]).tolist()), -1)
                           for c in (0, 1)],
                "send": [self.prod[r].send[0, 0].tolist() for r in (0, 1)],
                "wait": [self.prod[r].wait[0, 0].tolist() for r in (0, 1)]}


NORMAL = {"sender": [0, 1], "ack_to": [1, 0], "send": [[True, False], [False, True]],
          "wait": [[False, True], [True, False]]}
# After P^S is caught up while C^S survived (cases 2 and 4): both consumer copies read from
# P^P and acknowledge to P^S, which sends nothing (docs/catchup.md: why, and the cost).
P_S_FOLDED_IN = {"sender": [0, 0], "ack_to": [1, 1], "send": [[True, True], [False, False]],
                 "wait": [[False, False], [True, True]]}


def dead(*replicas: int) -> np.ndarray:
    d = np.zeros((1, 2), dtype=bool)
    d[0, list(replicas)] = True
    return d


def test_the_normal_case() -> None:
    qt = Quartet()
    assert qt.roles() == NORMAL
    sent = qt.produce(0, 1)
    assert plain(sent) == [(2, "Data", [1], [1]), (3, "Data", [1], [1])]
    acks = qt.deliver(0, sent[:1]) + qt.deliver(1, sent[1:])
    # C^P acknowledges to P^S (site 1), C^S to P^P (site 0), before processing
    assert [(s, *plain([o])[0]) for s, o in acks] == [(2, 1, "Ack", [0], [1]),
                                                     (3, 0, "Ack", [1], [1])]


def take_over(qt: Quartet, failed_c: tuple[int, ...], failed_p: tuple[int, ...]
              ) -> list[tuple]:
    """The view change: every live copy applies ``fail``; returns the messages they send."""
    out: list[tuple] = []
    for r in (0, 1):
        if r not in failed_p:
            qt.prod[r].on_fail(dead(*failed_c))
    for c in (0, 1):
        if c not in failed_c:
            for o in qt.cons[c].on_fail(dead(*failed_p)):
                out.append((C_SITE[c], *plain([o])[0]))
                for s, back in qt.deliver(C_SITE[c], [o]):
                    out.append((s, *plain([back])[0]))
                    qt.deliver(s, [back])
    return out


def steady(qt: Quartet, rounds: int = 2) -> None:
    """Rows flow both ways before the failure: SNs 1..rounds everywhere, acknowledged."""
    for _ in range(rounds):
        sent = qt.produce(0, 1)
        for o in sent:
            src = P_SITE[0] if o.site == C_SITE[0] else P_SITE[1]
            for s, back in qt.deliver(src, [o]):
                qt.deliver(s, [back])


def catch_up(qt: Quartet, failed_c: tuple[int, ...], failed_p: tuple[int, ...]
             ) -> list[tuple]:
    """Standbys take the failed copies' places, bottom-up as the controller orders it: the
    producer copy first (installed from the live copy's state; it holds everything for every
    live consumer copy), folded in by the survivor's ``psync``; then the consumer copy
    (installed from the live consumer copy's snapshot, its inputs rejoined: ``csync``).
    Returns every message on the way, in order."""
    log: list[tuple] = []
    for c in failed_c:  # the standby's consumer copy: nothing until its state comes
        qt.cons[c] = ConsumerSet(1, {0: c}, np.array([P_SITE], np.int32),
                                 np.array([[c]], np.int8), np.array([[1 - c]], np.int8),
                                 SCHEMA, installed=False)
    for r in failed_p:
        qt.prod[r] = qt._producer(r)
        qt.prod[r].install(0, qt.prod[1 - r].progress_sn[0], 0,
                           np.array([[c not in failed_c for c in (0, 1)]]))
        survivor = 1 - r  # fold-in: the survivor's psync on its data channel
        for o in [Outgoing(C_SITE[c], PSync(1, 0, r)) for c in (0, 1)]:
            for s, back in qt.deliver(P_SITE[survivor], [o]):
                log.append((s, *plain([back])[0]))
                for s2, more in qt.deliver(s, [back]):
                    log.append((s2, *plain([more])[0]))
                    qt.deliver(s2, [more])
    for c in failed_c:
        snap = qt.cons[1 - c].snapshot(0)
        for o in qt.cons[c].install(0, snap, dead()):
            log.append((C_SITE[c], *plain([o])[0]))
            for s, back in qt.deliver(C_SITE[c], [o]):
                log.append((s, *plain([back])[0]))
    return log


def test_case_1_the_secondary_consumer_fails() -> None:
    """FH-Prod^P drops the dangling SNs it held for C^S (``ack_all``); FH-Prod^S stops
    forwarding to it and keeps taking C^P's acknowledgements."""
    qt = Quartet()
    steady(qt)
    assert take_over(qt, failed_c=(1,), failed_p=()) == []  # no reversal
    assert qt.roles() == {"sender": [0, 1], "ack_to": [1, 0],
                          "send": [[True, False], [False, False]],
                          "wait": [[False, False], [True, False]]}
    assert plain(qt.produce(0, 1)) == [(2, "Data", [3], [3])]  # P^S sends nothing
    # catch-up of C^S: installed from C^P's snapshot (SN 3 has not reached C^P yet), it
    # rejoins P^P (wait) and P^S (send); P^S resends SN 3, which it held for C^P
    assert catch_up(qt, failed_c=(1,), failed_p=()) == [
        (3, 0, "Rejoin", [0], [1], [2], [False], [True]),
        (3, 1, "Rejoin", [1], [1], [2], [True], [False]),
        (1, 3, "Rejoined", [1], [1]),  # ordered ahead of the rows for the rejoined copy
        (1, 3, "Data", [3], [3]),
    ]
    assert qt.roles() == NORMAL


def test_case_2_the_secondary_producer_fails() -> None:
    """C^S reverses to FH-Prod^P, which resends what C^S has not acknowledged and then feeds
    both consumer copies; C^P stops acknowledging to the dead P^S."""
    qt = Quartet()
    steady(qt)
    qt.produce(1)  # SN 3 from P^S alone: lost in flight with P^S
    qt.sn -= 1
    qt.deliver(0, qt.produce(0))  # P^P's SN 3 reaches C^P, which acks to P^S (dead soon)
    assert take_over(qt, failed_c=(), failed_p=(1,)) == [
        (3, 0, "Reverse", [0], [1], [2]),  # C^S asks P^P for everything above SN 2
        (0, 3, "Data", [3], [3]),  # P^P resends SN 3 (held for C^S) and feeds it from now on
    ]
    assert qt.roles()["sender"] == [0, 0] and qt.roles()["ack_to"] == [-1, -1]
    assert qt.prod[0].send[0, 0].tolist() == [True, True]  # P^P feeds both
    # catch-up of P^S: it holds everything for both consumer copies; psync folds it in
    log = catch_up(qt, failed_c=(), failed_p=(1,))
    assert log == [  # psync: both consumer copies acknowledge to P^S from their progress on
        (2, 1, "Rejoin", [1], [0], [3], [False], [True]),
        (3, 1, "Rejoin", [1], [1], [3], [False], [True]),
    ]
    assert qt.roles() == P_S_FOLDED_IN
    assert plain(qt.produce(0, 1)) == [(2, "Data", [4], [4]), (3, "Data", [4], [4])]


def test_case_3_the_secondary_consumer_and_producer_fail() -> None:
    """Reached from case 1 or 2: no reversal, P^P feeds C^P, nobody acknowledges."""
    qt = Quartet()
    steady(qt)
    assert take_over(qt, failed_c=(1,), failed_p=(1,)) == []
    assert qt.roles()["sender"][0] == 0 and qt.roles()["ack_to"][0] == -1
    assert qt.prod[0].send[0, 0].tolist() == [True, False]
    assert qt.prod[0].wait[0, 0].tolist() == [False, False]
    log = catch_up(qt, failed_c=(1,), failed_p=(1,))
    assert log == [
        (2, 1, "Rejoin", [1], [0], [2], [False], [True]),  # psync: C^P acks to P^S
        (3, 0, "Rejoin", [0], [1], [2], [False], [True]),  # C^S installed, from its own P^S
        (3, 1, "Rejoin", [1], [1], [2], [True], [False]),
        (1, 3, "Rejoined", [1], [1]),
        (1, 3, "Data", [], [2]),
    ]
    assert qt.roles() == NORMAL


def test_case_4_the_primary_consumer_and_the_secondary_producer_fail() -> None:
    """FH-Prod^P reverses to C^S (C^S's own producer copy P^S is gone)."""
    qt = Quartet()
    steady(qt)
    assert take_over(qt, failed_c=(0,), failed_p=(1,)) == [
        (3, 0, "Reverse", [0], [1], [2]),
        (0, 3, "Data", [], [2]),
    ]
    assert qt.prod[0].send[0, 0].tolist() == [False, True]
    log = catch_up(qt, failed_c=(0,), failed_p=(1,))
    assert log == [
        (3, 1, "Rejoin", [1], [1], [2], [False], [True]),  # psync: C^S acks to P^S
        (2, 0, "Rejoin", [0], [0], [2], [True], [False]),  # C^P installed, from its own P^P
        (0, 2, "Rejoined", [0], [0]),
        (0, 2, "Data", [], [2]),
        (2, 1, "Rejoin", [1], [0], [2], [False], [True]),
    ]
    assert qt.roles() == P_S_FOLDED_IN
    assert plain(qt.produce(0, 1)) == [(2, "Data", [3], [3]), (3, "Data", [3], [3])]


# -- the survivor's machine: every row of the table ---------------------------------------------
def machine() -> SurvivorCatchUp:
    cu = SurvivorCatchUp(1, 5, 0, 7)
    assert cu.state is Phase.READY
    return cu


def test_cu_start_asks_every_producer_site_to_retain() -> None:
    cu = machine()
    acts = cu.handle(catchup.CuStartEvent(producers=frozenset({0, 1, 3})))
    assert acts == [AskRetain(stage=1, q=5, r=0, epoch=7, sites=(0, 1, 3))]
    assert cu.state is Phase.RETAINING and cu.waiting == {0, 1, 3}
    assert cu.handle(catchup.RetainingEvent(site=1)) == []
    assert cu.handle(catchup.ProducerFailed(sites=frozenset({3}))) == []
    assert cu.state is Phase.RETAINING
    acts = cu.handle(catchup.RetainingEvent(site=0))  # the last one: all-retained
    assert acts == [TransferState(stage=1, q=5, r=0, epoch=7)]
    assert cu.state is Phase.TRANSFERRING
    assert cu.handle(catchup.ProducerFailed(sites=frozenset({1}))) == []
    acts = cu.handle(InstalledEvent())
    assert acts == [SendPSync(stage=1, q=5, r=0, epoch=7),
                    ReportCuDone(stage=1, q=5, r=0, epoch=7)]
    assert cu.state is Phase.FOLDED_IN and cu.done


def test_a_moves_cu_start_with_every_retaining_early_transfers_at_once() -> None:
    cu = machine()
    acts = cu.handle(catchup.CuStartEvent(producers=frozenset({0, 1}), retained=True,
                                          early=frozenset({0, 1})))
    assert acts == [TransferState(stage=1, q=5, r=0, epoch=7)]


@pytest.mark.parametrize("state_events", [
    [],  # abandoned while retaining
    [catchup.RetainingEvent(site=0)],  # abandoned while transferring
])
@pytest.mark.parametrize("end", [catchup.TargetFailed(), catchup.Superseded(epoch=8)])
def test_a_catch_up_is_abandoned(state_events: list, end: Any) -> None:
    cu = machine()
    cu.handle(catchup.CuStartEvent(producers=frozenset({0})))
    for ev in state_events:
        cu.handle(ev)
    assert cu.handle(end) == []
    assert cu.state is Phase.ABANDONED and cu.done


def test_an_impossible_transition_names_role_state_and_event() -> None:
    cu = machine()
    cu.handle(catchup.CuStartEvent(producers=frozenset({0, 1})))
    with pytest.raises(CatchUpError) as e:
        cu.handle(InstalledEvent())  # installed before any state was sent
    assert str(e.value) == ("survivor of stage 1 partition 5 replica 0 (epoch 7): no "
                            "transition from retaining on installed")
    with pytest.raises(CatchUpError, match="no transition from retaining on cu-start"):
        cu.handle(catchup.CuStartEvent(producers=frozenset({0})))
    with pytest.raises(CatchUpError, match="new replica of stage 1 partition 2 replica 0: "
                                           "no transition from caught-up on 'state'"):
        catchup.new_replica_step(1, 2, 0, True, "state")


def test_the_router_stashes_early_retaining_and_drops_stale_events() -> None:
    cus = CatchUps()
    assert cus.retaining(1, 5, 0, 7, site=2) == []  # ahead of cu-start: stashed
    assert cus.early == {((1, 5, 0), 7): {2}}
    acts = cus.cu_start(1, 5, 0, 7, {2, 3}, retained=True)
    assert acts == [] and cus.running[(1, 5)].waiting == {3}
    assert cus.retaining(1, 5, 0, 6, site=3) == []  # an abandoned catch-up's reply
    assert cus.installed(1, 5, 6) == []  # an earlier incarnation's
    assert cus.retaining(1, 5, 0, 7, site=3) == [TransferState(stage=1, q=5, r=0, epoch=7)]
    assert cus.failed({9}, {(1, 5): 9}) == []  # the new replica's site: abandoned
    assert not cus.running


# -- the machine inside a site: the exact messages -----------------------------------------------
def test_a_survivor_site_sends_the_catch_up_messages() -> None:
    """Partition 1's replica 0 lives on site 1, replica 1 on site 2 (the survivor)."""
    plan = tiny_plan()[0]
    core = SiteCore(2, plan, Layout(plan.sites, plan.partitions, 2))
    out = core.handle(Received([(DRIVER, CuStart(1, 1, 0, 0))]))
    assert [(o.site, o.message) for o in out] == [(s, Retain(1, 1, 0, 0)) for s in (0, 1, 3)]
    for s in (0, 1):
        assert core.handle(Received([(s, Retaining(1, 1, 0, 0))])) == []
    out = core.handle(Received([(3, Retaining(1, 1, 0, 0))]))
    assert [(o.site, type(o.message)) for o in out] == [(1, State)]
    out = core.handle(Received([(1, Installed(1, 1, 0, 0))]))
    assert [(o.site, o.message) for o in out] == [(DRIVER, PSync(2, 1, 0)),
                                                  (DRIVER, CuDone(1, 1, 0, 0))]


def test_every_row_of_the_table_is_exercised() -> None:
    """The machine's tests hit every (state, event) of ``SURVIVOR_TRANSITIONS`` (run here
    again, so that this holds when the test runs alone)."""
    test_cu_start_asks_every_producer_site_to_retain()
    test_a_moves_cu_start_with_every_retaining_early_transfers_at_once()
    for before in ([], [catchup.RetainingEvent(site=0)]):
        for end in (catchup.TargetFailed(), catchup.Superseded(epoch=8)):
            test_a_catch_up_is_abandoned(before, end)
    missing = set(SURVIVOR_TRANSITIONS) - set(HITS)
    assert not missing, f"rows of the table no test drives: {sorted(missing, key=str)}"
