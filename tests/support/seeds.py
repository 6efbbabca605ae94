"""How many seeds the simulator's bulk survival tests run.

The counts the tests name are the full ones, and ``SPARKFLUX_SEEDS=full`` runs them (do so
before claiming them, e.g. after a protocol change). By default (the README's test command,
CI) each runs the first quarter of its range, so that the whole suite stays within its time
budget on a 2-core machine. Mutation tests are not scaled: each hunts through its range
until a seed catches the mutant, and checks that seed unmutated.
"""

from __future__ import annotations

import os

FULL = os.environ.get("SPARKFLUX_SEEDS", "") == "full"


def seeds(n: int) -> int:
    """``n`` seeds when the full counts are asked for, else a quarter of them (at least 1)."""
    return n if FULL else max(1, -(-n // 4))


def hunt_order(n: int, first: int) -> list[int]:
    """Every seed of ``range(n)``, from ``first`` on and then wrapping round: a mutation test
    hunts the same seeds, starting at the one that caught its mutant when the test was
    last changed (if the protocol changes so that another does, the hunt still finds it)."""
    return [*range(first, n), *range(min(first, n))]
