"""The staleness harness with tags, across processes, on both faces: 4
processes, each a reader and a writer, fetch 8 tagged keys (2 tags of 4 each)
whose loader returns the generation of each of its tags as it reads it; in
between a process bumps a tag's generation and invalidates the tag. The test
process meanwhile kills the tracking connections (CLIENT KILL TYPE pubsub),
the data connections (CLIENT KILL TYPE normal) or flushes everything, tags'
keys included, every 100 ms. The verdict: a fetch that starts after the
invalidation of generation g of one of its tags returned is never served a
value of a generation below g from the cache (source "cache", near hits
included): 0 such reads, near cache off and on. Values served while Redis
cannot be used (source "local" or "uncached") are loaded then, not judged.
No timing in the verdict: the run's length only bounds how much it sees."""
import asyncio
import multiprocessing
import random
import time

import pytest
import redis

import xfetch
import xfetch.aio

PROCS, KEYS, TAGS = 4, 8, 4
RUN_S = 2.5  # each process's run; a busy machine only sees less of it
FAULT_S = 0.1
WRITE_EVERY = 4  # one writer step per 4 reads


def _tags_of(k):
    return [f"t{k % TAGS}", f"t{(k + 1) % TAGS}"]


def _step(rnd, counts, gen, done, lock, loader):
    """One step of a process's run, for both faces: a generator that yields
    the cache call to make (a function of the cache) and is sent its result,
    or thrown its xfetch.Error. counts: calls, cache, wrong, errors,
    invalidations."""
    k = rnd.randrange(KEYS)
    tags = _tags_of(k)
    if rnd.randrange(WRITE_EVERY) == 0:  # the writer: data first, then the tag
        t = rnd.randrange(TAGS)
        with lock:
            gen[t] += 1
            g = gen[t]
        try:
            yield lambda cache: cache.invalidate_tags([f"t{t}"])
        except xfetch.Error:
            counts[3] += 1
            return
        with lock:
            done[t] = max(done[t], g)
        counts[4] += 1
        return
    before = [done[int(t[1:])] for t in tags]  # invalidations returned so far
    try:
        value, source = yield lambda cache: cache.fetch(f"k{k}", loader(gen, tags), ttl=60,
                                                        tags=tags)
    except xfetch.Error:
        counts[3] += 1
        return
    counts[0] += 1
    if source == "cache":
        counts[1] += 1
        if any(v < b for v, b in zip(value, before)):
            counts[2] += 1


def _finish(step, result=None, error=None):
    """Hands the call's result (or error) to the step, which then ends."""
    try:
        step.throw(error) if error is not None else step.send(result)
    except StopIteration:
        pass


def _loader(gen, tags):
    def load():
        return [gen[int(t[1:])] for t in tags]
    return load


def _aloader(gen, tags):
    async def load():
        return [gen[int(t[1:])] for t in tags]
    return load


def _child(kind, url, prefix, near, gen, done, lock, out, seed, opened):
    """One process's run: its counts into out (calls, cache, wrong, errors,
    invalidations). Its Cache opens (a connection check, which a fault
    would cut) before the faults begin: opened, a barrier with the test."""
    rnd = random.Random(seed)
    counts = [0, 0, 0, 0, 0]
    kw = dict(prefix=prefix, seed=seed, timeout=1.0)
    if near:
        kw["near_cache_bytes"] = 1 << 20

    if kind == "sync":
        cache = xfetch.Cache(url, **kw)
        opened.wait()
        end = time.monotonic() + RUN_S
        while time.monotonic() < end:
            step = _step(rnd, counts, gen, done, lock, _loader)
            call = next(step)
            try:
                result = call(cache)
            except xfetch.Error as e:
                _finish(step, error=e)
            else:
                _finish(step, result)
        cache.close()
    else:
        async def main():
            cache = xfetch.aio.Cache(url, **kw)
            opened.wait()
            end = time.monotonic() + RUN_S
            while time.monotonic() < end:  # each call awaited in turn
                step = _step(rnd, counts, gen, done, lock, _aloader)
                call = next(step)
                try:
                    result = await call(cache)
                except xfetch.Error as e:
                    _finish(step, error=e)
                else:
                    _finish(step, result)
            await cache.close()
        asyncio.run(main())
    out.put(counts)


@pytest.mark.parametrize("near", [False, True], ids=["near_off", "near_on"])
@pytest.mark.parametrize("kind", ["sync", "aio"])
def test_no_invalidated_entry_is_served_fresh_across_processes(kind, near, server, prefix):
    ctx = multiprocessing.get_context("fork")
    gen, done = ctx.Array("q", TAGS), ctx.Array("q", TAGS)
    lock, out = ctx.Lock(), ctx.Queue()
    opened = ctx.Barrier(PROCS + 1, timeout=60)  # a start on a busy machine, not a margin
    procs = [ctx.Process(target=_child, args=(kind, server.url, prefix, near, gen, done, lock,
                                              out, 100 + i, opened))
             for i in range(PROCS)]
    for p in procs:
        p.start()
    opened.wait()  # every Cache open: the faults cut calls, not the opens
    admin = redis.Redis.from_url(server.url)
    faults = 0
    try:
        while any(p.is_alive() for p in procs):
            time.sleep(FAULT_S)
            fault = faults % 3
            try:
                if fault == 0:
                    admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
                elif fault == 1:
                    admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                else:
                    admin.flushall()
            except redis.RedisError:
                pass
            faults += 1
            if faults * FAULT_S > RUN_S + 20:  # 20 s past the run: a hang
                break
        # a call cut by a fault waits its timeout (1 s) at most
        for p in procs:
            p.join(timeout=20)
        alive = [p.pid for p in procs if p.is_alive()]
        assert not alive, f"processes {alive} did not end"
        assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
        totals = [0] * 5
        for _ in procs:
            for i, n in enumerate(out.get(timeout=5)):
                totals[i] += n
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        admin.close()
    calls, cached, wrong, errors, invalidations = totals
    print(f"tags staleness ({kind}, near {'on' if near else 'off'}): {calls} calls, "
          f"{cached} from the cache, {invalidations} invalidations, {faults} faults, "
          f"{errors} errors, {wrong} wrong")
    assert wrong == 0
    assert calls > 0 and invalidations > 0
