"""The channel table (``protocol/channels.py``): which connection every message travels on,
and which keep their place behind data (rule 2)."""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.protocol import control_messages as cm
from sparkflux.protocol.channels import (
    ORDERED_WITH_DATA,
    ROUTES,
    Channel,
    channel_of,
    ordered_with_data,
    route,
)
from sparkflux.protocol.messages import (
    Ack,
    CuDone,
    CuStart,
    Cut,
    Data,
    Installed,
    Keepalive,
    PSync,
    Reconciled,
    Rejoin,
    Rejoined,
    Retain,
    Retaining,
    Reverse,
    State,
    Tentative,
)


def test_exactly_data_retaining_psync_cu_done_and_a_cut_wait_behind_data() -> None:
    assert set(ORDERED_WITH_DATA) == {Data, Retaining, PSync, CuDone, Cut, Reconciled,
                                      Rejoined}
    assert all(ROUTES[t][0] is Channel.LINK for t in ORDERED_WITH_DATA)


def test_every_other_link_frame_is_written_at_once() -> None:
    for t in (Ack, Reverse, Rejoin, Retain, Keepalive, Tentative, cm.Register, cm.View,
              cm.Standby, cm.Adopt, cm.Ready):
        assert ROUTES[t] == (Channel.LINK, False), t


def test_state_has_its_own_connection_and_the_controller_its_own() -> None:
    assert ROUTES[State] == ROUTES[Installed] == (Channel.STATE, False)
    control = {t for t, (ch, _) in ROUTES.items() if ch is Channel.CONTROL}
    assert control == {CuStart, cm.OpenControl, cm.Heartbeat, cm.Moved, cm.Folded, cm.PartStored,
                       cm.SiteError, cm.Unreachable, cm.Avail, cm.Fail, cm.Move, cm.Slow,
                       cm.Kill, cm.Stop, cm.Squeeze}


def test_route_reads_the_message_not_its_type() -> None:
    psync = PSync(stage=1, p=0, r=1, epoch=2)
    assert route(psync) == (Channel.LINK, True)
    assert channel_of(psync) is Channel.LINK and ordered_with_data(psync)
    ack = Ack(1, np.zeros(1, np.int32), np.zeros(1, np.int32), np.zeros(1, np.int8),
              np.zeros(1, np.int64))
    assert channel_of(ack) is Channel.LINK and not ordered_with_data(ack)
    assert channel_of(CuStart(stage=0, q=1, r=0)) is Channel.CONTROL
    assert channel_of(Installed(stage=0, q=1, r=0)) is Channel.STATE


def test_a_message_with_no_route_is_an_error() -> None:
    with pytest.raises(TypeError, match="no route for a str"):
        route("hello")
    with pytest.raises(TypeError, match="no route for a type"):
        channel_of(Data)  # the class itself is not a message
