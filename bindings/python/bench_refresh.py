"""Background refresh through the Python faces, on one hot key (issue 21):
N threads (sync) or N tasks (aio) call get_or_compute in a closed loop
(1 ms think time) for 6 s, ttl TTL s, a 100 ms loader, on a throwaway
redis-server; background_refresh on ("bg") or off ("plain"). Prints the
slowest call after the cold load, loads per ttl (the cold load included),
calls of 90 ms or more (a load inside the request) and errors.

usage: python3 bench_refresh.py sync|aio N TTL bg|plain"""
import asyncio
import sys
import tempfile
import threading
import time

import xfetch
import xfetch.aio
import xfetch.testing

face, n, ttl, bg = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "bg"
DUR = 6.0
srv = xfetch.testing.RedisServer(tempfile.mkdtemp(prefix="xfetch-bench-refresh-"))
loads = [0]
lat, errors = [], [0]

def body():
    loads[0] += 1
    return b"x" * 64

def sync_load():
    time.sleep(0.1)
    return body()

async def aio_load():
    await asyncio.sleep(0.1)
    return body()

def report(t_first):
    warm = [l for t, l in lat if t > t_first]
    slow = sum(1 for l in warm if l >= 0.09)
    print(f"{face} {n} {'threads' if face == 'sync' else 'tasks'} ttl {ttl}s bg={bg}: "
          f"{len(lat)} calls, max {max(warm) * 1000:.1f} ms after cold start, "
          f"{loads[0] * ttl / DUR:.2f} loads/ttl, {slow} calls >= 90 ms, {errors[0]} errors")

if face == "sync":
    cache = xfetch.Cache(srv.url, prefix="hot:", background_refresh=bg)
    cache.get_or_compute("k", sync_load, ttl)
    t0 = time.monotonic()
    def worker():
        while time.monotonic() - t0 < DUR:
            s = time.monotonic()
            try:
                cache.get_or_compute("k", sync_load, ttl)
            except Exception:
                errors[0] += 1
            lat.append((s, time.monotonic() - s))
            time.sleep(0.001)
    ts = [threading.Thread(target=worker) for _ in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    report(t0)
    cache.close()
else:
    async def main():
        cache = xfetch.aio.Cache(srv.url, prefix="hot:", background_refresh=bg)
        await cache.get_or_compute("k", aio_load, ttl)
        t0 = time.monotonic()
        async def worker():
            while time.monotonic() - t0 < DUR:
                s = time.monotonic()
                try:
                    await cache.get_or_compute("k", aio_load, ttl)
                except Exception:
                    errors[0] += 1
                lat.append((s, time.monotonic() - s))
                await asyncio.sleep(0.001)
        await asyncio.gather(*[worker() for _ in range(n)])
        report(t0)
        await cache.close()
    asyncio.run(main())
srv.stop()
