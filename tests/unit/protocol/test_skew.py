"""The DTSB (duplicate-eliminating transient skew buffer): FIFO, no head-of-line blocking, pool."""

from __future__ import annotations

import random

import pytest

from sparkflux.protocol.skew import SkewBuffer, SkewBufferFull


def test_unblocked_empty_destination_sends_at_once() -> None:
    buf: SkewBuffer[str] = SkewBuffer(10, [0, 1])
    assert buf.offer(0, "a", 5, blocked=False) == ["a"]
    assert buf.held_rows() == 0 and buf.pool_used() == 0 and buf.sent_direct == 1


def test_fifo_per_destination() -> None:
    buf: SkewBuffer[str] = SkewBuffer(100, [0])
    assert buf.offer(0, "a", 1, blocked=True) == []
    assert buf.offer(0, "b", 2, blocked=True) == []
    # unblocked but holding: must queue behind, never overtake
    assert buf.offer(0, "c", 3, blocked=False) == []
    assert buf.blocked_destinations() == [0]
    assert buf.release(0) == ["a", "b", "c"]
    assert buf.offer(0, "d", 1, blocked=False) == ["d"]


def test_reserved_entry_does_not_count_against_pool() -> None:
    buf: SkewBuffer[str] = SkewBuffer(0, [0])
    assert buf.offer(0, "big", 1000, blocked=True) == []  # reserved entry: any size
    assert buf.pool_used() == 0 and buf.held_rows(0) == 1000
    assert not buf.can_hold(0, 1)
    with pytest.raises(SkewBufferFull):
        buf.offer(0, "next", 1, blocked=True)
    assert buf.release(0) == ["big"]


def test_no_head_of_line_blocking() -> None:
    buf: SkewBuffer[str] = SkewBuffer(10, [0, 1, 2])
    buf.offer(0, "a0", 4, blocked=True)  # A's reserved entry
    buf.offer(0, "a1", 6, blocked=True)
    buf.offer(0, "a2", 4, blocked=True)
    assert buf.pool_used() == 10 and not buf.can_admit(1)
    assert issubclass(SkewBufferFull, RuntimeError)
    with pytest.raises(SkewBufferFull):
        buf.offer(0, "a3", 1, blocked=True)
    # the pool is full of A's rows, yet B can still send and C can still hold (reserved entry)
    assert buf.offer(1, "b0", 50, blocked=False) == ["b0"]
    assert buf.offer(2, "c0", 50, blocked=True) == []
    assert buf.blocked_destinations() == [0, 2]
    assert buf.release(2) == ["c0"]
    assert buf.release(0) == ["a0", "a1", "a2"]


def test_pool_accounting_returns_to_zero_after_release() -> None:
    buf: SkewBuffer[int] = SkewBuffer(20, [0, 1])
    for i in range(4):
        buf.offer(i % 2, i, 5, blocked=True)
    assert buf.pool_used() == 10 and buf.held_rows() == 20 and buf.peak_pool_used == 10
    assert buf.can_admit(10) and not buf.can_admit(11)
    assert buf.release(0) == [0, 2] and buf.pool_used() == 5
    assert buf.release(1) == [1, 3]
    assert buf.pool_used() == 0 and buf.held_rows() == 0 and buf.blocked_destinations() == []
    assert buf.release(1) == []


def test_can_admit_false_when_full() -> None:
    buf: SkewBuffer[int] = SkewBuffer(3, [7])
    buf.offer(7, 0, 1, blocked=True)
    assert buf.can_admit(3)
    buf.offer(7, 1, 3, blocked=True)
    assert not buf.can_admit(1) and buf.can_admit(0)


def test_drop_frees_space_and_returns_count() -> None:
    buf: SkewBuffer[int] = SkewBuffer(10, [0, 1])
    buf.offer(0, 0, 3, blocked=True)
    buf.offer(0, 1, 4, blocked=True)
    buf.offer(1, 2, 6, blocked=True)
    buf.offer(1, 3, 6, blocked=True)
    assert buf.pool_used() == 10
    assert buf.drop(0) == 7
    assert buf.pool_used() == 6 and buf.held_rows(0) == 0 and buf.dropped_rows == 7
    assert buf.release(0) == []
    # the dropped destination stays registered and works again
    assert buf.offer(0, 4, 1, blocked=False) == [4]
    assert buf.remove(1) == 12 and buf.pool_used() == 0 and buf.destinations() == [0]


def test_unknown_destination_raises() -> None:
    buf: SkewBuffer[int] = SkewBuffer(10, [0])
    for call in (lambda: buf.offer(5, 0, 1, blocked=False), lambda: buf.release(5),
                 lambda: buf.drop(5), lambda: buf.held_rows(5)):
        with pytest.raises(KeyError, match="unknown destination 5"):
            call()
    buf.add(5)
    buf.add(5)  # idempotent
    assert buf.offer(5, 0, 1, blocked=False) == [0]


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        SkewBuffer(-1, [0])
    buf: SkewBuffer[int] = SkewBuffer(10, [0])
    with pytest.raises(ValueError):
        buf.offer(0, 0, -1, blocked=True)


