"""Connections the server closes while Redis stays up, on both faces: a data
connection closed (CLIENT KILL, a restart) costs one reconnection and a
resend. It is not a failure: no error, no loader run, no breaker trip. The
figures are counts of outcomes; no assertion depends on timing."""
import asyncio
import subprocess
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
