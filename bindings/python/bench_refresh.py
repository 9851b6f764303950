"""Background refresh through the Python faces, on one hot key (issue 21):
N threads (sync) or N tasks (aio) call get_or_compute in a closed loop
(1 ms think time) for 6 s, ttl TTL s, a 100 ms loader, on a throwaway
redis-server; background_refresh on ("bg") or off ("plain"). Prints the
slowest call after the cold load, loads per ttl (the cold load included),
calls of 90 ms or more (a load inside the request) and errors, and the
longest stall: the longest time no call ended (every caller held up at
once), and the longest of those an idle sibling process (a 1 ms sleep loop,
started alongside) did not share: a stall both saw is the machine not
running the processes (a loaded, shared box), not xfetch.

usage: python3 bench_refresh.py sync|aio N TTL bg|plain [REFRESH_AHEAD [STALE]]"""
import asyncio
import subprocess
import sys
import tempfile
import threading
import time

import xfetch
import xfetch.aio
import xfetch.testing

face, n, ttl, bg = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4] == "bg"
ahead = float(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5] != "-" else None
stale = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
DUR = 6.0
HEARTBEAT = """import sys, time
end = time.monotonic() + float(sys.argv[1]); last = time.monotonic()
while last < end:
    time.sleep(0.001); now = time.monotonic()
    if now - last > 0.01: print(last, now, flush=True)
    last = now"""
sibling = subprocess.Popen([sys.executable, "-c", HEARTBEAT, str(DUR + 3)],
                           stdout=subprocess.PIPE, text=True)
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
    ends = sorted(t + l for t, l in lat if t > t_first)
    stalls = [(a, b) for a, b in zip(ends, ends[1:]) if b < t_first + DUR - 0.05]
    stall = max(b - a for a, b in stalls)
    sibling.kill()
    gaps = [tuple(map(float, line.split())) for line in sibling.communicate()[0].splitlines()]
    # a stall the sibling shared: its gap covers half the stall or more
    def shared(a, b):
        return any(min(b, y) - max(a, x) >= (b - a) / 2 for x, y in gaps)
    own = max([b - a for a, b in stalls if not shared(a, b)], default=0.0)
    print(f"{face} {n} {'threads' if face == 'sync' else 'tasks'} ttl {ttl}s bg={bg} "
          f"refresh_ahead={ahead} stale={stale}: "
          f"{len(lat)} calls, max {max(warm) * 1000:.1f} ms after cold start, "
          f"{loads[0] * ttl / DUR:.2f} loads/ttl, {slow} calls >= 90 ms, {errors[0]} errors, "
          f"longest stall {stall * 1000:.0f} ms, not shared by the sibling {own * 1000:.0f} ms")

if face == "sync":
    cache = xfetch.Cache(srv.url, prefix="hot:", background_refresh=bg,
                         refresh_ahead=ahead)
    cache.get_or_compute("k", sync_load, ttl)
    t0 = time.monotonic()
    def worker():
        while time.monotonic() - t0 < DUR:
            s = time.monotonic()
            try:
                cache.get_or_compute("k", sync_load, ttl, stale=stale)
            except Exception:
                errors[0] += 1
            lat.append((s, time.monotonic() - s))
            time.sleep(0.001)
    ts = [threading.Thread(target=worker) for _ in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    report(t0)
    st = cache.stats()
    print(f"  stats: waits {st['waits']}, stale {st['stale']}, misses {st['misses']}")
    cache.close()
else:
    async def main():
        cache = xfetch.aio.Cache(srv.url, prefix="hot:", background_refresh=bg,
                                     refresh_ahead=ahead)
        await cache.get_or_compute("k", aio_load, ttl)
        t0 = time.monotonic()
        async def worker():
            while time.monotonic() - t0 < DUR:
                s = time.monotonic()
                try:
                    await cache.get_or_compute("k", aio_load, ttl, stale=stale)
                except Exception:
                    errors[0] += 1
                lat.append((s, time.monotonic() - s))
                await asyncio.sleep(0.001)
        await asyncio.gather(*[worker() for _ in range(n)])
        report(t0)
        await cache.close()
    asyncio.run(main())
srv.stop()
