"""The operators, importable from here (``from sparkflux.operators import Map,
TimeWindowAggregate``), and the operator contract for your own (``Operator`` and
``PartitionInfo`` in ``base.py``; docs/operators.md). Each is imported on first use: a site
imports only the operators of its plan."""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "Operator": "base", "PartitionInfo": "base",
    "Filter": "stateless", "Map": "stateless", "Project": "stateless",
    "CountWindowAggregate": "count_window", "TimeWindowAggregate": "time_window",
    "SessionWindowAggregate": "session_window", "SessionReconstruction": "session",
    "GroupAggregate": "group", "Dedup": "dedup", "WindowTopK": "topk", "KeyedTopK": "topk",
    "WindowJoin": "join", "StreamJoin": "stream_join",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
