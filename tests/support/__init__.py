"""Shared helpers and tools of the tests: the fake driver, operator and controller helpers,
the seed ranges, the forger (``python -m tests.support.forge``), the standalone cluster."""
