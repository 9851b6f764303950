"""The binding against a real 3-master Redis Cluster (xfetch.testing.RedisCluster),
on both faces (the `face` fixture): the plain URL of any node works, and so
does a seed list; keys follow their slot when it moves (MOVED). The C call
routes (xf_call_target), so xfetch.aio reaches every node as xfetch.Cache
does. The chaos tests (a resharding, a master killed) are in
test_cluster_chaos.py."""
import time

import pytest
import redis

import xfetch
import xfetch.testing
from conftest import peek, stored


@pytest.fixture(scope="module")
def cluster():
    with xfetch.testing.RedisCluster(masters=3) as c:
        yield c


def _urls(cluster):
    return {"one node": cluster.url, "seeds": cluster.seeds_url,
            "cluster=on": cluster.url + "?cluster=on"}


@pytest.mark.parametrize("kind", ["one node", "seeds", "cluster=on"])
def test_cold_keys_load_once_then_hit_across_the_cluster(cluster, face, counter, kind):
    # timeout 30 s: the counts below assume no reply or connect times out
    cache = face.Cache(_urls(cluster)[kind], prefix=f"cold:{face.kind}:{kind}:", timeout=30)
    loaders = {i: counter(value=b"v%d" % i) for i in range(300)}

    def call(i):
        return lambda: cache.get_or_compute(f"k{i}", loaders[i], ttl=60)
    for _ in range(2):  # cold (aio: concurrent tasks, 2 per key), then hits
        calls = [call(i) for i in range(300)] * 2
        out = face.gather(calls) if face.aio else [c() for c in calls]
        assert out == [b"v%d" % i for i in range(300)] * 2
    assert all(c.calls == 1 for c in loaders.values())
    stats = cache.stats()
    assert stats["redis_errors"] == 0 and stats["redirects"] == 0
    assert stats["loads"] == 300 and stats["hits"] >= 600
    # One map: asked again at most every 200 ms while the first answer is on
    # its way (600 tasks on a busy machine's loop can take longer than that);
    # a map per call would be hundreds.
    assert 1 <= stats["map_refreshes"] <= 3
    # The entries are spread over the three masters.
    prefix = f"cold:{face.kind}:{kind}:".encode()
    holders = [p for p in cluster.ports
               if redis.Redis(port=p).keys(prefix + b"*")]
    assert len(holders) == 3


def test_seed_list_url_skips_a_dead_seed(cluster, face, counter):
    url = "redis://127.0.0.1:1," + ",".join(f"127.0.0.1:{p}" for p in cluster.ports) + "/0"
    cache = face.Cache(url, prefix=f"seeds:{face.kind}:")
    load = counter(value=b"x")
    assert face.run(cache.get_or_compute("a", load, ttl=60)) == b"x"
    assert face.run(cache.get_or_compute("a", load, ttl=60)) == b"x"
    assert load.calls == 1


def _move_slot_of(cluster, key):
    """Migrates key's slot (and its keys) to another master, as a
    resharding does; returns (from port, to port)."""
    r = redis.Redis(port=cluster.ports[0])
    slot = r.execute_command("CLUSTER KEYSLOT", key)
    masters = {}
    for line in xfetch.testing.RedisCluster._info(cluster.ports[0],
                                                  "CLUSTER NODES").splitlines():
        f = line.split()
        if "master" in f[2]:
            masters[int(f[1].split(":")[1].split("@")[0])] = (f[0], f[8:])
    src = next(p for p, (_, ranges) in masters.items()
               if any(_in(slot, rg) for rg in ranges))
    dst = next(p for p in masters if p != src)
    sid, did = masters[src][0], masters[dst][0]
    s, d = redis.Redis(port=src), redis.Redis(port=dst)
    d.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", sid)
    s.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", did)
    keys = s.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
    if keys:
        s.execute_command("MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", *keys)
    for p in masters:
        redis.Redis(port=p).execute_command("CLUSTER SETSLOT", slot, "NODE", did)
    return src, dst


def _in(slot, rg):
    if rg.startswith("["):
        return False
    lo, _, hi = rg.partition("-")
    return int(lo) <= slot <= int(hi or lo)