@pytest.mark.parametrize("seed", range(200))
def test_randomized_against_model(seed: int) -> None:
    rng = random.Random(seed)
    capacity = rng.choice([0, 1, 5, 20, 100])
    n_dest = rng.randint(1, 5)
    buf: SkewBuffer[int] = SkewBuffer(capacity, range(n_dest))
    model: dict[int, list[tuple[int, int]]] = {d: [] for d in range(n_dest)}  # held (item, rows)
    offered: dict[int, list[int]] = {d: [] for d in range(n_dest)}
    emitted: dict[int, list[int]] = {d: [] for d in range(n_dest)}
    dropped: set[int] = set()
    next_item = 0

    def check() -> None:
        pool = sum(r for held in model.values() for _, r in held[1:])
        assert buf.pool_used() == pool <= capacity
        assert buf.held_rows() == sum(r for held in model.values() for _, r in held)
        assert buf.blocked_destinations() == sorted(d for d, held in model.items() if held)

    for _ in range(rng.randint(1, 150)):
        dest = rng.randrange(len(model))
        op = rng.random()
        if op < 0.65:
            rows = rng.randint(0, 12)
            blocked = rng.random() < 0.5
            item, next_item = next_item, next_item + 1
            held = model[dest]
            if held and buf.pool_used() + rows > capacity:
                assert not buf.can_hold(dest, rows)
                with pytest.raises(SkewBufferFull):
                    buf.offer(dest, item, rows, blocked)
            else:
                assert buf.can_hold(dest, rows)
                offered[dest].append(item)
                out = buf.offer(dest, item, rows, blocked)
                if not blocked and not held:
                    assert out == [item]
                else:
                    assert out == []
                    held.append((item, rows))
                emitted[dest] += out
        elif op < 0.9:
            out = buf.release(dest)
            assert out == [i for i, _ in model[dest]]
            emitted[dest] += out
            model[dest].clear()
        elif op < 0.97:
            assert buf.drop(dest) == sum(r for _, r in model[dest])
            dropped.update(i for i, _ in model[dest])
            model[dest].clear()
        else:
            new = len(model)
            buf.add(new)
            model[new], offered[new], emitted[new] = [], [], []
        check()

    for dest in model:
        assert buf.release(dest) == [i for i, _ in model[dest]]
        emitted[dest] += [i for i, _ in model[dest]]
        model[dest].clear()
    check()
    assert buf.pool_used() == 0 and buf.held_rows() == 0
    everything = [i for out in emitted.values() for i in out]
    assert len(everything) == len(set(everything)) and not dropped & set(everything)
    for dest in model:
        assert emitted[dest] == [i for i in offered[dest] if i not in dropped]


def test_release_next_hands_out_one_message_at_a_time_in_order() -> None:
    buf: SkewBuffer[str] = SkewBuffer(100, [0])
    for i, rows in enumerate((5, 7, 9)):
        assert buf.offer(0, f"m{i}", rows, blocked=True) == []
    assert buf.pool_used() == 16  # all but the reserved head
    assert buf.release_next(0) == "m0" and buf.pool_used() == 9
    assert buf.release_next(0) == "m1" and buf.pool_used() == 0
    assert buf.release_next(0) == "m2" and buf.release_next(0) is None
    assert buf.held_rows() == 0


def test_outbox_never_raises_when_the_pool_is_full() -> None:
    """A destination that holds frames while the pool is full gets the next frame written
    (after what it holds), never an exception: admission bounds what is in flight."""
    from sparkflux.runtime.outbox import Outbox

    class Conn:
        def __init__(self) -> None:
            self.sent: list[object] = []
            self.closed = False
            self.size = 1 << 20  # blocked

        def buffered(self) -> int:
            return self.size

        def send(self, msg: object) -> None:
            self.sent.append(msg)

    import numpy as np
    import pyarrow as pa

    from sparkflux.protocol.messages import Data, Streams

    def data(n: int) -> Data:
        e = np.zeros(0, dtype=np.int32)
        return Data(1, Streams(e, e.astype(np.int8), e, e.astype(np.int64), e.astype(np.int64)),
                    pa.record_batch([pa.array(np.arange(n))], names=["x"]))

    conn = Conn()
    box = Outbox(lambda d: conn, capacity_rows=10)  # type: ignore[arg-type, return-value]
    msgs = [data(6) for _ in range(4)]
    for m in msgs:
        box.send(0, m)
    assert conn.sent[: len(conn.sent)] == msgs[: len(conn.sent)]  # in order
    conn.size = 0
    box.flush()
    assert conn.sent == msgs and box.held_rows() == 0


def test_outbox_control_frame_to_a_lost_peer_is_dropped_quietly() -> None:
    """A control frame (an ack) to a peer whose connection is lost, before any data went to
    it, must not raise: the view change follows. (CI found a site dying on exactly this.)"""
    import numpy as np

    from sparkflux.protocol.messages import Ack
    from sparkflux.runtime.outbox import Outbox
    from sparkflux.runtime.transport import ConnectionLost

    class Lost:
        closed = True

        def buffered(self) -> int:
            return 0

        def send(self, msg: object) -> None:
            raise ConnectionLost("peer gone")

    box = Outbox(lambda d: Lost(), capacity_rows=10)  # type: ignore[arg-type, return-value]
    e = np.zeros(1, dtype=np.int32)
    box.send(3, Ack(0, e, e, e.astype(np.int8), e.astype(np.int64)))
    assert box.held_rows() == 0 and box.skew.destinations() == []
