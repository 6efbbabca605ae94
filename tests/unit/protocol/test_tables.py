"""The shared transition lookup: a pair in the table gives its next state and actions; a pair
outside it raises the table's own error, naming the subject, the state and the event."""

from __future__ import annotations

from enum import Enum, StrEnum

import pytest

from sparkflux.protocol.errors import ProtocolError
from sparkflux.protocol.tables import transition


class Light(StrEnum):
    RED = "red"
    GREEN = "green"


class Press(Enum):
    GO = "go"
    STOP = "stop"


class LightError(ProtocolError):
    pass


TABLE = {(Light.RED, Press.GO): (Light.GREEN, ("open",)),
         (Light.GREEN, Press.STOP): (Light.RED, ("close", "count"))}


def test_a_pair_in_the_table_gives_its_state_and_actions() -> None:
    assert transition(TABLE, Light.RED, Press.GO, LightError, "x") == (Light.GREEN, ("open",))
    assert transition(TABLE, Light.GREEN, Press.STOP, LightError, "x") == (
        Light.RED, ("close", "count"))


def test_a_pair_outside_the_table_is_the_tables_error_naming_all_three() -> None:
    with pytest.raises(LightError) as e:
        transition(TABLE, Light.RED, Press.STOP, LightError, "light 4 (street)")
    assert str(e.value) == "light 4 (street): no transition from red on stop"
    assert e.value.__suppress_context__  # the KeyError is not the story


def test_string_events_are_quoted() -> None:
    table = {(Light.RED, "go"): (Light.GREEN, ())}
    with pytest.raises(LightError, match="no transition from green on 'go'"):
        transition(table, Light.GREEN, "go", LightError, "light")
