"""The harness the simulator's seeded tests on the tiny workload share (``sim/workload.py``'s
``tiny_plan``): its failure-free baseline, a test's chunk of seeds, and the mutation hunt (a
mutant must be caught by a seed, and that very seed must pass unmutated)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from sparkflux.sim.run import simulate
from sparkflux.sim.workload import tiny_plan


@dataclass(frozen=True)
class Baseline:
    """The tiny workload's input and its failure-free output and length in steps."""

    batches: list[pa.RecordBatch]
    output: pa.Table
    steps: int


def tiny_baseline(events: int) -> Baseline:
    plan, batches = tiny_plan(events=events)
    res = simulate(plan, batches, 0)
    assert res.ended and res.output.num_rows > 0
    return Baseline(batches, res.output, res.steps)


def chunk_of(total: int, chunks: int, chunk: int) -> range:
    """Chunk ``chunk`` of ``chunks`` of the seeds ``range(total)``."""
    size = -(-total // chunks)
    return range(chunk * size, min((chunk + 1) * size, total))


# (a baseline, a seed): raises AssertionError, saying why, on a bad seed
RunSeed = Callable[[Any, int], Any]


def hunt(run_seed: RunSeed, base: Any, seeds: int,
         symptoms: tuple[str, ...] | None = None) -> tuple[int, str]:
    """The first seed whose run fails, and why; with ``symptoms``, the first whose reason
    names one of them (seeds failing for another reason are passed over, and listed if
    none does)."""
    others: list[str] = []
    for seed in range(seeds):
        try:
            run_seed(base, seed)
        except AssertionError as e:
            if symptoms is None or any(s in str(e) for s in symptoms):
                return seed, str(e)
            others.append(str(e))
    raise AssertionError(f"the mutation survived {seeds} seeds; other violations: "
                         f"{others[:3]}")


def caught(monkeypatch: pytest.MonkeyPatch, run_seed: RunSeed, base: Any, seeds: int,
           symptom: str | tuple[str, ...], name: str) -> None:
    """The mutant (patched in ``monkeypatch``) is caught by a seed, with ``symptom`` in the
    reason (a tuple: the first seed with one of them in it); unpatched, the very same seed
    passes."""
    seed, msg = hunt(run_seed, base, seeds, symptom if isinstance(symptom, tuple) else None)
    print(f"mutation {name!r}: caught by seed {seed}: {msg}")
    if isinstance(symptom, str):
        assert symptom in msg, msg
    monkeypatch.undo()  # control: the very same seed passes with the real protocol
    run_seed(base, seed)
