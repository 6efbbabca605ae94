"""Initial connection roles of every FH-Prod / FH-Cons (SIGMOD §3), from the layout, for K
replicas of every partition (K = 2 is the paper's process pair; K = 1 is ``--ha none``).

- Ingress -> first stage: send to and wait for every replica (``del = {PROD, PRIM, SEC}``).
- FH-Prod replica r -> consumer partition q: send to (q, r), its *primary*; wait for every
  other replica (q, c), c != r, its *secondaries*: a row is kept until every copy of the
  consumer that does not get it from r has acknowledged it, so any K - 1 of the K producer
  copies may fail and the last one still holds what any consumer copy lacks.
- Last stage -> egress: replica 0 sends (S-Prod^P), every other replica only buffers until the
  egress acknowledges (S-Prod^S, the duplicate-elimination buffer).
- FH-Cons replica c: take stream p -> q from (p, c), acknowledge to every other replica
  (p, r), r != c; first-stage consumers take from and acknowledge to the ingress; the egress
  takes from replica 0 and acknowledges to the others.

A column that holds no copy (``NOWHERE``: the free column moves build in, ``placement.py``)
is dead from the start: nobody sends to it, waits for it or acknowledges to it.

With one replica nobody waits, and only the first stage acknowledges: to the ingress, whose
admission counts what every first-stage replica has acknowledged (docs/flow-control.md).

Racing replicas (``Layout.race``, ``--ha race``; Hwang et al.): every copy of a producer
partition sends to and waits for every copy of each consumer partition, the egress included;
every consumer copy (and the egress) takes stream p -> q from every complete copy of p
(``sender`` = ``RACE``), passes the first copy of each row that arrives (``ConsumerSet``'s
race filter) and acknowledges its progress to them all. A copy's failure needs no take-over:
the others were sending all along.
"""

from __future__ import annotations

import numpy as np

from sparkflux.dataflow.placement import DRIVER, NOWHERE, Layout

RACE = -1  # ``sender``: every complete copy of the producer partition it acknowledges to


def producer_roles(layout: Layout, producers: dict[int, int], to_egress: bool
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(consumer_site[Q, C], send[Pn, Q, C], wait[Pn, Q, C]) for hosted producer replicas."""
    rep = np.array([producers[p] for p in sorted(producers)], dtype=np.int8)
    if layout.race:
        if to_egress:
            every = np.ones((rep.size, 1, 1), dtype=bool)
            return np.full((1, 1), DRIVER, dtype=np.int32), every, every.copy()
        there = np.broadcast_to((layout.table() != NOWHERE)[None, :, :],
                                (rep.size, layout.partitions, layout.columns))
        return layout.table(), there, there.copy()
    if to_egress:
        site = np.full((1, 1), DRIVER, dtype=np.int32)
        send = (rep == 0)[:, None, None]
        wait = (rep != 0)[:, None, None]
        return site, send, wait
    c = np.arange(layout.columns)[None, None, :]
    r = rep[:, None, None]
    there = (layout.table() != NOWHERE)[None, :, :]
    send = np.broadcast_to((c == r) & there, (rep.size, layout.partitions, layout.columns))
    wait = np.broadcast_to((c != r) & there, send.shape)
    return layout.table(), send, wait


def ingress_roles(layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    there = (layout.table() != NOWHERE)[None, :, :]
    send = there.copy()
    wait = there & (layout.replicas > 1)
    return layout.table(), send, wait


def consumer_roles(layout: Layout, consumers: dict[int, int], first_stage: bool
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(producer_site[P, R], sender[Qn, P], ack_to[Qn, P, R]) for hosted consumer replicas;
    ``ack_to`` marks every producer replica each consumer replica acknowledges to."""
    rep = np.array([consumers[q] for q in sorted(consumers)], dtype=np.int8)
    if first_stage:
        site = np.full((1, 1), DRIVER, dtype=np.int32)
        sender = np.zeros((rep.size, 1), dtype=np.int8)
        # with one replica too: the ingress admits input by these acknowledgements
        ack_to = np.ones((rep.size, 1, 1), dtype=bool)
        return site, sender, ack_to
    if layout.race:
        sender = np.full((rep.size, layout.partitions), RACE, dtype=np.int8)
        there = np.broadcast_to((layout.table() != NOWHERE)[None, :, :],
                                (rep.size, layout.partitions, layout.columns))
        return layout.table(), sender, there.copy()
    sender = np.repeat(rep[:, None], layout.partitions, axis=1)
    ack_to = ((sender[:, :, None] != np.arange(layout.columns)[None, None, :])
              & (layout.table() != NOWHERE)[None, :, :])
    return layout.table(), sender, ack_to


def egress_roles(layout: Layout) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if layout.race:
        return consumer_roles(layout, {0: 0}, first_stage=False)
    sender = np.zeros((1, layout.partitions), dtype=np.int8)
    ack_to = ((np.arange(layout.columns) != 0)[None, None, :]
              & (layout.table() != NOWHERE)[None, :, :])
    return layout.table(), sender, ack_to