def test_a_key_follows_its_slot_when_it_moves(cluster, face, counter):
    prefix = f"moved:{face.kind}:"
    cache = face.Cache(cluster.url, prefix=prefix)
    load = counter(value=b"kept")
    assert face.run(cache.get_or_compute("k", load, ttl=60)) == b"kept"
    src, dst = _move_slot_of(cluster, prefix + "k")
    assert stored(peek(redis.Redis(port=dst), prefix + "k").v) == b"kept"  # it moved
    got = face.run(cache.fetch("k", load, ttl=60))
    assert (got.value, got.source) == (b"kept", "cache")  # MOVED followed: a hit
    assert load.calls == 1
    stats = cache.stats()
    assert stats["redirects"] >= 1 and stats["redis_errors"] == 0


def test_cluster_off_is_not_routed(cluster, face, counter):
    cache = face.Cache(cluster.url + "?cluster=off", prefix=f"off:{face.kind}:")
    errors = 0
    for i in range(30):
        try:
            face.run(cache.get_or_compute(f"k{i}", counter(), ttl=60))
        except xfetch.Error as e:
            errors += "MOVED" in str(e)
    assert errors > 0


def test_a_cluster_refuses_a_db_other_than_0(cluster, face):
    with pytest.raises(xfetch.InvalidArgumentError):
        face.Cache(cluster.url.replace("/0", "/2"))


@pytest.mark.parametrize("fault", [None, "CLIENT KILL TYPE pubsub", "CLIENT KILL TYPE normal",
                                   "FLUSHALL"])
def test_the_near_cache_across_the_cluster(cluster, face, fault):
    """near_cache_bytes on a cluster: keys of every master are kept (one
    invalidation connection per node), and a write from elsewhere is seen
    after a fault on every master (its tracked connections killed, or its
    keys flushed)."""
    import time
    prefix = f"near:{face.kind}:{fault}:"
    near = face.Cache(cluster.url, prefix=prefix, near_cache_bytes=1 << 20, breaker=0)
    other = xfetch.Cache(cluster.url, prefix=prefix)
    keys = [f"k{i}" for i in range(12)]
    try:
        for k in keys:
            other.set(k, b"old", ttl=60)
        deadline = time.monotonic() + 10
        for k in keys:  # each key kept, whichever master it lives on
            before = near.stats()["near_hits"]
            while near.stats()["near_hits"] == before:
                assert face.run(near.get(k)) == b"old"
                assert time.monotonic() < deadline, f"{k}: never a near hit"
        if fault:
            for p in cluster.ports:
                redis.Redis(port=p).execute_command(*fault.split())
        for k in keys:
            other.set(k, b"new", ttl=60)
        for k in keys:
            while True:
                try:
                    if face.run(near.get(k)) == b"new":
                        break
                except xfetch.Error:  # a killed connection, noticed by this call
                    pass
                assert time.monotonic() < deadline, f"{k}: the write was never seen"
                time.sleep(0.001)
    finally:
        other.close()


def test_asyncio_hits_are_plain_reads_on_every_node(cluster):
    """Each node's stream keeps its own estimate of that node's clock (C
    xf_link): once the misses taught them, a hit on any master is one
    HMGET (INFO commandstats: a read script's own HMGET counts too)."""
    import asyncio
    import time

    import xfetch.aio

    def total(cmd):
        n = 0
        for p in cluster.ports:
            st = redis.Redis(port=p).info("commandstats").get(f"cmdstat_{cmd}", {})
            n += st.get("calls", 0) - st.get("failed_calls", 0)
        return n

    async def main():
        async with xfetch.aio.Cache(cluster.url, prefix="aioplain:") as cache:
            for i in range(60):
                await cache.get_or_compute(f"k{i}", lambda: b"v", ttl=600)
            scripts0, get0 = total("evalsha_ro"), total("get")
            t0 = time.monotonic()
            for i in range(60):
                assert await cache.fetch(f"k{i}", lambda: b"x", ttl=600) == (b"v", "cache")
            refreshes = 3 * (int((time.monotonic() - t0) / 0.5) + 1)
            scripts, get = total("evalsha_ro") - scripts0, total("get") - get0
            assert scripts <= refreshes, f"{scripts} read scripts for 60 hits"
            assert get == 60, "one GET per hit (format 2, the default): plain, or a script's own"
    asyncio.run(main())


