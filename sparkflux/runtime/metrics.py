"""Run metrics measured at the egress: throughput, latency, output gaps, the timeline.

Latency of an output row = egress delivery time - ``_t0`` (when the input the row descends
from reached the driver, before the sequencer held it for its place in the merged order);
both clocks are the driver's. The timeline keeps, per delivery, the time,
the rows and their summed latency, so the plot can bin it (250 ms bins, thesis Fig. 3.16).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from sparkflux.model.schema import T0

LATENCY_BOUNDS_S = (0.05, 0.1, 0.2, 0.5, 1.0, 2.0)  # the metrics' ``latency_within``


@dataclass
class EgressMetrics:
    start: float | None = None
    end: float | None = None
    rows: int = 0
    times: list[float] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    latency_sums: list[float] = field(default_factory=list)
    _latencies: list[np.ndarray] = field(default_factory=list)
    _lat_times: list[float] = field(default_factory=list)
    # --consistency eventual (``protocol/consistency.py``)
    eventual: bool = False
    tentative_rows: int = 0
    corrections: int = 0
    max_processing_delay: float = 0.0
    max_tentative_delay: float = 0.0  # ... of the tentative rows alone
    max_first_correction_delay: float = 0.0  # ... of the corrections that came first
    undos: list[float] = field(default_factory=list)
    tentative_times: list[float] = field(default_factory=list)
    tentative_counts: list[int] = field(default_factory=list)
    rec_dones: list[float] = field(default_factory=list)

    def tentative(self, batch: pa.RecordBatch, now: float) -> None:
        """Tentative rows delivered (``--consistency eventual``): their latency is what the
        availability bound is about."""
        self.eventual = True
        if batch.num_rows:
            lat = now - batch.column(T0).to_numpy()
            self.tentative_times.append(now)
            self.tentative_counts.append(batch.num_rows)
            self.tentative_rows += batch.num_rows
            self.max_tentative_delay = max(self.max_tentative_delay, float(lat.max()))
            self.max_processing_delay = max(self.max_processing_delay, self.max_tentative_delay)

    def marker(self, op: str, now: float) -> None:
        """An episode's ``undo`` or ``rec_done``."""
        self.eventual = True
        if op == "undo":
            self.undos.append(now)
        else:
            self.rec_dones.append(now)

    def delivered(self, batch: pa.RecordBatch, now: float, correction: bool = False,
                  first: np.ndarray | None = None) -> None:
        """Stable rows delivered; ``correction``: an episode's, replacing tentative rows,
        except the rows ``first`` marks (their input reached the output tentatively in no
        row: this is the first output made of it)."""
        if batch.num_rows == 0:
            return
        lat = now - batch.column(T0).to_numpy()
        if correction:  # stable rows replacing tentative ones: not a first delivery
            self.corrections += batch.num_rows
            if first is not None and first.any():
                worst = float(lat[first].max())
                self.max_processing_delay = max(self.max_processing_delay, worst)
                self.max_first_correction_delay = max(self.max_first_correction_delay, worst)
        else:
            self.max_processing_delay = max(self.max_processing_delay, float(lat.max()))
        self._latencies.append(lat.astype(np.float32))
        self._lat_times.append(now)
        self.rows += batch.num_rows
        self.times.append(now)
        self.counts.append(batch.num_rows)
        self.latency_sums.append(float(lat.sum()))

    def latencies(self) -> np.ndarray:
        if not self._latencies:
            return np.zeros(0, dtype=np.float32)
        return np.concatenate(self._latencies)

    def latencies_between(self, lo: float, hi: float) -> np.ndarray:
        """The latencies of the rows delivered in (lo, hi] (the newest first searched)."""
        sel = []
        for a, t in zip(reversed(self._latencies), reversed(self._lat_times), strict=True):
            if t <= lo:
                break
            if t <= hi:
                sel.append(a)
        return np.concatenate(sel) if sel else np.zeros(0, dtype=np.float32)

    def latency_p99_between(self, lo: float, hi: float) -> float:
        """p99 latency of the rows delivered in [lo, hi]."""
        sel = [a for a, t in zip(self._latencies, self._lat_times, strict=True) if lo <= t <= hi]
        return float(np.percentile(np.concatenate(sel), 99)) if sel else 0.0

    def max_gap(self) -> float:
        """Longest time without output between the first and the last delivery."""
        t = np.asarray(self.times)
        if t.size < 2:
            return 0.0
        return float(np.diff(t).max())

    def gaps_around(self, at: float, window: float = 5.0) -> float:
        """Longest time without output in [at - 1 s, at + window] (a failure's cost)."""
        t = np.asarray(self.times)
        sel = t[(t >= at - 1.0) & (t <= at + window)]
        if sel.size == 0:
            return window + 1.0
        edges = np.r_[max(at - 1.0, sel[0]), sel, min(at + window, t[-1])]
        return float(np.diff(edges).max())

    def summary(self) -> dict[str, Any]:
        lat = self.latencies()
        out: dict[str, Any] = {
            "latency_p50_s": round(float(np.percentile(lat, 50)), 6) if lat.size else 0.0,
            "latency_p99_s": round(float(np.percentile(lat, 99)), 6) if lat.size else 0.0,
            "latency_p999_s": round(float(np.percentile(lat, 99.9)), 6) if lat.size else 0.0,
            "latency_max_s": round(float(lat.max()), 6) if lat.size else 0.0,
            "max_output_gap_s": round(self.max_gap(), 6),
            # the share of the output delivered within each bound (seconds), as the racing
            # replicas paper measures availability
            "latency_within": {str(b): round(float((lat <= b).mean()), 6) if lat.size else 1.0
                               for b in LATENCY_BOUNDS_S},
        }
        if self.eventual:
            # the availability bound's measure: the longest a row took to reach the output
            # the first time (tentative rows, and stable ones that are not corrections)
            out["max_processing_delay_s"] = round(self.max_processing_delay, 6)
            # ... of the tentative rows alone (the rest: stable rows that came first)
            out["max_tentative_delay_s"] = round(self.max_tentative_delay, 6)
            # ... of the corrections that were the first output made of their input
            out["max_first_correction_delay_s"] = round(self.max_first_correction_delay, 6)
            # the longest the output stood still, tentative rows counted as output
            both = sorted(self.times + self.tentative_times)
            out["max_gap_with_tentative_s"] = round(
                max((b - a for a, b in zip(both, both[1:], strict=False)), default=0.0), 6)
            out["tentative_rows"] = self.tentative_rows
            out["corrections"] = self.corrections
            out["episodes"] = [{"undo": u, "rec_done": r}
                               for u, r in zip(self.undos, self.rec_dones, strict=False)]
        return out

    def binned(self, width: float = 0.25) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bin start relative to ``start``, output rows/s, mean latency s) per bin."""
        if not self.times or self.start is None:
            return np.zeros(0), np.zeros(0), np.zeros(0)
        t = np.asarray(self.times) - self.start
        nbins = int(np.ceil(max(t.max(), width) / width))
        idx = np.minimum((t / width).astype(int), nbins - 1)
        rows = np.bincount(idx, weights=self.counts, minlength=nbins)
        lat = np.bincount(idx, weights=self.latency_sums, minlength=nbins)
        mean = np.divide(lat, rows, out=np.full(nbins, np.nan), where=rows > 0)
        return np.arange(nbins) * width, rows / width, mean
