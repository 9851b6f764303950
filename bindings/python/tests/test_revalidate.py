"""Conditional refresh on both faces: a loader with previous=True gets the
cached value (deserialized) and its validator, and answers
xfetch.UNCHANGED (the entry's life is extended, its value not rewritten)
or xfetch.Validated(value, validator)."""
import asyncio
import math
import time

import pytest

import xfetch

# Every call refreshes in the call: XFetch always elects it, in the caller.
REFRESH = dict(beta=math.inf, refresh_ahead=-1.0, background_refresh=False)


def test_a_loader_answers_unchanged_and_stores_validators(face, server, admin, prefix):
    seen = []
    cache = face.Cache(server.url, prefix=prefix,
                       on_event=lambda e: seen.append(e.type) if e.type == "revalidated" else None)
    given = []
    answers = [xfetch.Validated({"v": 1}, "etag-1"), xfetch.UNCHANGED,
               xfetch.Validated({"v": 2}, b"etag-2"), xfetch.UNCHANGED]

    def body(previous):
        given.append(previous)
        return answers[len(given) - 1]
    load = face.loader(body)

    assert face.run(cache.get_or_compute("k", load, ttl=60, previous=True, **REFRESH)) == {"v": 1}
    assert given == [None], "a miss: no previous value"
    admin.pexpire(prefix + "k", 5000)  # so the extension shows in PTTL
    got = face.run(cache.fetch("k", load, ttl=60, previous=True, **REFRESH))
    assert got.value == {"v": 1}
    prev = given[1]
    assert isinstance(prev, xfetch.Previous)
    assert prev.value == {"v": 1} and prev.validator == b"etag-1"
    assert prev.age is not None and 0 <= prev.age < 60
    assert cache.stats()["revalidated"] == 1, "answered unchanged: touched, not rewritten"
    assert admin.pttl(prefix + "k") > 30000, "the entry's life was extended (ttl 60 s)"
    assert seen == ["revalidated"]

    assert face.run(cache.get_or_compute("k", load, ttl=60, previous=True, **REFRESH)) == {"v": 2}
    assert cache.stats()["revalidated"] == 1, "a new value is written"
    assert face.run(cache.get_or_compute("k", load, ttl=60, previous=True, **REFRESH)) == {"v": 2}
    assert given[3].value == {"v": 2} and given[3].validator == b"etag-2", \
        "the new validator is the one given back"
    assert cache.stats()["revalidated"] == 2 and seen == ["revalidated"] * 2
    assert face.run(cache.get("k")) == {"v": 2}


def test_unchanged_without_a_previous_value_raises(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    load = face.loader(lambda previous: xfetch.UNCHANGED)
    with pytest.raises(ValueError, match="no previous value"):
        face.run(cache.get_or_compute("none", load, ttl=60, previous=True))
    assert face.run(cache.get("none")) is None


def test_the_decorator_gives_previous_and_takes_unchanged(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    given = []

    def body(n, previous=None):
        given.append(previous)
        if previous is None:
            return xfetch.Validated(f"row {n}", "v1")
        return xfetch.UNCHANGED
    if face.aio:
        async def row(n, previous=None):
            return body(n, previous)
    else:
        def row(n, previous=None):
            return body(n, previous)
    row = cache.cached(ttl=60, key="row:{n}", previous=True, **REFRESH)(row)
    assert face.run(row(7)) == "row 7"
    assert face.run(row(7)) == "row 7"
    assert given[0] is None and given[1].value == "row 7" and given[1].validator == b"v1"
    assert cache.stats()["revalidated"] == 1
    assert face.run(row.refresh(7)) == "row 7"  # computes anew: given no previous value
    assert given[2] is None


@pytest.mark.parametrize("off_path", ["background_refresh", "soft_timeout"])
def test_a_refresh_off_the_request_path_answers_unchanged(face, server, admin, prefix, off_path):
    seen = []
    cache = face.Cache(server.url, prefix=prefix,
                       on_event=lambda e: seen.append(e.type) if e.type == "revalidated" else None)
    given = []

    def body(previous):
        given.append(previous)
        return "first" if previous is None else xfetch.UNCHANGED
    assert face.run(cache.get_or_compute("k", face.loader(body), ttl=60, previous=True)) == "first"
    admin.pexpire(prefix + "k", 5000)  # so the extension shows in PTTL
    if off_path == "background_refresh":  # the refresh threads (sync) or a task (aio)
        policy = dict(REFRESH, background_refresh=True)
        slow = face.loader(body)
    else:  # the load outlives the soft timeout: it goes on off the call
        policy = dict(REFRESH, soft_timeout=0.05)
        slow = face.loader(body, delay=0.3)
    assert face.run(cache.get_or_compute("k", slow, ttl=60, previous=True, **policy)) == "first"
    # Off the call, the refresh client's counts join the Cache's once its job
    # has ended, a moment after its event: wait for both.
    _wait(face, lambda: seen == ["revalidated"] and cache.stats()["revalidated"] >= 1)
    assert given[1].value == "first"
    assert cache.stats()["revalidated"] == 1, "counted once, off the call as in it"
    assert admin.pttl(prefix + "k") > 30000, "the entry's life was extended (ttl 60 s)"
    assert face.run(cache.get("k")) == "first"


def _wait(face, done, limit=10.0):
    """Polls done() up to limit s (far above the 0.3 s load on a busy
    machine), letting the aio face's loop run its tasks."""
    end = time.monotonic() + limit
    while not done() and time.monotonic() < end:
        if face.aio:
            face.run(asyncio.sleep(0.02))
        else:
            time.sleep(0.02)
    assert done(), "the refresh off the request path answered unchanged"


def test_format_1_entries_keep_no_validator_but_take_unchanged(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix, entry_format=1)
    given = []

    def body(previous):
        given.append(previous)
        return xfetch.Validated("h1", "etag") if previous is None else xfetch.UNCHANGED
    load = face.loader(body)
    assert face.run(cache.get_or_compute("h", load, ttl=60, previous=True)) == "h1"
    assert face.run(cache.get_or_compute("h", load, ttl=60, previous=True, **REFRESH)) == "h1"
    assert given[1].value == "h1" and given[1].validator is None
    assert cache.stats()["revalidated"] == 1
