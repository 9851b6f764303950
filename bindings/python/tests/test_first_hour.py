"""What a web developer meets first, on both faces: values are objects
(pickle by default; secret= refuses a value someone else wrote; a json
serializer that round-trips the types a database returns), a Cache made at
import time and set up at startup with a default ttl, and signals that say
what happened (a refused password or db, share answers in metrics)."""
import datetime
import decimal
import logging
import pickle
import uuid

import pytest

import xfetch

SECRET = "0123456789abcdef-a-test-secret"


class Recorder:
    """Unpickling one calls Recorder.ran(): a value that runs code."""
    runs = []

    @staticmethod
    def ran(tag):
        Recorder.runs.append(tag)
        return {"evil": tag}

    def __reduce__(self):
        return (Recorder.ran, ("unpickled",))


# ---- 1. values are objects ----------------------------------------------------------

def test_objects_round_trip_by_default_and_bytes_stay_bytes(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    row = {"id": 7, "tags": ("a", "b"), "at": datetime.datetime(2026, 1, 2, 3, 4, 5)}
    assert face.run(cache.get_or_compute("row", face.loader(lambda: row), ttl=60)) == row
    assert face.run(cache.get_or_compute("row", face.loader(lambda: 1 / 0), ttl=60)) == row
    assert face.run(cache.get("row")) == row
    assert face.run(cache.get_or_compute("b", face.loader(lambda: b"raw"), ttl=60)) == b"raw"
    assert face.run(cache.get("b")) == b"raw"
    assert face.run(cache.set("s", [1, 2], ttl=60)) is True
    assert face.run(cache.fetch("s", face.loader(lambda: 1 / 0), ttl=60)) == ([1, 2], "cache")
    got = face.run(cache.get_many(["row", "m"], face.loader(lambda k: {"k": k}), ttl=60))
    assert got == {"row": row, "m": {"k": "m"}}
    with pytest.raises(TypeError, match="None"):
        face.run(cache.set("n", None, ttl=60))

    if face.aio:
        @cache.cached(ttl=60, key="profile:{user_id}")
        async def profile(user_id):
            return {"id": user_id, "balance": decimal.Decimal("1.10")}
    else:
        @cache.cached(ttl=60, key="profile:{user_id}")
        def profile(user_id):
            return {"id": user_id, "balance": decimal.Decimal("1.10")}
    assert face.run(profile(3)) == {"id": 3, "balance": decimal.Decimal("1.10")}
    assert face.run(profile(3)) == {"id": 3, "balance": decimal.Decimal("1.10")}


def test_secret_refuses_a_value_someone_else_wrote(face, server, admin, prefix):
    Recorder.runs.clear()
    intruder = face.Cache(server.url, prefix=prefix)  # no secret: what an intruder writes
    assert face.run(intruder.set("user:1", Recorder(), ttl=60)) is True
    assert Recorder.runs == []
    cache = face.Cache(server.url, prefix=prefix, secret=SECRET)
    loads = []

    def load():
        loads.append(1)
        return {"name": "ada"}
    assert face.run(cache.get("user:1")) is None  # refused: a miss, never unpickled
    assert face.run(cache.get_or_compute("user:1", face.loader(load), ttl=60)) == {"name": "ada"}
    assert Recorder.runs == []
    assert loads == [1]
    assert cache.stats()["refused"] == 2
    # now signed: served as a hit
    assert face.run(cache.fetch("user:1", face.loader(load), ttl=60)) == ({"name": "ada"},
                                                                           "cache")
    assert loads == [1]
    # a value signed with another secret is refused too
    other = face.Cache(server.url, prefix=prefix, secret="another-secret-of-16+bytes")
    assert face.run(other.get("user:1")) is None
    assert other.stats()["refused"] == 1
    # a signed value copied to another key does not verify there
    admin.copy(prefix + "user:1", prefix + "user:2")
    assert face.run(cache.get("user:2")) is None
    assert Recorder.runs == []


def test_secret_with_a_decorator_recomputes_a_forged_value_once(face, server, prefix):
    Recorder.runs.clear()
    cache = face.Cache(server.url, prefix=prefix, secret=SECRET)
    calls = []
    if face.aio:
        @cache.cached(ttl=60, key="p:{x}")
        async def f(x):
            calls.append(x)
            return x * 2
    else:
        @cache.cached(ttl=60, key="p:{x}")
        def f(x):
            calls.append(x)
            return x * 2
    intruder = face.Cache(server.url, prefix=prefix)
    face.run(intruder.set("p:4", Recorder(), ttl=60))
    assert face.run(f(4)) == 8
    assert face.run(f(4)) == 8
    assert calls == [4] and Recorder.runs == []
    assert cache.stats()["refused"] == 1


def test_json_round_trips_what_a_database_returns(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix, serializer="json")
    row = {"price": decimal.Decimal("19.990"), "at": datetime.datetime(
        2026, 11, 28, 3, 4, 5, 678901, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        "naive": datetime.datetime(2026, 1, 1, 12, 0), "day": datetime.date(2026, 2, 28),
        "time": datetime.time(23, 59, 58, 1), "id": uuid.UUID(int=42), "blob": b"\x00\xff",
        "span": datetime.timedelta(days=1, seconds=2, microseconds=3), "n": [1, "two", None]}
    assert face.run(cache.get_or_compute("row", face.loader(lambda: row), ttl=60)) == row
    got = face.run(cache.get("row"))
    assert got == row and type(got["price"]) is decimal.Decimal and type(got["blob"]) is bytes


def test_a_wrong_type_names_serializer(face, server, admin, prefix):
    raw = face.Cache(server.url, prefix=prefix, serializer="bytes")
    with pytest.raises(TypeError, match="serializer="):
        face.run(raw.get_or_compute("k", face.loader(lambda: {"a": 1}), ttl=60))
    js = face.Cache(server.url, prefix=prefix, serializer="json")
    with pytest.raises(TypeError, match="serializer='json'"):
        face.run(js.get_or_compute("k", face.loader(lambda: {1, 2}), ttl=60))
    assert admin.exists(prefix + "k") == 0
    # serializer="bytes": the value on Redis is the bytes as they are
    assert face.run(raw.get_or_compute("b", face.loader(lambda: b"as is"), ttl=60)) == b"as is"
    from conftest import peek
    assert peek(admin, prefix + "b").v == b"as is"


def test_pickle_is_the_default_on_redis(face, server, admin, prefix):
    from conftest import peek
    cache = face.Cache(server.url, prefix=prefix)
    face.run(cache.set("k", b"v", ttl=60))
    assert pickle.loads(peek(admin, prefix + "k").v) == b"v"


# ---- 2. configure later ---------------------------------------------------------------

def test_a_cache_made_at_import_time_is_set_up_later(face, server, admin, prefix):
    cache = face.Cache(ttl="10m")  # no URL: nothing connects
    if face.aio:
        @cache.cached(key="d:{x}")
        async def double(x):
            return x * 2
    else:
        @cache.cached(key="d:{x}")
        def double(x):
            return x * 2
    with pytest.raises(xfetch.NotSetUpError, match=r"setup\(") as info:
        face.run(cache.get_or_compute("k", face.loader(lambda: 1)))
    assert isinstance(info.value, xfetch.Error)
    with pytest.raises(xfetch.NotSetUpError):
        face.run(double(2))
    with pytest.raises(xfetch.NotSetUpError):
        cache.stats()
    assert "not set up" in repr(cache) and not cache.is_set_up
    cache.setup(server.url, prefix=prefix)
    assert cache.is_set_up
    assert face.run(double(2)) == 4
    assert face.run(cache.get_or_compute("k", face.loader(lambda: 1))) == 1
    for key in ("d:2", "k"):
        assert 590_000 < admin.pttl(prefix + key) <= 600_000  # "10m" (plus no stale window)
    with pytest.raises(xfetch.Error, match="set up already"):
        cache.setup(server.url)
    with pytest.raises(TypeError, match="nonsense"):
        face.Cache().setup(server.url, nonsense=1)


@pytest.mark.parametrize("ttl,seconds", [(90, 90), (2.5, 2.5), ("30s", 30), ("2h", 7200),
                                         ("1h30m", 5400), ("500ms", 0.5),
                                         (datetime.timedelta(minutes=3), 180)])
def test_default_ttl_forms(face, server, admin, prefix, ttl, seconds):
    cache = face.Cache(server.url, prefix=prefix, ttl=ttl)
    face.run(cache.set("k", 1))
    assert seconds * 1000 - 10_000 < admin.pttl(prefix + "k") <= seconds * 1000


def test_no_ttl_anywhere_is_a_clear_error(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    with pytest.raises(TypeError, match="ttl is required"):
        face.run(cache.get_or_compute("k", face.loader(lambda: 1)))
    with pytest.raises(ValueError, match="ttl"):
        face.Cache(server.url, ttl="10 minutes")


# ---- 4. signals that say what happened -----------------------------------------------

def test_a_refused_password_logs_no_breaker(face, server, caplog):
    from conftest import ACL_USER
    caplog.set_level(logging.INFO, logger="xfetch")
    with pytest.raises(xfetch.AuthError):
        face.Cache(f"redis://{ACL_USER}:wrong@127.0.0.1:{server.port}/0")
    with pytest.raises(xfetch.InvalidArgumentError, match="out of range") as info:
        face.Cache(f"redis://127.0.0.1:{server.port}/99")
    assert not isinstance(info.value, xfetch.AuthError)
    assert isinstance(info.value, ValueError)
    assert [r.getMessage() for r in caplog.records if r.name == "xfetch"] == []


def test_share_answers_are_counted_shared_and_load_start_pairs(face, tmp_path):
    from prometheus_client import CollectorRegistry

    import xfetch.metrics
    from xfetch.testing import free_port
    seen = []
    # Redis down: nothing listens on this port
    cache = face.Cache(f"redis://127.0.0.1:{free_port()}/0", lazy_connect=True,
                       connect_timeout=0.2, on_event=seen.append)
    registry = CollectorRegistry()
    registry.register(xfetch.metrics.Collector(cache))
    loads = []

    def load():
        loads.append(1)
        return {"v": 1}
    for _ in range(4):  # the first loads; the share keeps its value for the others
        got = face.run(cache.fetch("k", face.loader(load), ttl=60))
        assert got.value == {"v": 1}
    assert loads == [1]
    value = registry.get_sample_value
    assert value("xfetch_calls_total", {"namespace": "", "result": "uncached"}) == 1
    assert value("xfetch_calls_total", {"namespace": "", "result": "shared"}) == 3
    types = [e.type for e in seen if e.key == b"k"]
    assert types.count("load_start") == types.count("load_done") == 1, types
    assert types.count("fail_open") == 4 and types.count("local") == 3
