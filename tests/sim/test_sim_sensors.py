"""``examples/sensors.py`` (three streams through a chain of 1-4 stages, the dataflow of
``bench/tentative.py``) in the simulator, with one stream cut and ``--consistency eventual``:
for every chain length and mode the stable output equals a direct computation of the example
(every reading with its hops' columns), tentative rows reached the output, and every episode
closed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from sparkflux.dataflow.compiler import compile_plan
from sparkflux.dataflow.examples import load_example
from sparkflux.protocol.consistency import MODES, Eventual
from sparkflux.sim.run import FailurePlan, SimClock, simulate
from tests.conftest import ROOT

pytestmark = pytest.mark.usefixtures("quiet_log")

EVENTS = 120  # per stream


@pytest.fixture(scope="module")
def sensors() -> Any:
    return load_example(ROOT / "examples" / "sensors.py")


def arrivals(sensors: Any, o: Any) -> list[tuple[int, pa.RecordBatch]]:
    """The three streams in batches of 10, round robin (each stream's own order)."""
    out = []
    for start in range(0, o.events, 10):
        for k in range(3):
            out.append((k, sensors.readings(k, start, 10, o.seed)))
    return out


def model(sensors: Any, o: Any) -> list[tuple[int, ...]]:
    rows = []
    for k in range(3):
        b = sensors.readings(k, 0, o.events, o.seed)
        value = b.column("value").to_numpy()
        sensor = b.column("sensor").to_numpy().astype(np.int64)
        hops = [(value * (2 * i + 1) + sensor) % 997 for i in range(1, o.stages + 1)]
        rows += [tuple(int(x) for x in r) for r in zip(sensor, value, b.column("ts").to_numpy(),
                                                       *hops, strict=True)]
    return sorted(rows)


@pytest.mark.parametrize("stages", [1, 2, 3, 4])
def test_a_chain_with_a_cut_stream_is_exact(sensors: Any, stages: int) -> None:
    o = sensors.SensorsOptions(events=EVENTS, stages=stages)
    want = model(sensors, o)
    columns = ["sensor", "value", "ts", *(f"h{i}" for i in range(1, stages + 1))]
    for seed, mode in enumerate(MODES):
        plan = compile_plan(sensors.build(o), 8, 4)
        res = simulate(plan, arrivals(sensors, o), seed,
                       FailurePlan(source_cuts=((1, 40, 300),)), clock=SimClock(),
                       eventual=Eventual(20.0, mode))
        assert res.ended
        got = sorted(zip(*[res.output.column(c).to_pylist() for c in columns], strict=True))
        assert got == want, f"{stages} stages, {mode}"
        ops = [op for _, op, _ in res.tentative]
        assert "tentative" in ops and ops[-1] == "rec_done", (stages, mode, ops[-3:])
