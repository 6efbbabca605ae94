"""Spilling on Spark (``protocol/memory.py``; docs/memory.md): netmon with Flux-HA and with
racing copies, site 2's
memory budget squeezed to 0.1 MB once the input runs, so that it spills whole partitions to
its local disk and loads them back in turn; then site 2 is killed (with partitions on disk)
and so is site 0 (no partition in common with site 2, so the second kill need not wait for
the first recovery). The output equals Spark SQL's reference, nothing dropped; the slot's next
process spills too (a squeeze is of the slot)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sparkflux.cli import main as cli_main
from sparkflux.runner import example_reference
from tests.conftest import ROOT

pytestmark = pytest.mark.spark

EVENTS = 400_000


@pytest.mark.parametrize("ha", ["flux", "race"])
def test_a_squeezed_site_spills_and_two_kills_lose_nothing(spark: Any, tmp_path: Path,
                                                           monkeypatch: Any, ha: str) -> None:
    metrics = tmp_path / "m.json"
    monkeypatch.chdir(tmp_path)
    code = cli_main(["run", str(ROOT / "examples" / "netmon.py"), "--events", str(EVENTS),
                     "--rate", "80000", "--sites", "4", "--partitions", "16", "--ha", ha,
                     "--squeeze", "2@input+40000=0.1", "--kill", "2@input+160000",
                     "--kill", "0@input+280000", "--metrics", str(metrics)])
    assert code == 0
    m = json.loads(metrics.read_text())
    expected = example_reference(ROOT / "examples" / "netmon.py", "--events", str(EVENTS),
                                 spark=spark)
    assert (m["output_digest"], m["output_tuples"]) == (expected.output_digest, expected.rows)
    assert m["ingress_dropped"] == 0 and m["kills"] == 2
    squeezed = m["site_load"]["2"]
    assert squeezed["budget_bytes"] == int(0.1 * (1 << 20)) and squeezed["spills"] > 0
    assert squeezed["loads"] > 0 and squeezed["input_spills"] > 0  # its input went along
    assert 0 < squeezed["memory_pause_max_s"] < 5
    assert all(m["site_load"][s]["spills"] == 0 for s in ("1", "3"))
