"""The driver's read-ahead (``runtime/driver_inbox.py``): an episode's ``Tentative`` frames
are handled before the stable frames read ahead of them, every other frame keeps its order,
a lost connection is raised only after every frame read before the loss, and the reader
stops at its read-ahead limit."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from sparkflux.protocol.messages import Tentative
from sparkflux.runtime.driver_inbox import Inbox
from sparkflux.runtime.transport import ConnectionLost


class FakeConn:
    """A connection whose frames are already queued, then lost."""

    def __init__(self, frames: list[Any]) -> None:
        self.frames = list(frames)
        self.read = 0

    async def recv_message(self, schema_of: dict[int, Any]) -> Any:
        if not self.frames:
            raise ConnectionLost("connection to site 1 lost: EOF")
        self.read += 1
        return self.frames.pop(0)


def tentative(k: int) -> Tentative:
    return Tentative(1, k, None, 0, 0)


async def drain(inbox: Inbox) -> list[Any]:
    reader = asyncio.create_task(inbox.reader())
    await asyncio.sleep(0)  # the reader takes what is queued
    got = []
    with pytest.raises(ConnectionLost, match="EOF"):
        while True:
            got.append(await inbox.next())
    await reader
    return got


def test_tentative_frames_go_before_the_stable_frames_read_ahead_of_them() -> None:
    frames = ["data 1", "psync", tentative(1), "data 2", tentative(2), "data 3"]
    got = asyncio.run(drain(Inbox(FakeConn(frames), {})))  # type: ignore[arg-type]
    assert got == [tentative(1), tentative(2), "data 1", "psync", "data 2", "data 3"]


def test_the_reader_stops_at_its_limit_and_goes_on_as_frames_are_taken() -> None:
    async def run() -> tuple[int, list[Any]]:
        conn = FakeConn([f"data {k}" for k in range(10)])
        inbox = Inbox(conn, {}, limit=3)  # type: ignore[arg-type]
        reader = asyncio.create_task(inbox.reader())
        for _ in range(5):
            await asyncio.sleep(0)
        held = conn.read
        got = []
        with pytest.raises(ConnectionLost):
            while True:
                got.append(await inbox.next())
        await reader
        return held, got

    held, got = asyncio.run(run())
    assert held == 3
    assert got == [f"data {k}" for k in range(10)]
