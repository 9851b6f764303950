"""xfetch.aio under a changing Redis Cluster (issue 18: the C call tells the
driver which node to talk to): a resharding of 1,000 slots by redis-cli, and
a master killed (kill -9) until its replica takes over, while 50 tasks keep
calling get_or_compute on 300 keys. Asserted, as tests/test_async_chaos.c
does for the C event-loop driver: no call raises, no call returns a wrong
value (a call may fail open while a master is gone), and afterwards every
key is a cache hit. One 3 masters + 3 replicas cluster for the module,
rebuilt before a test if an earlier one left it changed for good (a master
killed): the tests pass in any order."""
import asyncio
import random
import subprocess
import threading
import time

import pytest

import isolation
import xfetch
import xfetch.testing

KEYS, TASKS = 300, 50


@pytest.fixture(scope="module")
def _clusters():
    built = []
    yield built
    for c in built:
        c.stop()


@pytest.fixture
def cluster(_clusters):
    """The module's cluster; a new one if the last is not whole (a node down
    or failed over: the master-killed test leaves it so)."""
    if not _clusters or not _whole(_clusters[-1]):
        if _clusters:
            _clusters.pop().stop()
        with isolation.kept():  # the module's, not the test's, processes
            _clusters.append(xfetch.testing.RedisCluster(masters=3, replicas=1))
    return _clusters[-1]


def _whole(cluster):
    """Every node runs, none is marked failed, every one says cluster_state:ok."""
    if any(p.poll() is not None for p in cluster.procs):
        return False
    if any("fail" in f[2] for f in _nodes(cluster.ports[0])):
        return False
    return all("cluster_state:ok" in xfetch.testing.RedisCluster._info(p, "CLUSTER INFO")
               for p in cluster.ports)


def _nodes(port):
    """CLUSTER NODES of the node on port (redis-cli: the text as it is), split."""
    return [line.split() for line in
            xfetch.testing.RedisCluster._info(port, "CLUSTER NODES").splitlines()]


def _masters(cluster):
    """{port: node id} of the masters that hold slots, from a live node."""
    for p in cluster.ports:
        nodes = _nodes(p)
        if nodes:
            return {int(f[1].split(":")[1].split("@")[0]): f[0] for f in nodes
                    if "master" in f[2] and "fail" not in f[2] and len(f) > 8}
    raise AssertionError("no node answers")


def test_replica_reads_load_once_then_hit(cluster, face, counter):
    prefix = f"replicas:{face.kind}:"
    cache = face.Cache(cluster.url + "?replica_reads=yes", prefix=prefix)
    loaders = {i: counter(value=b"r%d" % i) for i in range(100)}
    for i in range(100):
        assert face.run(cache.get_or_compute(f"k{i}", loaders[i], ttl=60)) == b"r%d" % i
    time.sleep(0.3)  # replicated
    for i in range(100):
        got = face.run(cache.fetch(f"k{i}", loaders[i], ttl=60))
        assert (got.value, got.source) == (b"r%d" % i, "cache")
    assert all(c.calls == 1 for c in loaders.values())
    assert cache.stats()["redis_errors"] == 0


class Load:
    """TASKS tasks calling get_or_compute on KEYS keys until chaos() (in a
    thread) returns; counts calls, errors, wrong values, loads per key."""

    def __init__(self, cluster, timeout=0.5):
        self.cache = xfetch.aio.Cache(cluster.url, prefix="chaos:", timeout=timeout,
                                      breaker=0.2)
        self.calls = self.errors = self.wrong = self.uncached = 0
        self.first_error = None
        self.loads = [0] * KEYS

    def loader(self, i):
        def load():
            self.loads[i] += 1
            return b"v%d" % i
        return load

    async def call(self, i):
        try:
            got = await self.cache.fetch(f"k{i}", self.loader(i), ttl=300)
        except Exception as e:  # noqa: B902 - counted
            self.errors += 1
            self.first_error = self.first_error or repr(e)
            return None
        finally:
            self.calls += 1
        self.wrong += got.value != b"v%d" % i
        self.uncached += got.source == "uncached"
        return got

    async def run(self, chaos):
        await asyncio.gather(*[self.call(i) for i in range(KEYS)])  # every key cached
        done = threading.Event()

        def changing():
            try:
                chaos()
            finally:
                done.set()
        thread = threading.Thread(target=changing)

        async def task(w):
            rnd = random.Random(w)
            while not done.is_set():
                await self.call(rnd.randrange(KEYS))
                await asyncio.sleep(0)
        thread.start()
        try:
            await asyncio.gather(*[task(w) for w in range(TASKS)])
        finally:
            thread.join()
        during = (self.calls, self.errors, self.wrong, self.uncached)
        # afterwards: every key served, then every key a hit
        await asyncio.gather(*[self.call(i) for i in range(KEYS)])
        hits = await asyncio.gather(*[self.call(i) for i in range(KEYS)])
        print(f"\ncalls {during[0]}, errors {during[1]}, wrong {during[2]}, "
              f"failed open {during[3]}; stats {self.cache.stats()}")
        assert self.errors == 0, f"{self.errors} errors, first: {self.first_error}"
        assert self.wrong == 0, f"{self.wrong} wrong values"
        assert all(h is not None and h.source == "cache" for h in hits)
        await self.cache.close()


def test_aio_under_a_resharding_of_1000_slots(cluster):
    masters = sorted(_masters(cluster).items())
    (src, src_id), (_, dst_id) = masters[0], masters[1]
    rc = []

    def reshard():
        time.sleep(0.3)
        rc.append(subprocess.run(
            ["redis-cli", "--cluster", "reshard", f"127.0.0.1:{src}", "--cluster-from", src_id,
             "--cluster-to", dst_id, "--cluster-slots", "1000", "--cluster-yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60).returncode)
        time.sleep(0.3)
    # A 10 s command timeout: no node goes away here, and a reply later than
    # 0.5 s on a busy machine (50 tasks beside the reshard's MIGRATEs) opened
    # the breaker: 80 calls failed open, read as a node gone
    load = Load(cluster, timeout=10.0)
    asyncio.run(load.run(reshard))
    assert rc == [0], "redis-cli --cluster reshard failed"
    assert load.cache.stats()["redirects"] > 0, "the load met the resharding"
    assert load.uncached == 0, "no node went away"
    assert load.loads == [1] * KEYS, "a key moved with its slot, never reloaded"


def _healed(cluster, dead):
    """Every surviving node says cluster_state:ok and lists no slot on dead."""
    for p in cluster.ports:
        if p == dead:
            continue
        if "cluster_state:ok" not in xfetch.testing.RedisCluster._info(p, "CLUSTER INFO"):
            return False
        if any(f[1].startswith(f"127.0.0.1:{dead}@") and len(f) > 8 for f in _nodes(p)):
            return False
    return True


def test_aio_under_a_master_killed(cluster):
    victim = sorted(_masters(cluster))[0]
    proc = cluster.procs[cluster.ports.index(victim)]
    healed = []

    def failover():
        time.sleep(0.3)
        proc.kill()  # SIGKILL
        deadline = time.monotonic() + 20  # node-timeout (3 s), then the election
        while not _healed(cluster, victim) and time.monotonic() < deadline:
            time.sleep(0.1)
        healed.append(_healed(cluster, victim))
        time.sleep(1.0)  # calls served by the new master
    load = Load(cluster)
    asyncio.run(load.run(failover))
    assert healed == [True], "no failover within 20 s"
    assert load.uncached > 0, "the load met the failover window"
