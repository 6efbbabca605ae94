"""``sparkflux run`` says loudly (and exits with code 3) when more than ``--max-dead-letters``
of the input went to the dead letters."""

from __future__ import annotations

import pytest

from sparkflux.cli import _too_many_dead_letters


def metrics(dead: int, good: int) -> dict:
    return {"dead_letters": dead, "input_tuples": good,
            "dead_letter_reasons": {"late": {"count": dead, "first": "late: event time 5 of "
                                             "source 'clicks' is behind its watermark 85"}}}


def test_below_the_threshold_is_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    assert not _too_many_dead_letters(metrics(10, 9_990), 0.01)
    assert not _too_many_dead_letters({"dead_letters": 0, "input_tuples": 0}, 0.01)
    assert capsys.readouterr().err == ""


def test_above_it_names_the_count_the_reason_and_the_cure(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _too_many_dead_letters(metrics(399_970, 30), 0.01)
    out = " ".join(capsys.readouterr().err.split())  # the warning goes to stderr
    assert "399,970 of 400,000 input records (100.0%)" in out
    assert "399,970 late, e.g. late: event time 5 of source 'clicks'" in out
    assert "allowed lateness" in out
