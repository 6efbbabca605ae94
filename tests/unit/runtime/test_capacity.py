"""The emulated site capacity: busy time is held to the cap over time."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sparkflux.runtime.capacity import CpuCap


def simulate(cap: CpuCap, work: float, seconds: float, step: float = 0.002) -> float:
    """A loop that always has work (``step`` busy per item); returns the busy fraction."""
    now = 0.0
    busy = 0.0
    while now < seconds:
        now += step
        busy += step
        sleep = cap.spend(now, step)
        if sleep:
            now += sleep
            cap.slept_for(now)
    return busy / now


@pytest.mark.parametrize("fraction", [0.25, 0.4, 0.8])
def test_a_saturated_site_is_held_to_its_cap(fraction: float) -> None:
    assert simulate(CpuCap(fraction), 1.0, 20.0) == pytest.approx(fraction, rel=0.03)


def test_slow_scales_the_cap_from_then_on() -> None:
    cap = CpuCap(0.4)
    first = simulate(cap, 1.0, 10.0)
    cap.scale(0.5)
    now0 = 10.0 + cap.slept  # continue from where the first part ended
    busy = 0.0
    now = now0
    while now < now0 + 10.0:
        now += 0.002
        busy += 0.002
        s = cap.spend(now, 0.002)
        if s:
            now += s
            cap.slept_for(now)
    assert first == pytest.approx(0.4, rel=0.03)
    assert busy / (now - now0) == pytest.approx(0.2, rel=0.05)


def test_an_idle_site_never_sleeps_and_bad_caps_are_refused() -> None:
    cap = CpuCap(0.5)
    assert cap.spend(1.0, 0.001) == 0.0 and cap.spend(2.0, 0.001) == 0.0
    with pytest.raises(ValueError, match="--site-cpu"):
        CpuCap(1.5)
    with pytest.raises(ValueError, match="--slow"):
        CpuCap(0.5).scale(0)


def test_a_capped_site_gathers_until_a_pass_is_worth_its_fixed_cost() -> None:
    """Under --site-cpu a pass waits for 12 ms of the site's budget (at least 50 ms) or 16K
    rows; without a cap, 10 ms or 8K rows (latency)."""
    from sparkflux.runtime.security import Security
    from sparkflux.runtime.site import SiteConfig

    SEC = Security(secret=b"s" * 32)  # noqa: N806

    capped = SiteConfig(site=0, attempt=0, controller_host="h", controller_port=1,
                        bind_host="h", advertise_host="h", security=SEC, cpu_cap=0.1)
    assert capped.gather_s(0.1) == pytest.approx(0.12)
    assert capped.gather_s(0.05) == pytest.approx(0.24)  # a slowed site gathers longer
    assert capped.gather_s(0.4) == pytest.approx(0.05)
    assert capped.gather_rows == 16384 and capped.inbox_rows == 32768
    free = SiteConfig(site=0, attempt=0, controller_host="h", controller_port=1,
                      bind_host="h", advertise_host="h", security=SEC)
    assert free.gather_s(1.0) == pytest.approx(0.01)
    assert free.gather_rows == 8192 and free.inbox_rows == 16384
    # --max-batch-delay (ms) caps the gathering, capped site or not; a larger one leaves it
    short = replace(free, max_batch_delay=2.0)
    assert short.gather_s(1.0) == pytest.approx(0.002)
    assert replace(capped, max_batch_delay=2.0).gather_s(0.1) == pytest.approx(0.002)
    assert replace(free, max_batch_delay=50.0).gather_s(1.0) == pytest.approx(0.01)


def test_a_bad_balance_window_fails_fast_with_what_to_change() -> None:
    from sparkflux.model.errors import PlanError
    from sparkflux.options import balance_window

    assert balance_window(0.0) == 0.0 and balance_window(2.0) == 2.0
    with pytest.raises(PlanError, match="--balance-window -1"):
        balance_window(-1.0)
