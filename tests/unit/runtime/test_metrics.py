"""The egress's metrics (``runtime/metrics.py``) under ``--consistency eventual``: the
availability bound's measure counts a row's first output only."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sparkflux.model.schema import SN, T0
from sparkflux.runtime.metrics import EgressMetrics


def rows(sns: list[int], t0: list[float]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({SN: pa.array(sns, pa.int64()),
                                       T0: pa.array(t0, pa.float64())})


def test_a_correction_counts_for_the_bound_only_where_it_is_the_first_output() -> None:
    m = EgressMetrics()
    m.tentative(rows([1 << 52], [9.0]), now=9.5)  # 0.5 s
    assert m.summary()["max_processing_delay_s"] == 0.5
    # corrections of rows delivered tentatively before: not a first output
    m.delivered(rows([10, 11], [1.0, 2.0]), now=12.0, correction=True)
    assert m.summary()["max_processing_delay_s"] == 0.5
    # SNs 20 on reached the output tentatively in no row: their correction is the first
    m.delivered(rows([19, 20, 21], [3.0, 10.0, 11.0]), now=12.0, correction=True,
                first=np.array([False, True, True]))
    s = m.summary()
    assert s["max_processing_delay_s"] == 2.0 and s["corrections"] == 5
    assert s["max_first_correction_delay_s"] == 2.0
    m.delivered(rows([30], [11.5]), now=14.5)  # a stable row after the episode
    s = m.summary()
    assert s["max_processing_delay_s"] == 3.0
    assert s["max_tentative_delay_s"] == 0.5  # the tentative rows' own
