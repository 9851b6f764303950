#!/usr/bin/env python3
"""Cache-hit cost, side by side on one throwaway redis-server: redis-py GET,
dogpile.cache (its redis backend), xfetch get_or_compute (sync; and with 2
tags, no near cache), redis-py's asyncio GET, xfetch.aio (asyncio, when
built; and with 2 tags), and a 100-key get_many (sync and asyncio) against 100
single gets (and redis-py MGET / GETs for reference); last, asyncio hits made
by 10 and 100 tasks at once (calls/s: xfetch.aio and redis-py asyncio GET).

    /usr/bin/python3 bench_hit.py [--url redis://...] [-n 3000] [--rounds 15] [--size 100]
                                  [--entry-format 1|2]

Every contender reads the same-size value from the same server over its own
connection, in one process, one call at a time. Rounds alternate between the
contenders so drift hits them alike; each call is timed on its own: p50/p99
are over every call of every round, throughput is calls / total time.
Goals (issue 10): sync hit p50 <= 1.2 x redis-py GET; asyncio hit p50 <=
1.5 x sync.
"""
import argparse
import asyncio
import inspect
import statistics
import time

import redis
import redis.asyncio

import xfetch
import xfetch.testing
from xfetch import ffi, lib

try:
    from dogpile.cache import make_region
    from dogpile.cache import __version__ as dogpile_version
except ImportError as e:  # Debian: python3-dogpile.cache
    make_region, dogpile_missing = None, f"n/a (dogpile.cache not installed: {e})"

try:
    import xfetch.aio as xfetch_aio
    aio_missing = None
except ImportError:
    xfetch_aio, aio_missing = None, "n/a (xfetch.aio not built)"

TTL = 3600.0  # long: a hit is never elected for early recomputation (delta 0 anyway)
clock = time.perf_counter_ns


def never():
    raise AssertionError("a hit must not call the loader")


class Series:
    """One contender's per-call latencies (ns) and total time over all rounds."""

    def __init__(self, name, ops_per_call=1):
        self.name, self.ops, self.lat, self.total = name, ops_per_call, [], 0

    def run(self, fn, n):
        lat = self.lat
        t0 = clock()
        for _ in range(n):
            s = clock()
            fn()
            lat.append(clock() - s)
        self.total += clock() - t0

    async def run_async(self, fn, n):
        lat = self.lat
        t0 = clock()
        for _ in range(n):
            s = clock()
            await fn()
            lat.append(clock() - s)
        self.total += clock() - t0

    def p(self, q):
        xs = sorted(self.lat)
        return xs[min(len(xs) - 1, int(q * len(xs)))] / 1000  # us

    def line(self):
        per_s = len(self.lat) / (self.total / 1e9)
        return (f"{self.name:<34} {self.p(0.50):9.1f} {self.p(0.99):9.1f} {per_s:11,.0f}"
                + (f" {per_s * self.ops:12,.0f}" if self.ops > 1 else ""))


def xfetch_get_many(cache, keys, policy):
    """A get-or-compute of every key in one xf_get_or_compute_many call (the
    batch driver: one round trip for the hits), through the Cache's pool:
    what Cache.get_many does, for builds that lack it."""
    conn = cache._acquire()
    conn.state.loader = never
    try:
        n = len(keys)
        bufs = [ffi.from_buffer(k) for k in keys]
        ckeys = ffi.new("const char *[]", bufs)
        lens = ffi.new("size_t[]", [len(k) for k in keys])
        values = ffi.new("xf_value[]", n)
        rcs = ffi.new("int[]", n)
        rc = lib.xf_get_or_compute_many(conn.ptr, n, ckeys, lens, policy, lib._xf_py_loader,
                                        conn.handle, values, rcs)
        xfetch.check(rc)
        out = []
        for i in range(n):
            xfetch.check(rcs[i])
            out.append(ffi.unpack(values[i].data, values[i].len))
            lib.xf_value_free(ffi.addressof(values, i))
        return out
    finally:
        conn.state.loader = None
        cache._release(conn)


