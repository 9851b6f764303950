#!/usr/bin/env python3
"""A 200 KiB JSON value, compressed (compress_min_bytes=1024) or not, on one
throwaway redis-server: Redis memory per key (MEMORY USAGE) and hit latency of
redis-py GET of the raw bytes against xfetch get_or_compute hits (sync and
asyncio) on the compressed and the plain entry (serializer="bytes": the cost
measured is the cache's, not json's).

    /usr/bin/python3 bench_compress.py [-n 2000]

Goals: compressed memory <= 0.25 x raw; compressed hit p50 <= 1.0 x GET.
"""
import argparse
import asyncio
import json
import statistics
import time

import redis

import xfetch
import xfetch.aio
import xfetch.testing


def document():
    return json.dumps([{"id": i, "name": f"user {i * 7919 % 100003}", "score": i * 31 % 977,
                        "active": i % 3 != 0} for i in range(3550)],
                      separators=(",", ":")).encode()


def timed(call, n):
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        out.append((time.perf_counter() - t0) * 1e6)
    out.sort()
    return statistics.median(out), out[int(0.99 * (len(out) - 1))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    args = ap.parse_args()
    server = xfetch.testing.RedisServer()
    try:
        run(server.url, args.n)
    finally:
        server.stop()


def run(url, n):
    value = document()
    r = redis.Redis.from_url(url)
    r.set("raw", value)
    on = xfetch.Cache(url, serializer="bytes", compress_min_bytes=1024)
    off = xfetch.Cache(url, serializer="bytes")
    on.set("zstd", value, ttl=3600)
    off.set("plain", value, ttl=3600)
    mem = {k: r.memory_usage(k, samples=0) for k in ("raw", "zstd", "plain")}
    print(f"value: {len(value)} bytes of JSON")
    print(f"memory per key (MEMORY USAGE): raw SET {mem['raw']}, entry plain {mem['plain']}, "
          f"entry compressed {mem['zstd']}: compressed/raw {mem['zstd'] / mem['raw']:.3f} "
          f"(goal <= 0.25)")
    load = lambda: value  # noqa: E731 - never called on a hit
    rows = {"redis-py GET": lambda: r.get("raw"),
            "xfetch plain": lambda: off.get_or_compute("plain", load, ttl=3600),
            "xfetch compressed": lambda: on.get_or_compute("zstd", load, ttl=3600)}
    for call in rows.values():
        timed(call, 100)
    got = {name: timed(call, n) for name, call in rows.items()}
    loop = asyncio.new_event_loop()
    aon = xfetch.aio.Cache(url, serializer="bytes", compress_min_bytes=1024)

    async def aio_hits():
        out = []
        for i in range(n + 100):
            t0 = time.perf_counter()
            await aon.get_or_compute("zstd", load, ttl=3600)
            if i >= 100:
                out.append((time.perf_counter() - t0) * 1e6)
        out.sort()
        return statistics.median(out), out[int(0.99 * (len(out) - 1))]
    got["xfetch.aio compressed"] = loop.run_until_complete(aio_hits())
    loop.run_until_complete(aon.close())
    for name, (p50, p99) in got.items():
        print(f"{name:24s} hit p50 {p50:7.0f} us  p99 {p99:7.0f} us")
    base = got["redis-py GET"][0]
    print(f"compressed hit p50 / redis-py GET p50: sync {got['xfetch compressed'][0] / base:.2f}, "
          f"asyncio {got['xfetch.aio compressed'][0] / base:.2f} (goal <= 1.0)")


if __name__ == "__main__":
    main()