def test_get_many_of_warm_keys_sends_one_mget_per_slot(cluster, face):
    """A get_many of warm keys in three slots (hash tags) and five keys alone
    in theirs: one MGET per slot of several keys, a GET for each key alone,
    while the connections' clock estimates are fresh: younger than 0.5 s
    (half their refresh period). They were learned after `learning` (by the
    warm-up), so they are fresh through the counted get_many if everything
    took under 0.49 s (0.01 s for the ms the C side rounds down). Judged
    exactly then (7-15 ms on a quiet machine: a 30x margin); past it (a busy
    machine) reads may go as the read script (the sync face's batch: one per
    slot, 8 measured with a 0.6 s pause; asyncio: a node's first read, 3),
    and every key is still read once (a script's own GETs count)."""
    def total(cmd):
        return sum(redis.Redis(port=p).info("commandstats").get(f"cmdstat_{cmd}", {})
                   .get("calls", 0) for p in cluster.ports)
    cache = face.Cache(cluster.url, prefix="manyslot:")
    keys = [f"{{t{i % 3}}}:k{i}" for i in range(30)] + [f"alone{i}" for i in range(5)]
    load = face.loader(lambda k: k.encode())
    learning = time.monotonic()
    for _ in range(2):  # warm; each node's clock learned
        assert face.run(cache.get_many(keys, load, ttl=600)) == {k: k.encode() for k in keys}
    before = {c: total(c) for c in ("mget", "get", "evalsha_ro")}
    assert face.run(cache.get_many(keys, load, ttl=600)) == {k: k.encode() for k in keys}
    fresh = time.monotonic() - learning < 0.49
    sent = {c: total(c) - before[c] for c in before}
    if fresh:
        assert sent["mget"] == 3, sent
        assert sent["get"] - sent["evalsha_ro"] <= 5, sent
    else:
        assert sent["mget"] <= 3, sent
        assert sent["evalsha_ro"] <= 3 + 5, sent  # one per slot at most
        assert sent["get"] <= len(keys), sent


@pytest.fixture(scope="module")
def replicated():
    with xfetch.testing.RedisCluster(masters=3, replicas=1) as c:
        # A client knows a master's replicas from CLUSTER SLOTS, which lists a
        # replica once its node heard of its replication offset: wait for it.
        deadline = time.monotonic() + 10
        while not all(len(r) > 3 for p in c.ports
                      for r in redis.Redis(port=p).execute_command("CLUSTER SLOTS")):
            assert time.monotonic() < deadline, "replicas never listed in CLUSTER SLOTS"
            time.sleep(0.05)
        yield c


def _raises_and_waits(port, invalidate):
    """Runs invalidate() under MONITOR on the node at port: the raises
    (EVALSHA on a tag's key), the WAITs, and the WAITs sent from the client
    address of the raise before them."""
    import re
    import socket
    mon = socket.create_connection(("127.0.0.1", port))
    mon.sendall(b"MONITOR\r\n")
    buf = b""
    while b"\r\n" not in buf:
        buf += mon.recv(4096)
    invalidate()
    redis.Redis(port=port).echo("xft-monitor-end")
    while b"xft-monitor-end" not in buf:
        buf += mon.recv(65536)
    mon.close()
    raises = waits = same = 0
    last = None
    for line in buf.split(b"\r\n"):
        m = re.match(rb'\+[\d.]+ \[\d+ (\S+)\] "(\w+)"', line)
        if not m or b" lua] " in line:
            continue
        addr, cmd = m.groups()
        if cmd == b"EVALSHA" and b'xf-tag:{' in line:
            raises, last = raises + 1, addr
        elif cmd == b"WAIT":
            waits, same = waits + 1, same + (addr == last)
    return raises, waits, same


def test_an_invalidation_waits_for_a_replica_on_its_raise_s_connection(replicated, face):
    """Where a tag's master has a replica, invalidate_tags returns once one
    has the raise (WAIT 1, on the raise's own connection: WAIT counts that
    connection's writes), so a failover does not undo it."""
    cache = face.Cache(replicated.url, prefix=f"wr:{face.kind}:")
    face.run(cache.invalidate_tags(["wr"]))  # connected, mapped, scripts loaded
    port = next(p for p in replicated.ports if _owns(p, "xf-tag:{wr}"))

    def twice():
        for _ in range(2):
            face.run(cache.invalidate_tags(["wr"]))
    assert _raises_and_waits(port, twice) == (2, 2, 2)


def _owns(port, key):
    """Whether the node at port is the master serving key's slot."""
    r = redis.Redis(port=port)
    slot = r.execute_command("CLUSTER KEYSLOT", key)
    for start, end, master, *_ in r.execute_command("CLUSTER SLOTS"):
        if start <= slot <= end:
            return master[1] == port
    return False