def server_cost(r, loop, aio_hit, n):
    """Redis' side of n asyncio hits alone (INFO commandstats after CONFIG
    RESETSTAT): the commands per hit and the server's us per hit."""
    r.config_resetstat()

    async def hits():
        for _ in range(n):
            await aio_hit()

    loop.run_until_complete(hits())
    stats = {k[len("cmdstat_"):]: v for k, v in r.info("commandstats").items()
             if k.startswith("cmdstat_") and k[len("cmdstat_"):] in
             ("evalsha_ro", "evalsha", "hmget", "get")}
    per_hit = " ".join(f"{c} {v['calls'] / n:.3f} ({v['usec_per_call']:.2f} us/call)"
                       for c, v in sorted(stats.items()))
    # a script's own HMGET / GET counts in the script's usec and in its own:
    # the plain reads' time counts for the ones the scripts did not make
    scripts = stats.get("evalsha_ro", {"calls": 0, "usec": 0})
    plain = sum(v["calls"] for c, v in stats.items() if c in ("hmget", "get"))
    plain_usec = sum(v["usec"] for c, v in stats.items() if c in ("hmget", "get"))
    direct = plain - scripts["calls"]
    usec = scripts["usec"] + (plain_usec * direct / plain if plain else 0)
    print(f"{'xfetch.aio hit, Redis side':<34}: {usec / n:5.2f} us/hit; per hit: {per_hit}")


