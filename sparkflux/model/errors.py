"""The error a user's plan or options raise: ``PlanError``, a ``ValueError`` whose message
says what to change. It lives in the lowest layer so that every layer (operators, the
dataflow compiler, sources and sinks, the run's options and fault specs) raises the same
type, and a user catches one thing: ``sparkflux.PlanError``."""

from __future__ import annotations


class PlanError(ValueError):
    """A dataflow or an option that cannot run as written; the message says what to
    change."""
