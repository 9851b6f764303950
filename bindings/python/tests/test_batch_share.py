"""With Redis down, batch loads share their in-flight loads across threads
(the Cache's xf_share), as get_or_compute's do: get_many(batch=True) and
cached_many run each missing key's load once, not once per thread."""
import collections
import threading
import time

import pytest

import xfetch
import xfetch.testing

THREADS, IDS, ROUNDS = 6, 3, 3


@pytest.fixture
def down_cache(tmp_path):
    srv = xfetch.testing.RedisServer(str(tmp_path))
    cache = xfetch.Cache(f"redis://127.0.0.1:{srv.port}/0")
    srv.stop()
    yield cache
    cache.close()


def run_rounds(call):
    """call(round, thread index) in THREADS threads, all starting each round
    together; returns the errors they raised."""
    barrier = threading.Barrier(THREADS)
    errors = []

    def work(t):
        for r in range(ROUNDS):
            barrier.wait()
            try:
                call(r, t)
            except BaseException as e:  # noqa: B902 - reported by the test
                errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return errors


def rotated(r, t):
    """The round's ids in the thread's own order: calls lead different keys
    and wait for each other's."""
    return [(r, (t + j) % IDS) for j in range(IDS)]


def test_get_many_batch_loads_each_key_once(down_cache):
    loads = collections.Counter()
    lock = threading.Lock()

    def load(keys):
        with lock:
            loads.update(keys)
        time.sleep(0.1)
        return {k: b"v-" + k.encode() for k in keys}

    def call(r, t):
        keys = [f"down-many:{r}:{i}" for _, i in rotated(r, t)]
        got = down_cache.get_many(keys, load, ttl=60, batch=True)
        assert got == {k: b"v-" + k.encode() for k in keys}

    assert run_rounds(call) == []
    want = {f"down-many:{r}:{i}": 1 for r in range(ROUNDS) for i in range(IDS)}
    assert dict(loads) == want, f"{sum(loads.values())} loads for {len(want)} keys"


def test_cached_many_loads_each_id_once(down_cache):
    loads = collections.Counter()
    lock = threading.Lock()

    @down_cache.cached_many(ttl=60, key="down-dec:{}")
    def users(ids):
        with lock:
            loads.update(ids)
        time.sleep(0.1)
        return {i: f"user-{i}".encode() for i in ids}

    def call(r, t):
        ids = [r * 10 + i for _, i in rotated(r, t)]
        assert users(ids) == {i: f"user-{i}".encode() for i in ids}

    assert run_rounds(call) == []
    assert dict(loads) == {r * 10 + i: 1 for r in range(ROUNDS) for i in range(IDS)}
