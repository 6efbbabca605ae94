"""Emulated site capacity on Spark: capped sites, a slowed site and skewed keys stay exact."""

from __future__ import annotations

from typing import Any

import pytest

from sparkflux.io.sinks import DeadLetters, NullSink
from sparkflux.runner import reference_digest, run_example

from .test_netmon_spark import netmon_args

pytestmark = pytest.mark.spark


def test_capped_slowed_and_skewed_run_matches_the_reference(netmon: Any, spark: Any) -> None:
    kw = dict(events=120_000, skew=True)
    args = netmon_args(**kw, rate=40_000.0, ha="flux", sites=4, partitions=16, site_cpu=0.4,
                       slow=["2@input+40000=0.5"])
    m = run_example(netmon, args, sink=NullSink(), dead=DeadLetters(),
                    spark=spark).metrics
    digest, rows, _ = reference_digest(netmon, netmon_args(**kw), spark=spark)
    assert (m["output_digest"], m["output_tuples"]) == (digest, rows)
    util = m["utilisation"]
    assert set(util) == {"0", "1", "2", "3"}
    # the cap holds: no site's event loop was busy much more than 40% of the time
    assert all(u <= 0.45 for u in util.values()), util
