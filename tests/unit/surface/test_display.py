"""The end of a run fits a screen however much happened in it, and says what each failure
cost; each event of the live view is one line with its mark and time."""

from __future__ import annotations

from rich.console import Console

from sparkflux.display import SHOWN, event_line, summary
from sparkflux.runtime.progress import RunEvent


def busy_run(failures: int, moves: int, catch_ups: int) -> dict:
    return {
        "input_tuples": 5_000_000, "output_tuples": 1_241_037, "duration_s": 50.0,
        "throughput_tps": 100_000.0, "output_digest": "5de271fd" + "0" * 56,
        "rows_digest": "ab" * 32, "latency_p50_s": 0.012, "latency_p99_s": 0.035,
        "max_output_gap_s": 0.07, "ingress_dropped": 0, "dead_letters": 3, "kills": failures,
        "failures": [{"site": k % 4, "reason": "killed", "killed_at_s": 3.0 + k,
                      "detected_after_s": 0.015, "max_output_gap_s": 0.06,
                      "latency_p99_s": 0.1, "fault_tolerant_after_s": 0.9 if k else None}
                     for k in range(failures)],
        "recoveries": [{"state_bytes": 10_000, "duration_s": 0.05} for _ in range(catch_ups)],
        "adoptions": [{"slot": k % 4, "after_s": 0.6} for k in range(failures)],
        "moves": [{"short_of_copies_s": 0.0} for _ in range(moves)], "balance_rounds": 40,
        "stalls": [{"at_s": 9.0, "message": "the input has waited 30 s: ..."}] * 6,
        "utilisation": {str(k): 0.2 for k in range(4)},
        "site_load": {str(k): {"busy_s": 1.0} for k in range(4)},  # left to the JSON
    }


def rendered(metrics: dict, width: int = 100) -> list[str]:
    console = Console(width=width, record=True)
    console.print(summary(metrics))
    return console.export_text().rstrip("\n").split("\n")


def test_the_summary_fits_a_screen_however_much_happened() -> None:
    lines = rendered(busy_run(failures=12, moves=300, catch_ups=400))
    assert len(lines) <= 30, "\n".join(lines)
    text = "\n".join(lines)
    assert "5de271fd" in text and "5,000,000 rows" in text and "1,241,037 rows" in text
    assert f"... {12 - SHOWN} more failures in the metrics" in text
    assert f"... {6 - SHOWN} more stalls in the metrics" in text
    assert "300 (40 balancing rounds)" in text and "400 copies" in text
    assert "site_load" not in text and "--metrics" in text


def test_each_failure_says_what_it_cost() -> None:
    text = "\n".join(rendered(busy_run(failures=2, moves=0, catch_ups=32), width=200))
    assert "site 0 at 3.00 s: detected after 15 ms, output gap 0.060 s" in text
    assert "not all copies again by the end" in text  # the first never got them back
    assert "all copies again after 0.90 s" in text
    assert "moves" not in text  # none: no line


def test_collected_streams_are_counted_only_when_collecting() -> None:
    run = busy_run(failures=0, moves=0, catch_ups=0)
    assert not any(line.split()[:1] == ["streams"] for line in rendered(run))
    run["stream_replicas"] = {"keep": 1, "collected": 2080, "revived": 12}
    line = [li.strip().split(None, 1) for li in rendered(run, width=200) if "streams" in li]
    assert line == [["streams", "each copy keeps 1 sender per input stream; 2,080 collected, "
                                "12 revived"]], line


def test_an_event_is_one_line_with_its_mark_and_time() -> None:
    e = RunEvent(at_s=3.04, kind="failure", site=1, detail="site 1 failed: lost")
    console = Console(width=200, record=True)
    console.print(event_line(e))
    assert console.export_text().strip() == "✗    3.04 s  site 1 failed: lost"
