"""``Faults`` fires each fault at its moment: seconds on the loop's clock, or a count of
admitted input records (``input+RECORDS``), in the order of the counts, each once; a count
the input never reaches is reported as unfired."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from sparkflux.runtime.fault_specs import Admitted, Cut, Hang, KillAt, Slow
from sparkflux.runtime.faults import Faults
from sparkflux.runtime.run_config import RunConfig


class Recorder(Faults):
    """The faults, with what they would do recorded instead of done."""

    def __init__(self, cfg: RunConfig) -> None:
        super().__init__(SimpleNamespace(  # type: ignore[arg-type]
            cfg=cfg, metrics=SimpleNamespace(start=None), plan=SimpleNamespace(streams=[])))
        self.done: list[tuple[Any, ...]] = []

    def kill(self, site: int, after: float) -> None:
        self.done.append(("kill", site))

    def slow(self, site: int, factor: float, after: float = 0.0) -> None:
        self.done.append(("slow", site, factor))

    def hang(self, site: int, duration: float, after: float = 0.0) -> None:
        self.done.append(("hang", site, duration))

    def cut(self, site: int, after: float, duration: float, driver: bool) -> None:
        self.done.append(("cut", site, duration, driver))


def armed(**faults: Any) -> Recorder:
    rec = Recorder(RunConfig(sites=4, partitions=8, ha="flux", **faults))

    async def arm() -> None:
        rec.arm()

    asyncio.run(arm())
    return rec


def test_faults_timed_by_input_fire_in_order_of_their_counts_once() -> None:
    rec = armed(kills=(KillAt(2, Admitted(500)), KillAt(1, Admitted(100))),
                slows=(Slow(3, Admitted(300), 0.5),), hangs=(Hang(0, Admitted(100), 2.0),),
                cuts=(Cut(1, Admitted(900), 4.0, isolate=True),))
    rec.admitted(99)
    assert rec.done == []
    rec.admitted(100)
    assert sorted(rec.done) == [("hang", 0, 2.0), ("kill", 1)]
    rec.admitted(600)  # one batch past two counts: both fire, in order
    assert rec.done[2:] == [("slow", 3, 0.5), ("kill", 2)]
    rec.admitted(700)
    assert len(rec.done) == 4  # nothing fires twice
    assert rec.unfired() == ["--isolate 1@input+900=4"]
    rec.admitted(10_000)
    assert rec.done[-1] == ("cut", 1, 4.0, True) and rec.unfired() == []


def test_faults_timed_in_seconds_fire_on_the_loop_clock() -> None:
    rec = Recorder(RunConfig(sites=4, partitions=8, ha="flux",
                             kills=(KillAt(1, 0.05),), hangs=(Hang(2, 0.0, 1.0),)))

    async def run() -> None:
        rec.arm()
        assert rec.done == []  # nothing fires inside arm
        await asyncio.sleep(0.2)

    asyncio.run(run())
    assert rec.done == [("hang", 2, 1.0), ("kill", 1)] and rec.unfired() == []
