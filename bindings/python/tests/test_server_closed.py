"""Connections the server closes while Redis stays up, on both faces: a data
connection closed (CLIENT KILL, a restart) costs one reconnection and a
resend, and losing only the near cache's invalidation connection re-arms
tracking on the data connections in place. Neither is a failure: no error,
no loader run, no answer from the process share, no breaker trip. The
figures are counts of outcomes; no assertion depends on timing."""
import asyncio
import subprocess
import threading
import time

import pytest
import redis

import xfetch
import xfetch.testing


# Command and connect timeouts far above any scheduling delay of a busy
# machine (the defaults are 1 s): a timeout would be a failure of its own,
# not the one these tests count.
TIMEOUTS = {"timeout": 10.0, "connect_timeout": 10.0}


class Outcomes:
    """What a Cache's calls came to: breaker trips (on_event), loader runs."""

    def __init__(self):
        self.trips = 0
        self.loads = 0

    def on_event(self, event):
        if event.type == "breaker_opened":
            self.trips += 1

    def loader(self, face):
        def count():
            self.loads += 1
            return b"loaded"
        return face.loader(count)


def restart_on_the_same_port(srv):
    """srv stopped (its clients' connections closed by the server) and
    started again with the same arguments: same port, empty."""
    srv.proc.terminate()
    srv.proc.wait(10)
    srv.proc = subprocess.Popen(srv.proc.args, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10  # a start, not a margin of the test's
    while not srv._answers():
        assert srv.proc.poll() is None and time.monotonic() < deadline, "no restart"
        time.sleep(0.01)


@pytest.mark.parametrize("fault", ["CLIENT KILL", "restart"])
def test_a_connection_the_server_closed_is_reopened_and_resent(face, tmp_path, prefix, fault):
    """75 calls (set, get, get_or_compute) right after the server closed the
    Cache's working connections: each is resent on a new connection; none
    raises, runs its loader or opens the breaker. On the asyncio face the
    calls start in the same loop step as the fault, so the first of them
    writes on the closed connection before the loop reads its end."""
    srv = xfetch.testing.RedisServer(str(tmp_path))
    try:
        seen = Outcomes()
        cache = face.Cache(srv.url, prefix=prefix, on_event=seen.on_event, **TIMEOUTS)
        keys = [f"k{i}" for i in range(25)]
        face.gather([lambda k=k: cache.set(k, b"v", ttl=600) for k in keys])  # connected

        def close_connections():
            if fault == "restart":
                restart_on_the_same_port(srv)
                with xfetch.Cache(srv.url, prefix=prefix) as other:  # the values again
                    for k in keys:
                        other.set(k, b"v", ttl=600)
            else:
                with redis.Redis(port=srv.port) as admin:
                    assert admin.client_kill_filter(_type="normal", skipme=True) >= 1

        load = seen.loader(face)
        calls = ([lambda k=k: cache.set(k, b"v", ttl=600) for k in keys]
                 + [lambda k=k: cache.get(k) for k in keys]
                 + [lambda k=k: cache.get_or_compute(k, load, ttl=600) for k in keys])
        if face.aio:
            async def main():
                close_connections()
                return await asyncio.gather(*[c() for c in calls], return_exceptions=True)
            results = face.run(main())
        else:
            close_connections()
            results = face.gather(calls)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert (len(errors), seen.loads, seen.trips) == (0, 0, 0), errors[:3]
        assert results == [True] * 25 + [b"v"] * 50
    finally:
        srv.stop()


def test_losing_the_invalidation_connection_fails_no_call(face, server, admin, prefix):
    """20 callers reading 300 cached keys through a near cache that holds a
    part of them (so that reads to Redis are in flight when the loss is
    seen) while its invalidation connection is killed (CLIENT KILL TYPE
    pubsub), in each of 20 rounds: the near entries go and the data
    connections are tracked again in place; every call is answered by Redis
    or the near cache: no error, no loader run, no answer from the process
    share, no breaker trip."""
    seen = Outcomes()
    cache = face.Cache(server.url, prefix=prefix, near_cache_bytes=16 << 10,
                       on_event=seen.on_event, **TIMEOUTS)
    keys = [f"k{i}" for i in range(300)]
    face.gather([lambda k=k: cache.set(k, b"v", ttl=600) for k in keys])
    load = seen.loader(face)
    wrong = []  # a value other than b"v", or an error

    def reader(i):
        mine = keys[i * 15:] + keys[:i * 15]  # each its own order
        if face.aio:
            async def read():
                for k in mine:
                    try:
                        if await cache.get_or_compute(k, load, ttl=600) != b"v":
                            wrong.append(k)
                    except xfetch.Error as e:
                        wrong.append(e)
            return read

        def read_sync():
            for k in mine:
                try:
                    if cache.get_or_compute(k, load, ttl=600) != b"v":
                        wrong.append(k)
                except xfetch.Error as e:
                    wrong.append(e)
        return read_sync

    def kill_once(done):
        """Kills the invalidation connection once the tracker has one open
        again (or gives up when the round is over)."""
        while not done.is_set():
            if admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub"):
                return
            done.wait(0.001)

    face.gather([reader(i) for i in range(20)])  # kept near, tracked
    local0 = cache.stats()["local"]
    for _ in range(20):
        done = threading.Event()
        kill = threading.Thread(target=kill_once, args=(done,))
        kill.start()  # while the readers run (when exactly does not matter)
        face.gather([reader(i) for i in range(20)])
        done.set()
        kill.join()
    errors = [w for w in wrong if isinstance(w, BaseException)]
    assert (len(wrong), len(errors), seen.loads, cache.stats()["local"] - local0,
            seen.trips) == (0, 0, 0, 0, 0), errors[:3]
