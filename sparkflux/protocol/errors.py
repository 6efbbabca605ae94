"""``ProtocolError``: a protocol invariant was violated (an acknowledgement beyond what was
sent, a frame from a replica that is not a member, a table's impossible state and event).
The site or the driver that finds one stops fail-stop with its message: a wrong state is
never carried on. A ``RuntimeError``, not a ``ValueError``: it is a bug or a corrupted peer,
never a user's mistake (those are ``PlanError``)."""

from __future__ import annotations


class ProtocolError(RuntimeError):
    """A protocol invariant was violated; the site stops (fail-stop) with this message."""
