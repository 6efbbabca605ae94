"""The protocol's messages (``protocol/messages.py``): frozen records with the defaults the
protocol relies on (epoch 0: the first incarnation; a catch-up not prepared by a move)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sparkflux.model import schema
from sparkflux.protocol import messages as m


def test_streams_are_parallel_arrays_and_their_length_is_the_entries() -> None:
    st = m.Streams(p=np.array([0, 1], np.int32), r=np.zeros(2, np.int8),
                   q=np.array([3, 3], np.int32), sn=np.array([5, 6]), wm=np.array([1, 2]))
    assert len(st) == 2
    assert len(m.Streams(*(np.zeros(0),) * 5)) == 0


def test_the_defaults() -> None:
    assert m.CuStart(stage=1, q=2, r=0) == m.CuStart(1, 2, 0, epoch=0, retained=False)
    assert m.Retain(1, 2, 1).epoch == m.Retaining(1, 2, 1).epoch == 0
    assert m.PSync(1, 2, 1).epoch == m.Installed(1, 2, 1).epoch == 0
    assert m.CuDone(1, 2, 1, nbytes=10).move_s == 0.0
    assert m.Keepalive() == m.Keepalive()


def test_messages_are_frozen_and_slotted() -> None:
    ps = m.PSync(1, 2, 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ps.epoch = 3  # type: ignore[misc]
    for t in (m.Data, m.Ack, m.Reverse, m.CuStart, m.Retain, m.Retaining, m.State,
              m.Installed, m.PSync, m.Rejoin, m.CuDone, m.Outgoing):
        assert dataclasses.is_dataclass(t) and t.__dataclass_params__.frozen, t
        assert hasattr(t, "__slots__"), t


def test_snapshots_are_keyword_only() -> None:
    with pytest.raises(TypeError):
        m.ConsumerSnapshot(np.zeros(1), np.zeros(1), 0, 0, None)  # type: ignore[misc]
    snap = m.ConsumerSnapshot(progress_sn=np.zeros(1), progress_wm=np.zeros(1), released_sn=0,
                              released_wm=0, pending=None)
    part = m.PartitionSnapshot(cons=snap, ops=(), out_sn=1, out_wm=2)
    assert part.held is None


def test_message_is_the_union_of_the_core_messages_and_src_is_the_schemas() -> None:
    assert set(m.Message.__args__) == {m.Data, m.Ack, m.Reverse, m.CuStart, m.Retain,
                                       m.Retaining, m.State, m.Installed, m.PSync, m.Rejoin,
                                       m.Rejoined, m.CuDone, m.Cut, m.StoredPartition,
                                       m.LoadPartition, m.SpillInput, m.Tentative,
                                       m.Reconciled}
    assert m.SRC == schema.SRC == "_src"
    out = m.Outgoing(-1, m.PSync(1, 2, 1))
    assert (out.site, out.message) == (-1, m.PSync(1, 2, 1))
