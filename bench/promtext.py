"""Prometheus text exposition read back: samples, histogram deltas between scrapes, quantiles.

The end-to-end benchmark reads the API server's own `/metrics` before and after a phase:
the difference of two cumulative histograms is the histogram of that phase alone. Quantiles
are estimated the way PromQL's `histogram_quantile` does (linear inside a bucket), so they are
only as fine as the buckets; the share of observations at or below a bucket bound is exact.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]  # sorted (name, value) pairs
Samples = dict[tuple[str, Labels], float]

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? +(\S+)(?: +\d+)?$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> Samples:
    """Every sample of a scrape, keyed by (metric name, labels)."""
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        labels = tuple(sorted(_LABEL.findall(match.group(2) or "")))
        try:
            out[(match.group(1), labels)] = float(match.group(3))
        except ValueError:
            continue
    return out


def total(samples: Samples, metric: str, **match: str) -> float:
    """The sum of one metric over the series whose labels include `match` (0 when none)."""
    return sum(
        value
        for (name, labels), value in samples.items()
        if name == metric and _matches(labels, match)
    )


def _matches(labels: Labels, match: Mapping[str, str]) -> bool:
    found = dict(labels)
    return all(found.get(k) == v for k, v in match.items())


@dataclass(frozen=True, slots=True)
class Histogram:
    """One cumulative histogram: (upper bound, observations at or below it), +Inf last."""

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float

    def minus(self, earlier: Histogram) -> Histogram:
        """What was observed between `earlier` and this scrape (bounds of this one)."""
        before = dict(earlier.buckets)
        return Histogram(
            tuple((le, n - before.get(le, 0.0)) for le, n in self.buckets),
            self.count - earlier.count,
            self.sum - earlier.sum,
        )

    @property
    def mean(self) -> float:
        return self.sum / self.count if self.count else math.nan

    def share_at_most(self, bound: float) -> float:
        """Share of observations at or below `bound`, exact when `bound` is a bucket bound."""
        if not self.count:
            return math.nan
        below = [n for le, n in self.buckets if le <= bound]
        return (below[-1] if below else 0.0) / self.count

    def quantile(self, q: float) -> float:
        """`histogram_quantile(q)`: linear inside the bucket that holds the q-th observation;
        in the +Inf bucket, the highest finite bound (a lower bound of the truth)."""
        if not self.count:
            return math.nan
        rank = q * self.count
        lower, below = 0.0, 0.0
        for le, n in self.buckets:
            if n >= rank:
                if math.isinf(le):
                    return lower
                inside = n - below
                return lower + (le - lower) * ((rank - below) / inside if inside else 1.0)
            lower, below = le, n
        return lower


def histogram(samples: Samples, metric: str, **match: str) -> Histogram:
    """The histogram `metric`, summed over every series whose labels include `match`."""
    buckets: dict[float, float] = {}
    for (name, labels), value in samples.items():
        if name != f"{metric}_bucket" or not _matches(labels, match):
            continue
        le = float(dict(labels)["le"])
        buckets[le] = buckets.get(le, 0.0) + value
    return Histogram(
        tuple(sorted(buckets.items())),
        total(samples, f"{metric}_count", **match),
        total(samples, f"{metric}_sum", **match),
    )