def concurrent_hits(loop, contenders, n, rounds, tasks=(10, 100)):
    """Throughput of asyncio hits made by many tasks at once (a web server's
    concurrent requests): n calls a round spread over T tasks, rounds
    alternating between the contenders; calls/s over every round."""
    async def spread(afn, t):
        async def worker():
            for _ in range(n // t):
                await afn()
        t0 = time.perf_counter()
        await asyncio.gather(*[worker() for _ in range(t)])
        return time.perf_counter() - t0

    spent = {(name, t): 0.0 for name in contenders for t in tasks}
    for _ in range(rounds):
        for t in tasks:
            for name, afn in contenders.items():
                spent[name, t] += loop.run_until_complete(spread(afn, t))
    print(f"\n{'concurrent hits, T tasks':<34} {'T':>9} {'calls/s':>11}")
    for (name, t), seconds in spent.items():
        print(f"{name:<34} {t:>9} {rounds * (n // t) * t / seconds:>11,.0f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", help="Redis URL (default: start a private redis-server)")
    ap.add_argument("-n", type=int, default=3000, help="single-key calls per round")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--size", type=int, default=100, help="value size in bytes")
    ap.add_argument("--batch", type=int, default=100, help="keys per get_many")
    ap.add_argument("--entry-format", type=int, choices=(1, 2), default=None,
                    help="the entries xfetch writes (default: the library's, 2)")
    ap.add_argument("--timeout", type=float, default=1.0,
                    help="the Caches' command timeout in seconds (default 1.0, the Cache's)")
    args = ap.parse_args()
    server = None if args.url else xfetch.testing.RedisServer()
    url = args.url or server.url
    try:
        run(args, url)
    finally:
        if server:
            server.stop()


def tagged_ratios(by):
    """A hit on an entry with 2 tags against the same hit untagged (goal <=
    1.1x), each face, the near cache off and on: p50s, and for near hits
    (about a microsecond, where p50 moves by whole steps of the clock) the
    means as well."""
    pairs = [("sync", "xfetch get_or_compute (sync)", "xfetch get_or_compute, 2 tags (sync)"),
             ("sync, near", "xfetch get_or_compute (near cache)",
              "xfetch get_or_compute, 2 tags (near)"),
             ("aio", "xfetch.aio get_or_compute", "xfetch.aio get_or_compute, 2 tags"),
             ("aio, near", "xfetch.aio get_or_compute (near cache)",
              "xfetch.aio get_or_compute, 2 tags (near)")]
    for face, plain, tagged in pairs:
        if plain not in by or tagged not in by:
            continue
        a, b = by[plain], by[tagged]
        p50 = b.p(0.5) / a.p(0.5)
        mean = (b.total / len(b.lat)) / (a.total / len(a.lat))
        judged = mean if "near" in face else p50
        print(f"{'2 tags / untagged, ' + face:<34}: p50 {p50:5.2f}, mean {mean:5.2f}  "
              f"(goal <= 1.1 on the {'mean' if 'near' in face else 'p50'}: "
              f"{'met' if judged <= 1.1 else 'NOT met'})")


def run(args, url):
    value = bytes(range(256)) * (args.size // 256) + b"v" * (args.size % 256)
    n, nb = args.n, max(1, args.n // args.batch)  # batch calls per round
    r = redis.Redis.from_url(url)
    r.set("bench:get", value)
    cache = xfetch.Cache(url, entry_format=args.entry_format, timeout=args.timeout)
    cache.set("bench:hit", value, ttl=TTL)
    keys = [f"bench:many:{i}".encode() for i in range(args.batch)]
    for k in keys:
        cache.set(k, value, ttl=TTL)
    r.mset({f"bench:mget:{i}": value for i in range(args.batch)})
    mget_keys = [f"bench:mget:{i}" for i in range(args.batch)]

    contenders = []  # (Series, sync fn or None, async fn or None)

    def add(name, fn=None, afn=None, ops=1):
        contenders.append((Series(name, ops), fn, afn))

    add("redis-py GET", lambda: r.get("bench:get"))

    def sync_hit():
        return cache.get_or_compute("bench:hit", never, ttl=TTL)

    if make_region:
        region = make_region().configure("dogpile.cache.redis", expiration_time=TTL,
                                          arguments={"url": url})
        region.set("bench:dogpile", value)
        add("dogpile.cache get_or_create", lambda: region.get_or_create("bench:dogpile", never))
    add("xfetch get_or_compute (sync)", sync_hit)
    tags = ["bench:a", "bench:b"]  # a tagged hit without a near cache
    cache.set("bench:tagged", value, ttl=TTL, tags=tags)
    add("xfetch get_or_compute, 2 tags (sync)",
        lambda: cache.get_or_compute("bench:tagged", never, ttl=TTL, tags=tags))
    try:  # issue 20: the near cache (a hit sends nothing), where the build has it
        near = xfetch.Cache(url, near_cache_bytes=64 << 20, timeout=args.timeout)
    except TypeError:
        near = None
    if near is not None:
        add("xfetch get_or_compute (near cache)",
            lambda: near.get_or_compute("bench:hit", never, ttl=TTL))
        add("xfetch get_or_compute, 2 tags (near)",
            lambda: near.get_or_compute("bench:tagged", never, ttl=TTL, tags=tags))

    loop = asyncio.new_event_loop()
    ar = redis.asyncio.Redis.from_url(url)  # the asyncio baseline

    async def aio_get():
        return await ar.get("bench:get")

    add("redis-py asyncio GET", afn=aio_get)
    acache = anear = None
    if xfetch_aio:
        async def open_aio(**kw):
            c = xfetch_aio.Cache(url, entry_format=args.entry_format, timeout=args.timeout, **kw)
            if inspect.isawaitable(c):
                c = await c
            return c

        acache = loop.run_until_complete(open_aio())

        async def aio_hit():
            return await acache.get_or_compute("bench:hit", never, ttl=TTL)

        add("xfetch.aio get_or_compute", afn=aio_hit)

        async def aio_tagged_hit():
            return await acache.get_or_compute("bench:tagged", never, ttl=TTL, tags=tags)

        add("xfetch.aio get_or_compute, 2 tags", afn=aio_tagged_hit)
        if near is not None:  # its near hit: served before anything is awaited
            anear = loop.run_until_complete(open_aio(near_cache_bytes=64 << 20))

            async def aio_near_hit():
                return await anear.get_or_compute("bench:hit", never, ttl=TTL)

            add("xfetch.aio get_or_compute (near cache)", afn=aio_near_hit)

            async def aio_near_tagged_hit():
                return await anear.get_or_compute("bench:tagged", never, ttl=TTL, tags=tags)

            add("xfetch.aio get_or_compute, 2 tags (near)", afn=aio_near_tagged_hit)

    policy = cache._policies.get((TTL, 1.0, 5.0, 5.0, 0.0, 0.0, 0.0, 0.0, "load"))
    def many():
        return xfetch_get_many(cache, keys, policy)

    many_name = f"xfetch get_many({args.batch}) via ffi"
    if hasattr(cache, "get_many"):  # the binding's own, when it has one
        def cache_many():
            got = cache.get_many(keys, loader=never, ttl=TTL)
            return [got[k] for k in keys] if isinstance(got, dict) else got

        try:
            cache_many()
            many, many_name = cache_many, f"xfetch Cache.get_many({args.batch})"
        except TypeError as e:  # another signature: say so, use the ffi
            print(f"Cache.get_many(keys, loader=, ttl=) failed ({e}); using the ffi")

    def gets():
        return [cache.get_or_compute(k, never, ttl=TTL) for k in keys]

    batch = [(Series(many_name, args.batch), many),
             (Series(f"{args.batch} x xfetch get_or_compute", args.batch), gets),
             (Series(f"redis-py MGET({args.batch})", args.batch), lambda: r.mget(mget_keys)),
             (Series(f"{args.batch} x redis-py GET", args.batch),
              lambda: [r.get(k) for k in mget_keys])]
    if acache is not None:  # the asyncio face's get_many, on its loop
        async def aio_many():
            got = await acache.get_many(keys, never, ttl=TTL)
            return [got[k] for k in keys]

        batch.append((Series(f"xfetch.aio get_many({args.batch})", args.batch),
                      lambda: loop.run_until_complete(aio_many())))

    # every contender returns the value; then a warm-up round
    for s, fn, afn in contenders:
        got = fn() if fn else loop.run_until_complete(afn())
        if isinstance(got, (list, tuple)):
            got = got[0] if len(got) != len(value) else got
        assert bytes(got) == value, s.name
    for s, fn in batch:
        got = fn()
        assert [bytes(x) for x in got] == [value] * args.batch, s.name
    for s, fn, afn in contenders:
        Series("warm-up").run(fn, 300) if fn else loop.run_until_complete(
            Series("warm-up").run_async(afn, 300))

    for _ in range(args.rounds):
        for s, fn, afn in contenders:
            s.run(fn, n) if fn else loop.run_until_complete(s.run_async(afn, n))
        for s, fn in batch:
            s.run(fn, nb)

    st = cache.stats()
    assert st["loads"] == 0 and st["misses"] == 0, st
    print(f"{args.rounds} rounds x {n} calls ({nb} batch calls of {args.batch} keys), "
          f"{args.size}-byte value, one redis-server on loopback; redis-py {redis.__version__}"
          f", dogpile.cache {dogpile_version if make_region else '-'}, xfetch "
          f"{xfetch.__version__}")
    print(f"{'hit, one key':<34} {'p50 us':>9} {'p99 us':>9} {'calls/s':>11}")
    by = {}
    for s, _, _ in contenders:
        print(s.line())
        by[s.name] = s
    if not xfetch_aio:
        print(f"{'xfetch.aio get_or_compute':<34} {aio_missing}")
    if not make_region:
        print(f"{'dogpile.cache get_or_create':<34} {dogpile_missing}")
    print(f"\n{f'{args.batch} keys, all hits':<34} {'p50 us':>9} {'p99 us':>9} {'calls/s':>11}"
          f" {'keys/s':>12}")
    for s, _ in batch:
        print(s.line())

    get, sync = by["redis-py GET"], by["xfetch get_or_compute (sync)"]
    ratio = sync.p(0.5) / get.p(0.5)
    print(f"\n{'sync hit p50 / redis-py GET p50':<34}: {ratio:5.2f}  (goal <= 1.2: "
          f"{'met' if ratio <= 1.2 else 'NOT met'})")
    if xfetch_aio:
        aio = by["xfetch.aio get_or_compute"]
        ratio = aio.p(0.5) / sync.p(0.5)
        print(f"{'asyncio hit p50 / sync hit p50':<34}: {ratio:5.2f}  (goal <= 1.5: "
              f"{'met' if ratio <= 1.5 else 'NOT met'})")
    else:
        print(f"{'asyncio hit p50 / sync hit p50':<34}: {aio_missing}")
    if near is not None:
        n_s = by["xfetch get_or_compute (near cache)"]
        ratio = len(n_s.lat) / n_s.total / (len(get.lat) / get.total)
        print(f"{'near hit calls/s / redis-py GET':<34}: {ratio:5.1f}  (goal >= 10: "
              f"{'met' if ratio >= 10 else 'NOT met'})")
        print(f"{'near hit p50 / redis-py GET p50':<34}: {get.p(0.5) / n_s.p(0.5):5.1f}x")
        an_s = by.get("xfetch.aio get_or_compute (near cache)")
        if an_s is not None:
            print(f"{'aio near hit p50 / asyncio GET p50':<34}: "
                  f"{by['redis-py asyncio GET'].p(0.5) / an_s.p(0.5):5.1f}x")
    tagged_ratios(by)
    many_s, gets_s = batch[0][0], batch[1][0]
    print(f"{f'{args.batch} x get / get_many({args.batch}), p50':<34}: "
          f"{gets_s.p(0.5) / many_s.p(0.5):5.1f}x")
    if xfetch_aio:  # issue 19: what an asyncio hit costs Redis
        server_cost(r, loop, aio_hit, n)
        concurrent_hits(loop, {"redis-py asyncio GET": aio_get,
                               "xfetch.aio get_or_compute": aio_hit}, n, args.rounds)

    loop.run_until_complete(ar.close())
    for c in (acache, anear):
        if c is None:
            continue
        close = getattr(c, "aclose", None) or c.close
        res = close()
        if inspect.isawaitable(res):
            loop.run_until_complete(res)
    loop.close()
    cache.close()


if __name__ == "__main__":
    main()
