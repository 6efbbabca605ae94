"""The initial connection roles (``protocol/roles.py``): who sends to, waits for and
acknowledges to whom, for K = 1, 2 and 3, with the spare column dead from the start."""

from __future__ import annotations

import numpy as np

from sparkflux.dataflow.placement import DRIVER, NOWHERE, Layout
from sparkflux.protocol.roles import consumer_roles, egress_roles, ingress_roles, producer_roles


def test_a_producer_replica_sends_to_its_primary_and_waits_for_the_other_copies() -> None:
    layout = Layout(4, 2, 2)  # columns: 2 replicas + 1 spare (NOWHERE)
    site, send, wait = producer_roles(layout, {0: 1, 1: 0}, to_egress=False)
    assert site.tolist() == [[0, 1, NOWHERE], [1, 2, NOWHERE]]
    # producer replica 1 (of partition 0): sends to column 1 of every consumer partition
    assert send[0].tolist() == [[False, True, False], [False, True, False]]
    assert wait[0].tolist() == [[True, False, False], [True, False, False]]
    # producer replica 0 (of partition 1): the mirror image; the spare column never
    assert send[1].tolist() == [[True, False, False], [True, False, False]]
    assert wait[1].tolist() == [[False, True, False], [False, True, False]]


def test_with_three_replicas_a_producer_waits_for_the_two_other_copies() -> None:
    layout = Layout(5, 1, 3)
    _, send, wait = producer_roles(layout, {0: 2}, to_egress=False)
    assert send[0].tolist() == [[False, False, True, False]]
    assert wait[0].tolist() == [[True, True, False, False]]


def test_the_last_stage_replica_0_sends_to_the_egress_and_the_others_only_buffer() -> None:
    site, send, wait = producer_roles(Layout(3, 2, 2), {0: 0, 1: 1}, to_egress=True)
    assert site.tolist() == [[DRIVER]]
    assert send[:, 0, 0].tolist() == [True, False]
    assert wait[:, 0, 0].tolist() == [False, True]


def test_the_ingress_sends_to_every_copy_and_waits_only_with_replicas() -> None:
    _, send, wait = ingress_roles(Layout(3, 2, 2))
    assert send[0].tolist() == [[True, True, False], [True, True, False]]
    assert (send == wait).all()
    _, send1, wait1 = ingress_roles(Layout(2, 2, 1))  # --ha none: nobody waits
    assert send1.all() and not wait1.any()


def test_a_consumer_replica_takes_from_its_own_column_and_acks_to_the_others() -> None:
    layout = Layout(4, 2, 2)
    site, sender, ack_to = consumer_roles(layout, {0: 0, 1: 1}, first_stage=False)
    assert site is layout.table()  # the live table: moves change the roles in place
    assert sender.tolist() == [[0, 0], [1, 1]]
    assert ack_to[0].tolist() == [[False, True, False], [False, True, False]]
    assert ack_to[1].tolist() == [[True, False, False], [True, False, False]]


def test_first_stage_consumers_take_from_and_acknowledge_to_the_ingress() -> None:
    site, sender, ack_to = consumer_roles(Layout(2, 2, 1), {0: 0, 1: 0}, first_stage=True)
    assert site.tolist() == [[DRIVER]]
    assert sender.tolist() == [[0], [0]]
    assert ack_to.shape == (2, 1, 1) and ack_to.all()  # with one replica too


def test_the_egress_takes_from_replica_0_and_acknowledges_to_the_other_copies() -> None:
    layout = Layout(3, 2, 2)
    _, sender, ack_to = egress_roles(layout)
    assert sender.tolist() == [[0, 0]]
    assert ack_to[0].tolist() == [[False, True, False], [False, True, False]]
    _, _, none = egress_roles(Layout(3, 2, 1))
    assert not none.any()


def test_a_column_moved_to_nowhere_drops_out_of_every_role() -> None:
    layout = Layout(4, 2, 2)
    layout.move(0, 1, NOWHERE)
    _, send, wait = producer_roles(layout, {0: 0}, to_egress=False)
    assert wait[0, 0].tolist() == [False, False, False] and wait[0, 1].tolist()[1]
    assert np.array_equal(ingress_roles(layout)[1][0, 0], [True, False, False])
