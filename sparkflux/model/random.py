"""Counter-based pseudo-random numbers (splitmix64), vectorized.

Workload generators derive every value from (seed, stream, index), so any range of events can
be generated independently and identically in any process: the run and the reference see the
same input without shipping it.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> npt.NDArray[np.uint64]:
    """The splitmix64 finaliser applied elementwise to uint64 values."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def counter_random(seed: int, stream: int, index: np.ndarray) -> npt.NDArray[np.uint64]:
    """A uint64 pseudo-random value for each index of the given (seed, stream)."""
    with np.errstate(over="ignore"):
        base = splitmix64(np.array([seed * 1_000_003 + stream], dtype=np.uint64))[0]
        return splitmix64(index.astype(np.int64).view(np.uint64) ^ base)
