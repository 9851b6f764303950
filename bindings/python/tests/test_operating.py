"""Operating xfetch (issue 22), on both faces against a real redis-server:
on_event, the `xfetch` logger's records, the Prometheus collector and the
bypass switch."""
import logging
import os
import shutil
import subprocess
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import xfetch
import xfetch.metrics
import xfetch.testing


def types(events, *, keyed=True):
    return [e.type for e in events if (e.key is not None) == keyed]


def test_events_for_miss_load_and_hit(face, server, admin, prefix):
    seen = []
    cache = face.Cache(server.url, prefix=prefix, seed=1, on_event=seen.append)
    load = face.loader(lambda: b"v", delay=0.02)
    face.run(cache.get_or_compute("k", load, ttl=60))
    assert types(seen) == ["miss", "lease_won", "load_start", "load_done"]
    done = seen[3]
    assert done.key == b"k" and done.namespace == "" and done.error == 0
    assert done.duration >= 0.02
    assert done.driver == ("async" if face.aio else "blocking")
    assert done.face == face.kind
    seen.clear()
    face.run(cache.get_or_compute("k", load, ttl=60))
    assert types(seen) == ["hit"]
    assert seen[0].source == "cache" and seen[0].duration is None


def test_a_failing_on_event_never_breaks_a_call(face, server, admin, prefix, caplog):
    def boom(ev):
        raise RuntimeError("observer bug")
    cache = face.Cache(server.url, prefix=prefix, on_event=boom)
    with caplog.at_level(logging.WARNING, logger="xfetch"):
        for _ in range(3):
            assert face.run(cache.get_or_compute("k", face.loader(lambda: b"v"), ttl=60)) == b"v"
    assert len([r for r in caplog.records if "on_event" in r.getMessage()]) == 1


def test_on_event_must_be_callable(face, server):
    with pytest.raises(TypeError):
        face.Cache(server.url, on_event=42)


def _start_on(port, tmpdir):
    return subprocess.Popen(
        [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--dir",
         tmpdir, "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_up(port):
    r = __import__("redis").Redis(host="127.0.0.1", port=port)
    deadline = time.monotonic() + 10
    while True:
        try:
            if r.ping():
                return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_breaker_cycle_logs_warning_once_and_info_once(face, tmp_path, caplog):
    srv = xfetch.testing.RedisServer(str(tmp_path))
    port, proc = srv.port, None
    seen = []
    cache = face.Cache(srv.url, prefix="b:", breaker=0.1, timeout=0.3, on_event=seen.append)
    load = face.loader(lambda: b"v")
    try:
        with caplog.at_level(logging.DEBUG, logger="xfetch"):
            assert face.run(cache.get_or_compute("k", load, ttl=60)) == b"v"
            srv.proc.kill()  # killed, not shut down
            srv.proc.wait()
            for _ in range(5):  # down: every call fails open
                assert face.run(cache.get_or_compute("k", load, ttl=60)) == b"v"
                time.sleep(0.05)
            proc = _start_on(port, str(tmp_path))
            _wait_up(port)
            time.sleep(0.15)  # past the breaker
            for _ in range(3):
                assert face.run(cache.get_or_compute("k", load, ttl=60)) == b"v"
        records = [r for r in caplog.records if r.name == "xfetch"]
        opened = [r for r in records if "breaker opened" in r.getMessage()]
        closed = [r for r in records if "breaker closed" in r.getMessage()]
        assert [r.levelno for r in opened] == [logging.WARNING], [r.getMessage() for r in records]
        assert [r.levelno for r in closed] == [logging.INFO]
        # the fail-open episode is the breaker's: not one WARNING per call
        assert len([r for r in records if r.levelno >= logging.WARNING]) == 1
        assert "fail_open" in types(seen)
        assert types(seen, keyed=False).count("breaker_opened") == 1
        assert types(seen, keyed=False).count("breaker_closed") == 1
        assert [e.server for e in seen if e.type == "breaker_opened"] == [f"127.0.0.1:{port}"]
        # never a record per hit above DEBUG
        assert all(r.levelno == logging.DEBUG for r in records if "event hit" in r.getMessage())
    finally:
        if proc is not None:
            proc.kill()
            proc.wait()
        srv.stop()


def test_refresh_failures_warn_once_per_episode(face, server, admin, prefix, caplog):
    cache = face.Cache(server.url, prefix=prefix, background_refresh=False,
                       refresh_ahead=-1)  # XFetch in the call: beta=inf refreshes each
    face.run(cache.set("k", b"old", ttl=60))

    def fail():
        raise ValueError("db down")
    with caplog.at_level(logging.WARNING, logger="xfetch"):
        for _ in range(3):  # beta=inf: every call refreshes, fails, serves the old value
            assert face.run(cache.get_or_compute("k", face.loader(fail), ttl=60,
                                                 beta=float("inf"))) == b"old"
        assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 1
        face.run(cache.get_or_compute("k", face.loader(lambda: b"new"), ttl=60,
                                      beta=float("inf")))
        face.run(cache.get_or_compute("k", face.loader(fail), ttl=60, beta=float("inf")))
        assert len([r for r in caplog.records if "failed" in r.getMessage()]) == 2


def test_prometheus_scrape_with_a_namespace_label(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=3)
    registry = CollectorRegistry()
    registry.register(xfetch.metrics.Collector(cache))
    if face.aio:
        @cache.cached(ttl=60, namespace="users")
        async def user(i):
            return b"u%d" % i
    else:
        @cache.cached(ttl=60, namespace="users")
        def user(i):
            return b"u%d" % i
    for _ in range(3):
        face.run(user(1))
    face.run(cache.get_or_compute("plain", face.loader(lambda: b"p"), ttl=60))
    text = generate_latest(registry).decode()
    value = registry.get_sample_value
    assert value("xfetch_calls_total", {"namespace": "users", "result": "miss"}) == 1
    assert value("xfetch_calls_total", {"namespace": "users", "result": "hit"}) == 2
    assert value("xfetch_calls_total", {"namespace": "", "result": "miss"}) == 1
    assert value("xfetch_loads_total", {"namespace": "users", "outcome": "ok"}) == 1
    assert value("xfetch_load_duration_seconds_count", {"namespace": "users"}) == 1
    assert value("xfetch_load_duration_seconds_bucket", {"namespace": "users", "le": "+Inf"}) == 1
    assert value("xfetch_breaker_open") == 0
    assert "user:1" not in text and "plain" not in text  # never a key
    assert "# TYPE xfetch_calls_total counter" in text


def _entry_commands(admin):
    stats = admin.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0)
               for c in ("evalsha", "evalsha_ro", "hmget", "get", "mget", "eval"))


