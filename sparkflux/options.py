"""A run's options, as ``sparkflux run`` takes them and as ``sparkflux.start`` takes them
(keyword arguments named like the command's options: ``--spare-sites`` is ``spare_sites``).
They are one typed record, ``RunOptions`` (``runtime/run_options.py``: each option's type,
default, help and check, written once); this module is what the surface builds from it: the
command's options (``add_run_options``), the options of parsed arguments (``options_of``) and
the ``RunConfig`` a run is started with (``run_config``). A bad option is a ``PlanError`` that
says what to write instead, before anything starts."""

from __future__ import annotations

import argparse
import types
from dataclasses import Field, fields
from typing import Any, Union, get_args, get_origin, get_type_hints

from sparkflux.runtime.fault_specs import Kill, parse_kill
from sparkflux.runtime.run_config import RunConfig
from sparkflux.runtime.run_options import (
    HEARTBEAT_INTERVAL_S,
    MIN_HEARTBEAT_TIMEOUT_S,
    MIN_LINK_TIMEOUT_S,
    RunOptions,
    balance_window,
    heartbeat_timeout_option,
    link_timeout_option,
    replicas_option,
    seconds_option,
    site_cpu_option,
    stall_timeout,
    window_option,
)

__all__ = [
    "HEARTBEAT_INTERVAL_S", "MIN_HEARTBEAT_TIMEOUT_S", "MIN_LINK_TIMEOUT_S", "RunOptions",
    "add_run_options", "balance_window", "flag_of", "heartbeat_timeout_option",
    "link_timeout_option", "options_of", "parse_kills", "replicas_option", "run_config",
    "seconds_option", "site_cpu_option", "stall_timeout", "window_option",
]


def run_config(**options: Any) -> RunConfig:
    """The ``RunConfig`` of ``options`` (unknown names and bad values: PlanError)."""
    return RunConfig.of(RunOptions.of(**options))


def options_of(args: Any) -> dict[str, Any]:
    """The options in parsed ``sparkflux run`` arguments (absent ones: their defaults). A
    namespace made by hand may say ``no_balance=True`` for ``balance=False``."""
    out = {f.name: getattr(args, f.name) for f in fields(RunOptions) if hasattr(args, f.name)}
    if getattr(args, "no_balance", False):
        out["balance"] = False
    return out


def flag_of(f: Field[Any]) -> str:
    """The command's flag for a ``RunOptions`` field."""
    return f.metadata["flag"] or "--" + f.name.replace("_", "-")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Add every ``RunOptions`` field to ``parser`` as its flag: the field's type, default,
    help, metavar and choices; a bool a switch (``store_true``, or ``store_false`` for one
    on by default, such as ``--no-balance``); a tuple of fault specs a repeatable string
    (``action="append"``, parsed into records by ``RunOptions``)."""
    hints = get_type_hints(RunOptions)
    for f in fields(RunOptions):
        meta = f.metadata
        kw: dict[str, Any] = {"dest": f.name, "help": meta["help"]}
        kind = hints[f.name]
        if kind is bool:
            kw["action"] = "store_false" if f.default else "store_true"
        elif get_origin(kind) is tuple:
            kw.update(action="append", default=[], type=str)
        else:
            kw.update(type=_scalar(kind), default=f.default)
        if meta["metavar"] is not None and kind is not bool:
            kw["metavar"] = meta["metavar"]
        if meta["choices"] is not None:
            kw["choices"] = list(meta["choices"])
        parser.add_argument(flag_of(f), **kw)


def _scalar(kind: Any) -> type:
    """``int`` of ``int | None``: what the command parses an option's text into."""
    if get_origin(kind) in (Union, types.UnionType):
        (kind,) = [a for a in get_args(kind) if a is not type(None)]
    assert isinstance(kind, type)
    return kind


def parse_kills(specs: list[str], sites: int, master: str | None = None) -> tuple[Kill, ...]:
    """``--kill`` specs, every form, as records (a bad one: PlanError saying what to
    write)."""
    return tuple(parse_kill(spec, sites, master) for spec in specs)
