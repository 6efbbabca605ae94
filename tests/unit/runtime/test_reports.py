"""The run's report of a failure (``runtime/reports.py``): when it was fault tolerant again."""

from sparkflux.runtime.reports import back_to_copies


def test_the_span_a_failure_opens_a_little_after_it_counts() -> None:
    # the host opened the span 40 ms after the failure's time: a busy loop
    assert back_to_copies([(10.04, 13.5)], 10.0) == 13.5


def test_each_failure_gets_the_span_it_opened_or_the_one_it_fell_into() -> None:
    spans = [(20.0, 22.0), (5.0, 7.5)]
    assert back_to_copies(spans, 5.0) == 7.5
    assert back_to_copies(spans, 21.0) == 22.0  # a second failure while short of copies
    assert back_to_copies(spans, 19.99) == 22.0


def test_no_span_yet_or_one_long_after_is_none() -> None:
    assert back_to_copies([], 3.0) is None
    assert back_to_copies([(1.0, 2.0)], 3.0) is None  # an earlier failure's
    assert back_to_copies([(9.0, 12.0)], 3.0) is None  # a later failure's
