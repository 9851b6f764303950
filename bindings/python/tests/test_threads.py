"""One Cache shared by threads; a Cache used in a fork child."""
import os
import threading
import time

import pytest



def test_16_threads_on_a_cold_key_load_once(cache):
    calls = []
    lock = threading.Lock()

    def load():
        with lock:
            calls.append(threading.get_ident())
        time.sleep(0.2)
        return b"computed once"

    barrier = threading.Barrier(16)
    results, errors = [None] * 16, []

    def worker(i):
        try:
            barrier.wait()
            results[i] = cache.get_or_compute("cold", load, ttl=60, lease=10, wait=10)
        except BaseException as e:  # noqa: B902 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(calls) == 1
    assert results == [b"computed once"] * 16
    s = cache.stats()
    assert s["loads"] == 1 and s["connections"] >= 2  # a connection per concurrent caller


def test_threads_run_in_parallel_outside_the_gil(cache):
    # Each loader sleeps in Python while others proceed; 8 distinct keys with a
    # 0.5 s loader take ~0.5 s, not 4 s, when C calls release the GIL. The
    # bound, 2 s, leaves 1.5 s for starting eight threads on a busy machine and
    # is half of what serial loads take.
    def worker(i):
        cache.get_or_compute(f"k{i}", lambda: time.sleep(0.5) or b"v", ttl=60)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - t0 < 2.0


def xfetch_client_ids(admin):
    me = admin.client_id()
    return {c["id"]: c for c in admin.client_list() if int(c["id"]) != me}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_fork_child_opens_its_own_connection(cache, admin, counter):
    assert cache.get_or_compute("k", counter(b"parent"), ttl=60) == b"parent"
    before = xfetch_client_ids(admin)
    to_child_r, to_child_w = os.pipe()
    to_parent_r, to_parent_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into pytest
        code = 1
        try:
            ok = cache.get_or_compute("k", counter(b"x"), ttl=60) == b"parent"
            ok = ok and cache.get_or_compute("k2", counter(b"child"), ttl=60) == b"child"
            ok = ok and cache.stats()["connections"] == 1
            os.write(to_parent_w, b"1" if ok else b"0")
            os.read(to_child_r, 1)  # stay connected until the parent has looked
            code = 0
        finally:
            os._exit(code)
    assert os.read(to_parent_r, 1) == b"1"
    during = xfetch_client_ids(admin)
    os.write(to_child_w, b"x")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    new = set(during) - set(before)
    assert len(new) == 1  # the child's own connection
    assert set(before) <= set(during)  # the parent's is still there
    assert during[new.pop()]["cmd"].startswith("evalsha")  # it ran our read script
    # The parent's connection was not disturbed by the child.
    assert cache.get_or_compute("k2", counter(b"y"), ttl=60) == b"child"
    assert cache.get_or_compute("k", counter(b"z"), ttl=60) == b"parent"
    for fd in (to_child_r, to_child_w, to_parent_r, to_parent_w):
        os.close(fd)


def test_redis_down_threads_share_one_load(tmp_path):
    """With Redis killed, the Cache's share runs the loader once for many calls."""
    import xfetch.testing
    srv = xfetch.testing.RedisServer(str(tmp_path))
    cache = xfetch.Cache(f"redis://127.0.0.1:{srv.port}/0")
    srv.stop()
    calls = []
    lock = threading.Lock()

    def load():
        with lock:
            calls.append(1)
        time.sleep(0.02)
        return b"right"

    results = []

    def work():
        for _ in range(300):
            results.append(cache.fetch("down:hot", load, ttl=60))

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(value == b"right" for value, _ in results) and len(results) == 1200
    assert {source for _, source in results} <= {"uncached", "local"}
    assert len(calls) <= 12, f"{len(calls)} loader calls for 1,200 calls"
    print(f"redis down, share: {len(calls)} loader calls for 1,200 calls")
    cache.close()
