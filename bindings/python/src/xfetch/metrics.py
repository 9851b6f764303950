"""xfetch.metrics: a Prometheus collector (prometheus_client) for one or
more Caches, either face.

    from prometheus_client import REGISTRY
    import xfetch.metrics
    REGISTRY.register(xfetch.metrics.Collector(cache, other_cache))

The figures come from each Cache's events (the same ones on_event and the
`xfetch` logger see). Labels are a small fixed set: namespace (the
decorator's namespace=, "" for direct calls) and the result or outcome;
never a key. Families (base units, _total counters):

    xfetch_calls_total{namespace,result}        one per get-or-compute, by
        result: hit, early, miss, stale, uncached (Redis could not be used:
        failed open), near. A stale value is its own result, never a hit:
        alert on it rising, it means refreshes are failing or slow.
    xfetch_loads_total{namespace,outcome}       loader runs: ok, error
    xfetch_load_duration_seconds{namespace}     histogram of loader runs
    xfetch_failsafe_serves_total{namespace}     stale values served because a
        load of the key failed lately (failsafe_throttle), without a load;
        also in xfetch_calls_total{result="stale"}
    xfetch_waits_total{namespace}               calls that waited for another
                                                caller's load
    xfetch_wait_seconds_total{namespace}        time spent so waiting
    xfetch_near_invalidations_total{reason}     near cache (near_cache_bytes):
        key (Redis said a key changed), flush (a server's entries dropped by
        FLUSHALL / FLUSHDB), lost (by a lost connection); counted when the
        Cache's next get reports them
    xfetch_breaker_open                         servers whose breaker is open now
    xfetch_connections                          connections open now
"""
from __future__ import annotations

from ._events import BUCKETS

try:
    from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                        HistogramMetricFamily)
except ImportError as e:  # pragma: no cover
    raise ImportError("xfetch.metrics needs prometheus_client "
                      "(pip install prometheus-client, or python3-prometheus-client)") from e


class Collector:
    """A prometheus_client collector of the given Caches' figures (summed
    when several are given). Register it once in a registry; add() more
    Caches later."""

    def __init__(self, *caches):
        self._caches = []
        for c in caches:
            self.add(c)

    def add(self, cache):
        if not hasattr(type(cache), "setup"):
            raise TypeError(f"not an xfetch Cache: {type(cache).__name__}")
        self._caches.append(cache)

    def describe(self):
        return []  # unchecked collector: families appear as they are collected

    def collect(self):
        calls, loads, hist, waits, invalidations, failsafe = {}, {}, {}, {}, {}, {}
        breaker_open = connections = 0
        for cache in self._caches:
            if not cache.is_set_up:  # made at import time, set up later
                continue
            c, lo, h, w, opened, inv, fs = cache._config.events.snapshot()
            for ns, n in fs.items():
                failsafe[ns] = failsafe.get(ns, 0) + n
            for k, n in inv.items():
                invalidations[k] = invalidations.get(k, 0) + n
            for k, n in c.items():
                calls[k] = calls.get(k, 0) + n
            for k, n in lo.items():
                loads[k] = loads.get(k, 0) + n
            for ns, counts in h.items():
                mine = hist.setdefault(ns, [0] * len(counts))
                for i, n in enumerate(counts):
                    mine[i] += n
            for ns, (n, s) in w.items():
                mine = waits.setdefault(ns, [0, 0.0])
                mine[0] += n
                mine[1] += s
            breaker_open += opened
            connections += cache.stats().get("connections", 0)
        f = CounterMetricFamily("xfetch_calls", "get-or-compute calls by result",
                                labels=["namespace", "result"])
        for (ns, result), n in sorted(calls.items()):
            f.add_metric([ns, result], n)
        yield f
        f = CounterMetricFamily("xfetch_loads", "loader runs by outcome",
                                labels=["namespace", "outcome"])
        for (ns, outcome), n in sorted(loads.items()):
            f.add_metric([ns, outcome], n)
        yield f
        f = HistogramMetricFamily("xfetch_load_duration_seconds", "loader run time",
                                  labels=["namespace"])
        for ns, counts in sorted(hist.items()):
            cumulative, buckets = 0, []
            for bound, n in zip(BUCKETS + (float("inf"),), counts[:-1]):
                cumulative += n
                buckets.append((_le(bound), cumulative))
            f.add_metric([ns], buckets, sum_value=counts[-1])
        yield f
        f = CounterMetricFamily("xfetch_failsafe_serves", "stale values served because a "
                                "load of the key failed lately (fail-safe), without a load",
                                labels=["namespace"])
        for ns, n in sorted(failsafe.items()):
            f.add_metric([ns], n)
        yield f
        f = CounterMetricFamily("xfetch_waits", "calls that waited for another caller's load",
                                labels=["namespace"])
        g = CounterMetricFamily("xfetch_wait_seconds", "time spent waiting for another "
                                "caller's load", labels=["namespace"])
        for ns, (n, s) in sorted(waits.items()):
            f.add_metric([ns], n)
            g.add_metric([ns], s)
        yield f
        yield g
        f = CounterMetricFamily("xfetch_near_invalidations", "near cache invalidations: "
                                "a key changed in Redis (key), a server's entries dropped by "
                                "a flush (flush) or a lost connection (lost)",
                                labels=["reason"])
        for reason, n in sorted(invalidations.items()):
            f.add_metric([reason], n)
        yield f
        yield GaugeMetricFamily("xfetch_breaker_open", "Redis servers whose circuit breaker "
                                "is open now", value=breaker_open)
        yield GaugeMetricFamily("xfetch_connections", "Redis connections open now",
                                value=connections)


def _le(bound):
    return "+Inf" if bound == float("inf") else repr(float(bound))
