"""The per-row duplicate filter's memory (``protocol/seen_keys.py``): a key passes once,
the covered keys go in bulk once the memory doubled, and a partition's keys come out for a
snapshot as (p, SN, SNM, port)."""

from __future__ import annotations

import numpy as np
import pytest

from sparkflux.protocol import seen_keys
from sparkflux.protocol.seen_keys import SeenKeys


def keys(*rows: tuple[int, int, int, int]) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1, 4)


def test_a_key_passes_once() -> None:
    s = SeenKeys(3)
    assert s.first(keys((0, 5, 0, 0), (1, 5, 0, 0), (0, 5, 1, 0))).tolist() == [True] * 3
    assert s.first(keys((0, 5, 0, 0), (0, 5, 0, 1), (1, 5, 0, 0))).tolist() == \
        [False, True, False]
    assert len(s) == 4
    assert s.first(keys((2, 1, 0, 0), (2, 1, 0, 0))).tolist() == [True, False]  # one call


def test_covered_keys_go_in_bulk_once_the_memory_doubled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seen_keys, "PRUNE_AT", 4)
    s = SeenKeys(2)
    progress = np.full((2, 2), -1, dtype=np.int64)  # [qi, p]
    s.first(keys((0, 1, 0, 0), (0, 2, 0, 0), (1, 9, 0, 0)))
    progress[0, 0] = 2  # stream (qi 0, p 0) covered up to 2
    s.prune(progress)
    assert len(s) == 3  # below PRUNE_AT: kept for now (harmless: covered rows never ask)
    s.first(keys((3, 4, 0, 0)))
    s.prune(progress)
    assert sorted(s.array(progress)[:, 1].tolist()) == [4, 9] and len(s) == 2
    assert s.first(keys((0, 1, 0, 0))).tolist() == [True]  # forgotten with its stream covered


def test_a_partitions_keys_for_a_snapshot_and_forgotten() -> None:
    s = SeenKeys(3)
    progress = np.full((2, 3), -1, dtype=np.int64)
    s.first(keys((0 * 3 + 2, 7, 1, 0), (1 * 3 + 0, 8, 0, 0)))
    assert s.of(0, progress).tolist() == [[2, 7, 1, 0]]
    s.forget(0)
    assert s.of(0, progress).shape == (0, 4) and s.of(1, progress).tolist() == [[0, 8, 0, 0]]
