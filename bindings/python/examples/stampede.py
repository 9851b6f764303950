#!/usr/bin/env python3
"""A cache stampede on one hot key: naive redis-py cache-aside vs xfetch.

Many threads read the same key; computing it takes --load-time seconds and
the cached value lives --ttl seconds. Naive cache-aside (GET; on a miss, load
and SET PX) lets every thread that misses during the load run the loader too.
xfetch lets one caller in the fleet recompute (a lease in the entry), starts
that shortly before expiry and runs it off the readers' path, so readers
never see the miss.

    /usr/bin/python3 examples/stampede.py                # starts its own redis-server
    /usr/bin/python3 examples/stampede.py --url redis://127.0.0.1:6379/0
"""
import argparse
import threading
import time

import redis

import xfetch
import xfetch.testing


def hammer(get, args):
    """Runs args.threads readers of the hot key for args.seconds; returns the
    loader's call times, the number of reads and the readers' errors."""
    calls, errors, lock = [], [], threading.Lock()
    reads = [0] * args.threads

    def loader():
        with lock:
            calls.append(time.monotonic())
        time.sleep(args.load_time)  # the expensive query
        return b"rendered page"

    start = threading.Barrier(args.threads + 1)
    stop = time.monotonic() + args.seconds + 0.05

    def reader(i):
        start.wait()
        try:
            while time.monotonic() < stop:
                assert get(loader) == b"rendered page"
                reads[i] += 1
                time.sleep(0.001)
        except Exception as e:  # reported by main(), which then fails
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(args.threads)]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join()
    return calls, sum(reads), errors


def bursts(calls, gap):
    """Groups loader calls that started within gap of each other (they ran at
    the same time): one group per recomputation of the value."""
    groups = []
    for t in sorted(calls):
        if groups and t - groups[-1][-1] < gap:
            groups[-1].append(t)
        else:
            groups.append([t])
    return [len(g) for g in groups]


def report(name, calls, reads, errors, args):
    if errors:
        print(f"{name}: {len(errors)} reader(s) failed, first: {errors[0]!r}")
        return 1
    per = bursts(calls, args.load_time)
    print(f"{name:>7}: {len(calls):3d} loader calls, {reads} reads, {len(per)} recomputations; "
          f"loader calls per expiry/recomputation: {' '.join(map(str, per))}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="Redis URL (default: start a private redis-server)")
    ap.add_argument("--threads", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--ttl", type=float, default=1.0)
    ap.add_argument("--load-time", type=float, default=0.1)
    args = ap.parse_args()
    server = None if args.url else xfetch.testing.RedisServer()
    url = args.url or server.url
    try:
        r = redis.Redis.from_url(url)
        key = "stampede:hot"
        r.delete(key)
        print(f"{args.threads} threads, one hot key, ttl {args.ttl} s, "
              f"loader {args.load_time * 1000:.0f} ms, {args.seconds:.0f} s each")

        def naive(loader):
            value = r.get(key)
            if value is None:
                value = loader()
                r.set(key, value, px=round(args.ttl * 1000))
            return value

        failed = report("naive", *hammer(naive, args), args)
        r.delete(key)
        cache = xfetch.Cache(url)
        def with_xfetch(loader):
            return cache.get_or_compute(key, loader, ttl=args.ttl)

        failed |= report("xfetch", *hammer(with_xfetch, args), args)
        s = cache.stats()
        print(f"  xfetch stats: hits {s['hits']}, misses {s['misses']}, early recomputes "
              f"{s['early']}, waits {s['waits']}, connections {s['connections']}")
        cache.close()
        return failed
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    raise SystemExit(main())
