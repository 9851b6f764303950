#!/usr/bin/env python3
"""Cache-hit overhead: xfetch get_or_compute (a hit) vs a redis-py GET, same
process, same server, same value size. Prints both per-operation times and
the ratio (goal: <= 1.3).

    /usr/bin/python3 bench_hit.py [--url redis://127.0.0.1:6379/0] [-n 5000] [--rounds 15]

Rounds alternate between the two so drift hits both alike; the figure is the
median round of each.
"""
import argparse
import statistics
import time

import redis

import xfetch
import xfetch.testing


def per_op(fn, n):
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="Redis URL (default: start a private redis-server)")
    ap.add_argument("-n", type=int, default=5000, help="operations per round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--size", type=int, default=100, help="value size in bytes")
    args = ap.parse_args()
    server = None if args.url else xfetch.testing.RedisServer()
    url = args.url or server.url
    try:
        value = bytes(range(256)) * (args.size // 256) + b"v" * (args.size % 256)
        r = redis.Redis.from_url(url)
        r.set("bench:get", value)
        cache = xfetch.Cache(url)
        cache.set("bench:hit", value, ttl=3600)  # delta 0: never elected early

        def loader():
            raise AssertionError("a hit must not call the loader")

        def hit():
            return cache.get_or_compute("bench:hit", loader, ttl=3600)

        def get():
            return r.get("bench:get")

        assert hit() == get() == value
        per_op(hit, 500), per_op(get, 500)  # warm-up
        xs, gs = [], []
        for _ in range(args.rounds):
            xs.append(per_op(hit, args.n))
            gs.append(per_op(get, args.n))
        x, g = statistics.median(xs), statistics.median(gs)
        s = cache.stats()
        assert s["loads"] == 0 and s["hits"] >= args.n * args.rounds
        print(f"{args.rounds} rounds x {args.n} ops, {args.size}-byte value, "
              f"redis-py {redis.__version__}, xfetch {xfetch.__version__}")
        print(f"redis-py GET        : {g * 1e6:7.2f} us/op")
        print(f"xfetch hit          : {x * 1e6:7.2f} us/op")
        print(f"ratio xfetch / GET  : {x / g:7.2f}  (goal <= 1.3)")
        cache.close()
    finally:
        if server:
            server.stop()


if __name__ == "__main__":
    main()
