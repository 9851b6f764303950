#!/usr/bin/env python3
"""Django's cache.get hit, side by side on one throwaway redis-server (or
--url): django-redis' RedisCache and xfetch.contrib.django.XFetchCache as
configured by default (each read checks the namespace's version for clear():
with the entry on standalone Redis), with OPTIONS namespace_tag=False, and
with a near cache.

    /usr/bin/python3 bench_django.py [--url redis://...] [-n 5000] [--rounds 7]

Each contender reads the same pickled ~130-byte dict through caches[alias].get,
one call at a time in one process; rounds alternate between the contenders so
drift hits them alike; the figure is the median over rounds of the mean call,
in wall time and in this thread's CPU time (the client's own cost: on a busy
machine the wall time mostly tells the scheduler's delays).
Needs python3-django and python3-django-redis.
"""
import argparse
import statistics
import time

import django
from django.conf import settings

import xfetch.testing

XF = "xfetch.contrib.django.XFetchCache"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url")
    ap.add_argument("-n", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    server = None if args.url else xfetch.testing.RedisServer()
    url = args.url or server.url
    settings.configure(CACHES={
        "django-redis": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": url,
                         "KEY_PREFIX": "bench-dr"},
        "xfetch": {"BACKEND": XF, "LOCATION": url, "KEY_PREFIX": "bench-xf"},
        "xfetch namespace_tag=False": {"BACKEND": XF, "LOCATION": url,
                                       "KEY_PREFIX": "bench-nons",
                                       "OPTIONS": {"namespace_tag": False}},
        "xfetch near cache": {"BACKEND": XF, "LOCATION": url, "KEY_PREFIX": "bench-near",
                              "OPTIONS": {"near_cache_bytes": 1 << 24}},
    })
    django.setup()
    from django.core.cache import caches
    names = list(settings.CACHES)
    value = {"id": 1, "name": "x" * 100}
    for name in names:
        caches[name].set("hot", value, 3600)
        assert caches[name].get("hot") == value
    means = {name: [] for name in names}
    cpus = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            get = caches[name].get
            t, c = time.perf_counter(), time.thread_time()
            for _ in range(args.n):
                get("hot")
            cpus[name].append((time.thread_time() - c) / args.n * 1e6)
            means[name].append((time.perf_counter() - t) / args.n * 1e6)
    base = statistics.median(means["django-redis"])
    cpu_base = statistics.median(cpus["django-redis"])
    print(f"cache.get hit, {args.n} calls x {args.rounds} rounds (median of round means)")
    print(f"  {'':28s} {'wall':>7s}               {'CPU':>7s}")
    for name in names:
        m, c = statistics.median(means[name]), statistics.median(cpus[name])
        print(f"  {name:28s} {m:7.1f} us  {m / base:4.2f} x dr  {c:7.1f} us  "
              f"{c / cpu_base:4.2f} x dr")
    if server:
        server.stop()


if __name__ == "__main__":
    main()
