"""The lookup every transition table of the cores shares (a move's phases, a balancing
round's, a site slot's life, a standby's, the recovery task's, a new replica's catch-up):
the next state and the actions of an event in a state, or, for a pair the table does not
hold, the table's own ``ProtocolError`` naming what it is about, the state and the event.
An impossible pair is a bug: the run stops fail-stop, never carries on in a wrong state."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import TypeVar

from sparkflux.protocol.errors import ProtocolError

S = TypeVar("S", bound=Enum)
E = TypeVar("E", bound=Enum | str)


def transition(table: Mapping[tuple[S, E], tuple[S, tuple[str, ...]]], state: S, event: E,
               error: type[ProtocolError], what: str) -> tuple[S, tuple[str, ...]]:
    """``table[(state, event)]``, or ``error`` saying "{what}: no transition from {state} on
    {event}"."""
    try:
        return table[(state, event)]
    except KeyError:
        on = event.value if isinstance(event, Enum) else repr(event)
        raise error(f"{what}: no transition from {state.value} on {on}") from None
