"""The control plane's messages (``protocol/control_messages.py``): frozen, keyword-only
records of plain values (the wire decodes them by schema, never by running code), every one
listed in ``CONTROL_TYPES``, and the few a site handles before its core in ``UNGATED``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from sparkflux.protocol import control_messages as cm

PLAIN = ("int", "float", "str", "bool", "np.ndarray", "npt.NDArray[np.int64]",
         "npt.NDArray[np.int32]", "Member", "tuple[int, ...]", "tuple[float, ...]",
         "dict[int, Member]")


def test_control_types_are_exactly_the_control_messages() -> None:
    assert set(cm.CONTROL_TYPES) == set(cm.ControlMessage.__args__)
    assert len(cm.CONTROL_TYPES) == len(set(cm.CONTROL_TYPES)) == 20
    assert set(cm.UNGATED) == {cm.Stop, cm.Kill, cm.Slow, cm.Standby, cm.Squeeze} < set(
        cm.CONTROL_TYPES)


@pytest.mark.parametrize("t", [*cm.CONTROL_TYPES, cm.Member], ids=lambda t: t.__name__)
def test_every_message_is_a_frozen_keyword_only_record_of_plain_values(t: type) -> None:
    assert t.__dataclass_params__.frozen and hasattr(t, "__slots__")
    for f in dataclasses.fields(t):
        assert f.kw_only and f.type in PLAIN, (t.__name__, f.name, f.type)


def test_the_defaults() -> None:
    beat = cm.Heartbeat(site=0, attempt=0, pid=1, busy_s=0.0, slept_s=0.0, passes=0,
                        cpu_s=0.0, buffered=0, capacity_s=1.0, at=0.0)
    for name in ("counts", "in_sn", "in_part", "out_sn", "out_part"):
        a = getattr(beat, name)
        assert a.dtype == np.int64 and a.size == 0
    assert beat.counts is not beat.in_sn  # a fresh array each
    assert (beat.refused, beat.held, beat.pending) == (0, 0, 0)
    assert cm.Move(q=1, r=0, dst=2, epoch=3).survivor == -1  # the next replica after r
    assert cm.Stop(reason="done").excluded is False
    assert cm.View(number=1, members={}).ring == ()  # the identity ring
    assert cm.View(number=1, members={}).table.size == 0  # placed by the ring


def test_positional_arguments_are_refused() -> None:
    with pytest.raises(TypeError):
        cm.Fail((1,))  # type: ignore[misc]
    assert cm.Fail(dead=(1,)).dead == (1,)