def test_enabled_false_runs_the_loader_and_sends_nothing(face, server, admin, prefix):
    seen = []
    before = admin.info("stats")["total_connections_received"]
    cache = face.Cache(server.url, prefix=prefix, enabled=False, on_event=seen.append)
    calls = []
    load = face.loader(lambda: calls.append(1) or b"v")
    for _ in range(3):
        assert face.run(cache.fetch("k", load, ttl=60)) == (b"v", "uncached")
    assert len(calls) == 3
    assert face.run(cache.get("k")) is None
    assert admin.info("stats")["total_connections_received"] == before
    assert cache.stats()["bypassed"] == 4
    assert types(seen) == ["load_start", "load_done"] * 3


def test_disabled_block_is_scoped(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    calls = []
    load = face.loader(lambda: calls.append(1) or b"v")
    face.run(cache.get_or_compute("k", load, ttl=60))
    admin.config_resetstat()
    with cache.disabled():
        for _ in range(2):
            assert face.run(cache.get_or_compute("k", load, ttl=60)) == b"v"
    assert len(calls) == 3
    assert _entry_commands(admin) == 0
    assert face.run(cache.fetch("k", load, ttl=60)).source == "cache"
    assert len(calls) == 3


def test_disabled_is_per_asyncio_task(server, admin, prefix):
    import asyncio
    import xfetch.aio

    async def main():
        cache = xfetch.aio.Cache(server.url, prefix=prefix)
        await cache.set("k", b"cached", ttl=60)

        async def bypassed():
            with cache.disabled():
                await asyncio.sleep(0.01)
                return await cache.get_or_compute("k", lambda: b"loaded", ttl=60)

        async def normal():
            await asyncio.sleep(0.005)
            return await cache.get_or_compute("k", lambda: b"loaded", ttl=60)
        out = await asyncio.gather(bypassed(), normal())
        await cache.close()
        return out
    assert asyncio.run(main()) == [b"loaded", b"cached"]
