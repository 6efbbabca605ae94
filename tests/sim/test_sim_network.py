"""The simulator's links deliver exactly the orders the runtime can produce on a connection:
each class of frame in its own sending order, and a frame that the runtime writes at once
(``overtakes``) possibly ahead of held-back frames sent before it, never the reverse."""

from __future__ import annotations

import numpy as np

from sparkflux.sim.network import CONTROL, DATA, Network


def drain(seed: int, sent: list[str], channel: int = DATA) -> list[str]:
    net = Network(np.random.default_rng(seed), overtakes=lambda m: m.startswith("a"))
    for m in sent:
        net.send(0, 1, m, channel)
    out = []
    while (item := net.pop()) is not None:
        out.append(item[2])
    return out


def test_overtaking_respects_each_class_order_and_never_lets_held_frames_pass() -> None:
    sent = ["d1", "d2", "a1", "d3", "a2", "a3", "d4"]
    orders = {tuple(drain(seed, sent)) for seed in range(300)}
    assert tuple(sent) in orders and len(orders) > 5  # FIFO is one of many orders
    for order in orders:
        assert [m for m in order if m[0] == "d"] == ["d1", "d2", "d3", "d4"]
        assert [m for m in order if m[0] == "a"] == ["a1", "a2", "a3"]
        # an overtaking frame never falls behind a held frame sent after it
        for a in ("a1", "a2", "a3"):
            later = [d for d in ("d1", "d2", "d3", "d4") if sent.index(d) > sent.index(a)]
            assert all(order.index(a) < order.index(d) for d in later), order
    assert any(o[0] == "a1" for o in orders)  # an ack can pass data sent before it


def test_control_channels_stay_fifo() -> None:
    sent = ["d1", "a1", "d2", "a2"]
    assert {tuple(drain(seed, sent, CONTROL)) for seed in range(50)} == {tuple(sent)}
