#!/usr/bin/env python3
"""A 200 KiB JSON value, compressed (compress_min_bytes=1024) or not, on one
throwaway redis-server: Redis memory per key (MEMORY USAGE) and hit latency of
redis-py GET of the raw bytes against xfetch get_or_compute hits (sync and
asyncio) on the compressed and the plain entry (serializer="bytes": the cost
measured is the cache's, not json's).

    /usr/bin/python3 bench_compress.py [-n 2000] [--link-mbit N [--link-delay-us D]]

With --link-mbit every client reaches the server through an emulated link of N
Mbit/s each way (the C bench's build/bench/link_proxy: what it emulates and
what not, bench/link_proxy.h; --link-proxy names another path).

Goals: compressed memory <= 0.25 x raw; compressed hit p50 <= 1.0 x GET.
"""
import argparse
import asyncio
import json
import os
import statistics
import subprocess
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


PROXY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bench",
                     "link_proxy")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--link-mbit", type=float, help="through an emulated link of this rate")
    ap.add_argument("--link-delay-us", type=int, default=0, help="its one-way delay")
    ap.add_argument("--link-proxy", default=PROXY, help="the link_proxy program")
    args = ap.parse_args()
    server = xfetch.testing.RedisServer()
    proxy = None
    try:
        url = server.url
        if args.link_mbit:
            if not os.access(args.link_proxy, os.X_OK):
                raise SystemExit(f"{args.link_proxy}: not built (cmake --build build --target "
                                 f"link_proxy, with -DXFETCH_BUILD_BENCH=ON), or name it "
                                 f"with --link-proxy")
            proxy = subprocess.Popen([args.link_proxy, str(server.port), str(args.link_mbit),
                                      str(args.link_delay_us)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            port = int(proxy.stdout.readline().split()[1])  # "port N"
            url = f"redis://127.0.0.1:{port}/0"
            print(f"link: {args.link_mbit:g} Mbit/s each way, one-way delay "
                  f"{args.link_delay_us} us (bench/link_proxy.h)")
        run(url, args.n)
    finally:
        if proxy is not None:
            proxy.stdin.close()  # its end
            proxy.wait(10)
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
