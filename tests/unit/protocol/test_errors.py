"""One error type for every broken protocol invariant: the tables' impossible pairs (moves,
rounds, membership, a site's life, a catch-up) and the buffers' impossible frames are all a
``ProtocolError``, which the hosts turn into a fail-stop with its message. It is never a
``ValueError``, so no handler of a user's bad input (``PlanError``, a malformed record) can
swallow a bug."""

from __future__ import annotations

import pytest

from sparkflux.control.membership import RecoveryError, SlotError, StandbyError
from sparkflux.control.moves import MoveError
from sparkflux.control.rounds import RoundError
from sparkflux.model.errors import PlanError
from sparkflux.protocol.catchup import CatchUpError
from sparkflux.protocol.consumer import PartitionLost
from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.site_boundary import SiteLifeError
from tests.unit.protocol.test_producer import ack, buffer

SPECIFIC = (SlotError, StandbyError, RecoveryError, MoveError, RoundError, CatchUpError,
            PartitionLost, SiteLifeError)


@pytest.mark.parametrize("error", SPECIFIC, ids=lambda e: e.__name__)
def test_every_table_error_is_a_protocol_error(error: type[Exception]) -> None:
    assert issubclass(error, ProtocolError)
    assert not issubclass(error, ValueError)


def test_a_protocol_error_is_never_a_users_mistake() -> None:
    assert not issubclass(ProtocolError, ValueError) and issubclass(PlanError, ValueError)
    with pytest.raises(ProtocolError):
        try:
            buffer().on_ack(ack(5, 1, 1, 3), src=2)  # a producer partition out of range
        except ValueError:  # a handler of bad input must not catch it
            pytest.fail("a ProtocolError was caught as a ValueError")
