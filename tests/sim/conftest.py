"""Fixtures of the simulator's tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def quiet_log() -> Iterator[None]:
    """The controller's warnings (rescales, recoveries, memory), many per seed, out of the
    log; a module asks for it with ``pytestmark = pytest.mark.usefixtures("quiet_log")``."""
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)
