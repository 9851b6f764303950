"""Loader exceptions propagate unchanged; library errors are xfetch.Error
subclasses carrying the C code and message."""
import time
import traceback

import pytest

import xfetch
from xfetch.testing import free_port


class Boom(Exception):
    pass


def failing_loader(box):
    def load():
        box["calls"] = box.get("calls", 0) + 1
        box["exc"] = Boom("loader failed")
        raise box["exc"]
    return load


def test_loader_exception_is_the_same_object_with_its_traceback(cache):
    box = {}
    with pytest.raises(Boom) as info:
        cache.get_or_compute("k", failing_loader(box), ttl=60)
    assert info.value is box["exc"]
    frames = [f.name for f in traceback.extract_tb(info.value.__traceback__)]
    assert "load" in frames  # the loader's own frame is kept
    assert info.value.__context__ is None  # not chained to anything of ours


def test_loader_exception_caches_nothing_and_releases_the_lease(cache, admin, prefix,
                                                                counter):
    with pytest.raises(Boom):
        cache.get_or_compute("k", failing_loader({}), ttl=60, lease=30)
    assert admin.exists(prefix + "k") == 0  # no value, no lease left behind
    load = counter()
    t0 = time.monotonic()
    assert cache.fetch("k", load, ttl=60, lease=30, wait=10) == (b"value", "loader")
    assert time.monotonic() - t0 < 5.0  # did not wait for the 30 s lease (wait=10: 10 s)
    assert load.calls == 1
    assert cache.stats()["load_errors"] == 1


def test_wrong_return_type_is_a_type_error_and_caches_nothing(server, admin, prefix):
    cache = xfetch.Cache(server.url, prefix=prefix, serializer="bytes")
    with pytest.raises(TypeError, match="bytes or None with serializer='bytes'"):
        cache.get_or_compute("k", lambda: "a str", ttl=60)
    cache.close()
    assert admin.exists(prefix + "k") == 0


def test_keyboard_interrupt_in_loader_propagates(cache, admin, prefix):
    def load():
        raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt):
        cache.get_or_compute("k", load, ttl=60)
    assert admin.exists(prefix + "k") == 0


def test_failed_early_refresh_serves_the_valid_value_and_logs(cache, counter, caplog):
    cache.get_or_compute("k", counter(b"old"), ttl=60)
    box = {}
    # beta=inf elects a refresh; it fails; the still-valid value is served.
    assert cache.fetch("k", failing_loader(box), ttl=60, beta=float("inf"),  # XFetch,
                       background_refresh=False, refresh_ahead=-1) == (b"old", "cache")
    assert box["calls"] == 1
    [record] = [r for r in caplog.records if r.name == "xfetch"]
    assert record.exc_info[1] is box["exc"]


def test_value_above_max_value_len_is_invalid_argument(server, admin, prefix):
    c = xfetch.Cache(server.url, prefix=prefix, max_value_len=4, serializer="bytes")
    with pytest.raises(xfetch.InvalidArgumentError, match="5 bytes") as info:
        c.get_or_compute("k", lambda: b"12345", ttl=60)
    assert info.value.code == xfetch.lib.XF_EINVAL == -1
    assert isinstance(info.value, ValueError)
    assert admin.exists(prefix + "k") == 0
    with pytest.raises(xfetch.InvalidArgumentError, match="max_value_len"):
        c.set("k", b"12345", ttl=60)
    c.close()


def test_wrong_type_key_raises_wrong_type_error(cache, admin, prefix, counter):
    admin.set(prefix + "plain", "not an entry")
    with pytest.raises(xfetch.WrongTypeError) as info:
        cache.get_or_compute("plain", counter(), ttl=60)
    e = info.value
    assert isinstance(e, xfetch.Error) and isinstance(e, TypeError)
    assert (e.code, e.name) == (-10, "EWRONGTYPE")
    assert "WRONGTYPE" in e.message


def test_connect_refused_raises_connection_error():
    with pytest.raises(xfetch.ConnectionError) as info:
        xfetch.Cache(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)
    assert info.value.code == xfetch.lib.XF_ECONNECT == -3
    assert isinstance(info.value, ConnectionError)  # the builtin too
    assert "connect" in info.value.message
    assert "refused" in info.value.message  # the cause, not just the code


def test_wait_timeout_fail_raises_timeout_error(cache, server, prefix):
    other = xfetch.Cache(server.url, prefix=prefix)
    started = []

    def slow():
        started.append(1)
        time.sleep(0.5)
        return b"v"
    import threading
    t = threading.Thread(target=other.get_or_compute, args=("k", slow), kwargs={"ttl": 60})
    t.start()
    while not started:
        time.sleep(0.005)
    with pytest.raises(xfetch.TimeoutError) as info:
        cache.get_or_compute("k", slow, ttl=60, wait=0.05, on_wait_timeout="fail")
    assert info.value.code == -7 and isinstance(info.value, TimeoutError)
    t.join()
    other.close()


def test_check_helper():
    assert xfetch.check(0) == 0
    with pytest.raises(xfetch.RedisError) as info:
        xfetch.check(-5)
    assert info.value.code == -5 and info.value.message == "Redis replied with an error"
    with pytest.raises(xfetch.Error):
        xfetch.check(-999)
