"""One hot key from P processes through a Python face, with the Cache's
default policy (or background_refresh off, XFetch: "plain"): each process
opens its own Cache and runs N threads (sync) or N tasks (aio) calling
get_or_compute in a closed loop (1 ms think time) for 6 s on one throwaway
redis-server, ttl TTL s, a 100 ms loader. Prints, over all processes: loads
per ttl (every loader run, the cold load included, over the time from the
cold load to the end; time.monotonic is one clock for every process, and
each process's first call comes before the loop starts), the slowest call after
the cold load, calls that ran the loader in the request after it, calls
that waited for another's load, and values served stale.

usage: python3 bench_refresh_procs.py sync|aio P N TTL [default|plain]"""
import asyncio
import multiprocessing
import sys
import tempfile
import threading
import time

import xfetch
import xfetch.aio
import xfetch.testing

face, procs, n, ttl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
plain = len(sys.argv) > 5 and sys.argv[5] == "plain"
kw = dict(background_refresh=False, refresh_ahead=-1) if plain else {}
DUR, LOAD_S = 6.0, 0.1


def run(url, start, out):
    loads, in_call, slowest, first, calls = [0], [0], [0.0], [float("inf")], [0]

    def note(t_call, fetched):
        calls[0] += 1
        slowest[0] = max(slowest[0], time.monotonic() - t_call)
        in_call[0] += fetched.source == "loader"

    if face == "sync":
        cache = xfetch.Cache(url, prefix="hot:", **kw)

        def load():
            loads[0] += 1
            first[0] = min(first[0], time.monotonic())
            time.sleep(LOAD_S)
            return b"x" * 64
        cache.fetch("k", load, ttl)  # the cold load (one process's) or a hit

        def worker():
            while time.monotonic() < start + DUR:
                t = time.monotonic()
                note(t, cache.fetch("k", load, ttl))
                time.sleep(0.001)
        while time.monotonic() < start:
            time.sleep(0.001)
        ts = [threading.Thread(target=worker) for _ in range(n)]
        [t.start() for t in ts], [t.join() for t in ts]
        st = cache.stats()
        cache.close()
    else:
        async def main():
            cache = xfetch.aio.Cache(url, prefix="hot:", **kw)

            async def load():
                loads[0] += 1
                first[0] = min(first[0], time.monotonic())
                await asyncio.sleep(LOAD_S)
                return b"x" * 64
            await cache.fetch("k", load, ttl)

            async def worker():
                while time.monotonic() < start + DUR:
                    t = time.monotonic()
                    note(t, await cache.fetch("k", load, ttl))
                    await asyncio.sleep(0.001)
            await asyncio.sleep(max(0.0, start - time.monotonic()))
            await asyncio.gather(*[worker() for _ in range(n)])
            st = cache.stats()
            await cache.close()
            return st
        st = asyncio.run(main())
    out.put((loads[0], in_call[0], slowest[0], st["waits"], st["stale"], first[0], calls[0]))


if __name__ == "__main__":
    srv = xfetch.testing.RedisServer(tempfile.mkdtemp(prefix="xfetch-bench-procs-"))
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    start = time.monotonic() + 1.0  # every process has made its first call
    ps = [ctx.Process(target=run, args=(srv.url, start, out)) for _ in range(procs)]
    [p.start() for p in ps]
    got = [out.get() for _ in ps]
    [p.join() for p in ps]
    srv.stop()
    loads = sum(g[0] for g in got)
    ttls = (start + DUR - min(g[5] for g in got)) / ttl  # from the cold load on
    print(f"{face} {procs} processes x {n} {'threads' if face == 'sync' else 'tasks'}, "
          f"ttl {ttl}s, {'plain XFetch in the call' if plain else 'defaults'}: "
          f"{loads / ttls:.2f} loads/ttl ({loads} loads in {ttls:.1f} ttls), "
          f"max {max(g[2] for g in got) * 1000:.1f} ms after the cold load, "
          f"{sum(g[1] for g in got)} calls loaded in the request, "
          f"{sum(g[3] for g in got)} waited, {sum(g[4] for g in got)} stale "
          f"of {sum(g[6] for g in got)} calls")
