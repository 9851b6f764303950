"""One hot key through the Python faces: N threads (sync) or N tasks (aio)
call get_or_compute in a closed loop for DUR s on a throwaway redis-server,
with a LOAD_MS loader that returns a value ("value") or finds nothing
("none", not cached: negative_ttl 0, the default); ttl TTL s. Prints the
calls, the loader's runs, calls per load, and the median and slowest call.
A load serves every caller that came while it ran: with N callers and a
slow loader, about N calls per load, whether it finds a value or nothing.

usage: python3 bench_hot_key.py sync|aio value|none [N [DUR [LOAD_MS [TTL]]]]"""
import asyncio
import statistics
import sys
import tempfile
import threading
import time

import xfetch
import xfetch.aio
import xfetch.testing

face, found = sys.argv[1], sys.argv[2] == "value"
n = int(sys.argv[3]) if len(sys.argv) > 3 else 16
dur = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
load_s = (float(sys.argv[5]) if len(sys.argv) > 5 else 25.0) / 1000
ttl = float(sys.argv[6]) if len(sys.argv) > 6 else 0.1
srv = xfetch.testing.RedisServer(tempfile.mkdtemp(prefix="xfetch-bench-hot-"))
loads, lat = [0], []


def answer():
    loads[0] += 1
    return b"v" if found else None


def sync_run():
    cache = xfetch.Cache(srv.url, prefix="hot:")

    def load():
        time.sleep(load_s)
        return answer()

    def caller(end):
        while time.monotonic() < end:
            t0 = time.monotonic()
            cache.get_or_compute("k", load, ttl=ttl)
            lat.append(time.monotonic() - t0)
    end = time.monotonic() + dur
    threads = [threading.Thread(target=caller, args=(end,)) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cache.close()


async def aio_run():
    cache = xfetch.aio.Cache(srv.url, prefix="hot:")

    async def load():
        await asyncio.sleep(load_s)
        return answer()

    async def caller(end):
        while time.monotonic() < end:
            t0 = time.monotonic()
            await cache.get_or_compute("k", load, ttl=ttl)
            lat.append(time.monotonic() - t0)
    end = time.monotonic() + dur
    await asyncio.gather(*[caller(end) for _ in range(n)])
    await cache.close()


try:
    sync_run() if face == "sync" else asyncio.run(aio_run())
finally:
    srv.stop()
print(f"{face} {sys.argv[2]}: {n} callers, {dur:g} s, {load_s * 1000:g} ms loader: "
      f"{len(lat)} calls, {loads[0]} loads, {len(lat) / max(loads[0], 1):.1f} calls per load, "
      f"call p50 {statistics.median(lat) * 1000:.1f} ms, max {max(lat) * 1000:.1f} ms")
