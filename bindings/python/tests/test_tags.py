"""Tags and namespaces on both faces (the `face` fixture): tags= on
get_or_compute, fetch, set and the decorators (a sequence or a callable of
the arguments), invalidate_tags() and clear(); an entry loaded before an
invalidation is never served fresh after it returns, and one whose load an
invalidation overlapped neither; untagged entries and other tags are
untouched; a tagged hot key loads once per episode."""
import threading
import time

import pytest

import xfetch


def test_invalidate_tags_makes_tagged_entries_misses(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=1)
    loads = []

    def body(name):
        def load():
            loads.append(name)
            return f"{name}{len(loads)}"
        return load

    assert face.run(cache.get_or_compute("a", face.loader(body("a")), ttl=60,
                                         tags=["user:1", "catalogue"])) == "a1"
    assert face.run(cache.get_or_compute("b", face.loader(body("b")), ttl=60,
                                         tags=("user:2",))) == "b2"
    assert face.run(cache.get_or_compute("c", face.loader(body("c")), ttl=60)) == "c3"
    got = face.run(cache.fetch("a", face.loader(body("a")), ttl=60,
                               tags=["user:1", "catalogue"]))
    assert got == ("a1", "cache")
    face.run(cache.invalidate_tags(["catalogue"]))
    got = face.run(cache.fetch("a", face.loader(body("a")), ttl=60,
                               tags=["user:1", "catalogue"]))
    assert got == ("a4", "loader"), "invalidated: loaded again"
    assert face.run(cache.fetch("b", face.loader(body("b")), ttl=60,
                                tags=("user:2",))) == ("b2", "cache"), "another tag"
    assert face.run(cache.fetch("c", face.loader(body("c")), ttl=60)) == ("c3", "cache"), \
        "untagged"
    assert loads == ["a", "b", "c", "a"]
    assert cache.stats()["tag_invalidated"] == 1


def test_a_refused_entry_is_told_with_its_reason(face, server, admin, prefix):
    """The "tag_invalidated" event: error 1 (XF_TAG_RAISED) for an entry
    whose tag was invalidated, 2 (XF_TAG_OTHER) for one written under other
    tags than the call's."""
    seen = []
    cache = face.Cache(server.url, prefix=prefix, seed=9,
                       on_event=lambda e: seen.append(e) if e.type == "tag_invalidated" else None)
    face.run(cache.set("k", "v1", ttl=60, tags=["t"]))
    face.run(cache.invalidate_tags(["t"]))
    assert face.run(cache.fetch("k", face.loader(lambda: "v2"), ttl=60,
                                tags=["t"])) == ("v2", "loader")
    assert [(e.key, e.error, e.face) for e in seen] == [(b"k", 1, face.kind)]
    assert face.run(cache.fetch("k", face.loader(lambda: "v3"), ttl=60,
                                tags=["u"])) == ("v3", "loader")
    assert [(e.key, e.error) for e in seen[1:]] == [(b"k", 2)]
    assert cache.stats()["tag_invalidated"] == 2


def test_an_invalidation_during_the_load_wins(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=2)
    other = xfetch.Cache(server.url, prefix=prefix)  # another process, as it were
    try:
        def during():
            other.invalidate_tags(["t"])
            return "old"
        assert face.run(cache.get_or_compute("k", face.loader(during), ttl=60,
                                             tags=["t"])) == "old"
        got = face.run(cache.fetch("k", face.loader(lambda: "new"), ttl=60, tags=["t"]))
        assert got == ("new", "loader"), "the value loaded across the invalidation is a miss"
        got = face.run(cache.fetch("k", face.loader(lambda: "newer"), ttl=60, tags=["t"]))
        assert got == ("new", "cache")
    finally:
        other.close()


def test_a_tagged_set(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=3)
    assert face.run(cache.set("k", "written", ttl=60, tags=["s"])) is True
    assert face.run(cache.fetch("k", face.loader(lambda: "loaded"), ttl=60,
                                tags=["s"])) == ("written", "cache")
    face.run(cache.invalidate_tags(["s"]))
    assert face.run(cache.fetch("k", face.loader(lambda: "loaded"), ttl=60,
                                tags=["s"])) == ("loaded", "loader")


def test_decorator_tags_fixed_and_from_the_arguments(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=4)
    runs = []

    def body(user_id):
        runs.append(user_id)
        return {"id": user_id, "run": len(runs)}
    if face.aio:
        async def profile(user_id):
            return body(user_id)
    else:
        def profile(user_id):
            return body(user_id)
    profile = cache.cached(ttl=60, key="profile:{user_id}",
                           tags=lambda user_id: [f"user:{user_id}"])(profile)

    def listing():
        runs.append("listing")
        return len(runs)
    listing = cache.cached(ttl=60, key="listing", tags=["catalogue"])(face.loader(listing))

    assert face.run(profile(1))["run"] == 1
    assert face.run(profile(2))["run"] == 2
    assert face.run(listing()) == 3
    assert face.run(profile(1))["run"] == 1
    face.run(cache.invalidate_tags(["user:1"]))
    assert face.run(profile(1))["run"] == 4
    assert face.run(profile(2))["run"] == 2, "user:2 untouched"
    assert face.run(listing()) == 3
    face.run(cache.invalidate_tags(["catalogue"]))
    assert face.run(listing()) == 5
    assert runs == [1, 2, "listing", 1, "listing"]


def test_clear_invalidates_the_prefix_only(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=5, namespace_tag=True)
    neighbour = face.Cache(server.url, prefix=prefix + "n:", seed=6, namespace_tag=True)
    plain = face.Cache(server.url, prefix=prefix, seed=7)
    assert face.run(cache.get_or_compute("k", face.loader(lambda: "v1"), ttl=60)) == "v1"
    assert face.run(neighbour.get_or_compute("k", face.loader(lambda: "n1"), ttl=60)) == "n1"
    with pytest.raises(ValueError):
        face.run(plain.clear())
    face.run(cache.clear())
    assert face.run(cache.fetch("k", face.loader(lambda: "v2"), ttl=60)) == ("v2", "loader")
    assert face.run(neighbour.fetch("k", face.loader(lambda: "n2"), ttl=60)) == ("n1", "cache")


def test_an_invalidation_may_be_a_caches_first_call(face, server, admin, prefix):
    """clear() and invalidate_tags() on a Cache that made no call yet (on
    xfetch.aio: not yet on any event loop) work as any first call does."""
    for first in (lambda c: c.clear(), lambda c: c.invalidate_tags(["t"])):
        cache = face.Cache(server.url, prefix=prefix, namespace_tag=True)
        face.run(first(cache))
        assert face.run(cache.get_or_compute("k", face.loader(lambda: "v"), ttl=60)) == "v"


@pytest.mark.parametrize("near", [0, 1 << 20])
def test_get_after_clear_is_a_miss(face, server, admin, prefix, near):
    """get reads the namespace's version as every call of a namespace_tag
    Cache does: an entry written before clear() is not returned (another
    Cache of the prefix clears: another process), nothing is written by the
    read, and a value set after it is."""
    cache = face.Cache(server.url, prefix=prefix, namespace_tag=True, near_cache_bytes=near)
    other = face.Cache(server.url, prefix=prefix, namespace_tag=True)
    face.run(cache.set("k", "v1", ttl=60))
    assert face.run(cache.get("k")) == "v1" and face.run(cache.get("k")) == "v1"
    face.run(other.clear())
    keys = set(admin.keys("*"))
    assert face.run(cache.get("k")) is None
    assert set(admin.keys("*")) == keys
    assert face.run(cache.get_many(["k"], face.loader(lambda k: "v2"), ttl=60)) == {"k": "v2"}
    assert face.run(cache.get("k")) == "v2"


def test_bad_tags_raise_before_any_io(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=8)
    for bad, exc in (("one", TypeError), ([""], ValueError), ([1], TypeError),
                     (["x"] * 16, ValueError), (["a\0b"], ValueError)):
        with pytest.raises(exc):
            face.run(cache.get_or_compute("k", face.loader(lambda: "v"), ttl=60, tags=bad))
        with pytest.raises(exc):
            face.run(cache.invalidate_tags(bad))
    with pytest.raises(TypeError):
        cache.cached(ttl=60, key="k", tags="one")


def test_a_tagged_hot_key_loads_once_per_episode(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=9)
    loads = []

    def body():
        loads.append(1)
        return "hot"
    # 0.2 s load, wait 10 s: every caller finds the lease taken, on a busy machine too
    load = face.loader(body, delay=0.2)

    def caller():
        return lambda: cache.get_or_compute("hot", load, ttl=60, wait=10, lease=10,
                                            tags=["hot"])
    assert face.gather([caller() for _ in range(8)]) == ["hot"] * 8
    assert len(loads) == 1
    face.run(cache.invalidate_tags(["hot"]))
    assert face.gather([caller() for _ in range(8)]) == ["hot"] * 8
    assert len(loads) == 2


def test_near_cache_keeps_the_versions_and_a_fenced_invalidation_wins(face, server, admin,
                                                                      prefix):
    near = face.Cache(server.url, prefix=prefix, seed=10, near_cache_bytes=1 << 20)
    writer = xfetch.Cache(server.url, prefix=prefix)  # another process; no write_fence
    try:
        runs = []

        def body():
            runs.append(1)
            return len(runs)
        load = face.loader(body)
        assert face.run(near.get_or_compute("k", load, ttl=60, tags=["a", "b"])) == 1
        for _ in range(5):
            assert face.run(near.get_or_compute("k", load, ttl=60, tags=["a", "b"])) == 1
        before = admin.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        for _ in range(20):
            assert face.run(near.get_or_compute("k", load, ttl=60, tags=["a", "b"])) == 1
        after = admin.info("commandstats").get("cmdstat_evalsha", {}).get("calls", 0)
        assert after == before, "a tagged hit read its versions again"
        writer.invalidate_tags(["b"])  # always fenced: the near caches were told when it returns
        assert face.run(near.get_or_compute("k", load, ttl=60, tags=["a", "b"])) == 2
        assert face.run(near.get_or_compute("k", load, ttl=60, tags=["a", "b"])) == 2
    finally:
        writer.close()


def _data_calls(admin):
    """The data commands Redis has run: all but setup, liveness and questions."""
    skip = ("info", "ping", "client", "hello", "script", "select", "subscribe")
    return sum(v["calls"] for k, v in admin.info("commandstats").items()
               if not k.replace("cmdstat_", "").startswith(skip))


def test_a_warm_tagged_near_hit_sends_nothing_until_tracking_is_lost(face, server, admin,
                                                                     prefix):
    near = face.Cache(server.url, prefix=prefix, seed=12, near_cache_bytes=1 << 20)
    writer = xfetch.Cache(server.url, prefix=prefix)  # another process
    runs = []

    def body():
        runs.append(1)
        return len(runs)
    load = face.loader(body)

    def call():
        return face.run(near.get_or_compute("w", load, ttl=60, tags=["a", "b"]))

    def warm():
        # until a hit sends nothing (bounded: 5 s; the event loop arms its
        # tracking once its invalidation connection is open)
        deadline = time.monotonic() + 5
        while True:
            before = _data_calls(admin)
            value = call()
            if _data_calls(admin) == before:
                return value
            assert time.monotonic() < deadline, "never a hit sending nothing"

    try:
        assert warm() == 1
        # 20 hits: at most 2 may go to Redis (a hit does while the tracker
        # thread holds bytes it has not applied: rare, even on a busy machine)
        sent = 0
        for _ in range(20):
            before = _data_calls(admin)
            assert call() == 1
            sent += _data_calls(admin) > before
        assert sent <= 2, f"{sent} of 20 warm tagged hits sent commands"
        # the tracking connections killed, then an invalidation Redis cannot
        # tell this process about: the next call reads the versions again
        admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        writer.invalidate_tags(["b"])
        assert call() == 2
        assert warm() == 2
        # FLUSHALL: the tags' keys are gone too; read again, made anew
        # Redis may write its reply to the FLUSHALL before the invalidation to
        # this process (nothing fences another client's FLUSHALL): on a busy
        # machine one call may still be a near hit; it is seen within 5 s
        admin.flushall()
        deadline = time.monotonic() + 5
        while (got := call()) != 3:
            assert got == 2 and time.monotonic() < deadline, f"still {got} after FLUSHALL"
            time.sleep(0.001)
        assert warm() == 3
        writer.invalidate_tags(["a"])
        assert call() == 4
    finally:
        writer.close()


def test_a_warm_tagged_near_hit_needs_no_connection(face, server, admin, prefix):
    # max_connections=1, held by a load of another key (sync face): a warm
    # tagged hit (its entry known current for its tags) is served at once,
    # as an untagged one is; RELEASE_S bounds a failure (the hit then waits)
    RELEASE_S = 10.0
    near = face.Cache(server.url, prefix=prefix, near_cache_bytes=1 << 20, max_connections=1,
                      background_refresh=False, refresh_ahead=-1)
    tags = ["na", "nb"]
    load = face.loader(lambda: b"v")

    def hot():  # beta 0: never elected to refresh early
        return face.run(near.get_or_compute("hot", load, ttl=60, beta=0.0, tags=tags))

    deadline, in_a_row = time.monotonic() + 5, 0
    while in_a_row < 2:  # the first near hit makes it known current, the next uses that
        before = near.stats()["near_hits"]
        assert hot() == b"v"
        in_a_row = in_a_row + 1 if near.stats()["near_hits"] > before else 0
        assert time.monotonic() < deadline, "never two tagged near hits in a row"
    if face.aio:  # one client, no pool: served before anything is awaited
        before = near.stats()["near_hits"]
        assert hot() == b"v"
        assert near.stats()["near_hits"] == before + 1
        return
    gate, started = threading.Event(), threading.Semaphore(0)
    watchdog = threading.Timer(RELEASE_S, gate.set)
    watchdog.start()

    def held():
        started.release()
        gate.wait()
        return b"slow"

    def load_holding_the_connection():
        with near.disabled():  # holds its connection, sends nothing
            near.get_or_compute("slow", held, 60)
    t = threading.Thread(target=load_holding_the_connection)
    t.start()
    assert started.acquire(timeout=RELEASE_S)
    got = hot()
    still_held = not gate.is_set()
    gate.set()
    watchdog.cancel()
    t.join()
    watchdog.join()
    assert got == b"v"
    assert still_held, f"the tagged near hit waited for a connection ({RELEASE_S} s)"


def test_get_many_with_tags(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=11)
    runs = []

    def body(key):
        runs.append(key)
        return f"{key}{len(runs)}"
    load = face.loader(body)
    keys = ["a", "b", "c"]
    first = face.run(cache.get_many(keys, load, ttl=60, tags=["many"]))
    assert first == {"a": "a1", "b": "b2", "c": "c3"}
    assert face.run(cache.get_many(keys, load, ttl=60, tags=["many"])) == first
    face.run(cache.invalidate_tags(["many"]))
    again = face.run(cache.get_many(keys, load, ttl=60, tags=["many"]))
    assert sorted(again.values()) == ["a4", "b5", "c6"]
    assert len(runs) == 6


def test_cached_many_with_tags(face, server, admin, prefix):
    cache = face.Cache(server.url, prefix=prefix, seed=12)
    runs = []

    def body(ids):
        runs.append(list(ids))
        return {i: f"{i}-{len(runs)}" for i in ids}
    if face.aio:
        async def items(ids):
            return body(ids)
    else:
        def items(ids):
            return body(ids)
    items = cache.cached_many(ttl=60, key="item:{}", tags=["items"])(items)
    assert face.run(items([1, 2])) == {1: "1-1", 2: "2-1"}
    assert face.run(items([1, 2])) == {1: "1-1", 2: "2-1"}
    face.run(cache.invalidate_tags(["items"]))
    assert face.run(items([1, 2])) == {1: "1-2", 2: "2-2"}
    assert len(runs) == 2
    with pytest.raises(TypeError):
        cache.cached_many(ttl=60, key="item:{}", tags=lambda ids: ["x"])


def _reads(admin):
    """The reads the server ran (a read script's own GETs not counted apart:
    EVALSHA_RO is one)."""
    st = admin.info("commandstats")
    return {c: st.get(f"cmdstat_{c}", {}).get("calls", 0)
            for c in ("get", "mget", "hmget", "evalsha_ro")}


def test_namespace_hits_read_the_namespace_with_each_entry(face, server, admin, prefix):
    """Without a near cache, a namespace Cache's hit reads the namespace's
    version with its entry (standalone Redis: one command), so get_many's
    hits are one MGET of the entries and the namespace on the sync face (the
    C batch), one read per key on xfetch.aio (its calls pipelined), and no
    GET of the namespace apart; a get and a tagged get_or_compute hit are one
    command each."""
    cache = face.Cache(server.url, prefix=prefix, seed=11, namespace_tag=True)
    keys = [f"k{i}" for i in range(8)]
    for _ in range(2):  # loads, then hits (the connection's clock learnt)
        got = face.run(cache.get_many(keys, face.loader(lambda k: f"v{k}"), ttl=60))
        assert got == {k: f"v{k}" for k in keys}
    face.run(cache.get_or_compute("t", face.loader(lambda: "tv"), ttl=60, tags=["a", "b"]))
    admin.config_resetstat()
    got = face.run(cache.get_many(keys, face.loader(lambda k: "loaded"), ttl=60))
    assert got == {k: f"v{k}" for k in keys}, "hits"
    reads = _reads(admin)
    # sync: one MGET; or, where the connection's clock estimate aged past use
    # (1 s: a stall of the busy machine), each read the read script with the
    # namespace's key (read_many takes entries only): one per key
    assert reads["get"] == 0, reads
    assert sum(reads.values()) == len(keys) if face.aio else (
        sum(reads.values()) == 1 or reads["evalsha_ro"] == sum(reads.values()) == len(keys)), \
        reads
    admin.config_resetstat()
    assert face.run(cache.get("k0")) == "vk0"
    assert face.run(cache.get_or_compute("t", face.loader(lambda: "x"), ttl=60,
                                         tags=["a", "b"])) == "tv"
    reads = _reads(admin)
    assert reads["get"] == 0 and sum(reads.values()) == 2, reads


def test_a_tagged_set_reads_its_versions_in_one_mget(face, server, admin, prefix):
    """Without a near cache, on standalone Redis, set(tags=) reads every
    version of its tags (the namespace's too) with one MGET before its write,
    not one GET per tag."""
    cache = face.Cache(server.url, prefix=prefix, seed=12, namespace_tag=True)
    tags = ["sa", "sb", "sc"]
    assert face.run(cache.set("k", "first", ttl=60, tags=tags)) is True  # the tags' keys made
    admin.config_resetstat()
    for _ in range(3):
        assert face.run(cache.set("k", "written", ttl=60, tags=tags)) is True
    reads = _reads(admin)
    assert reads["get"] == 0 and reads["mget"] == 3, reads
    face.run(cache.invalidate_tags(["sb"]))
    assert face.run(cache.fetch("k", face.loader(lambda: "loaded"), ttl=60,
                                tags=tags)) == ("loaded", "loader")


@pytest.mark.parametrize("never_stale", [False, True])
def test_an_invalidated_entry_is_stale_from_the_invalidation(face, server, admin, prefix,
                                                             never_stale):
    """After an invalidation, an entry of the tag is a value that expired
    then: a caller that finds another one reloading it gets it as "stale"
    within stale (not waiting), a failed load within stale_if_error;
    tags_never_stale=True gives it in no case."""
    cache = face.Cache(server.url, prefix=prefix, seed=11)
    other = xfetch.Cache(server.url, prefix=prefix)  # another process, as it were
    policy = dict(ttl=3600, tags=["t"], stale=3600, stale_if_error=3600, wait=0,
                  on_wait_timeout="fail", tags_never_stale=never_stale)
    try:
        assert face.run(cache.fetch("k", face.loader(lambda: "v1"), **policy)) == \
            ("v1", "loader")
        other.invalidate_tags(["t"])
        loading, release = threading.Event(), threading.Event()

        def held():
            loading.set()
            release.wait(30)
            return "v2"
        reload = {}
        t = threading.Thread(target=lambda: reload.update(
            got=other.fetch("k", held, **policy)))
        t.start()
        try:
            assert loading.wait(30)
            if never_stale:
                with pytest.raises(xfetch.TimeoutError):
                    face.run(cache.fetch("k", face.loader(lambda: "mine"), **policy))
            else:
                got = face.run(cache.fetch("k", face.loader(lambda: "mine"), **policy))
                assert got == ("v1", "stale"), "served stale while another caller reloads"
        finally:
            release.set()
            t.join()
        assert reload["got"] == ("v2", "loader")

        other.invalidate_tags(["t"])

        def failing():
            raise RuntimeError("the source is down")
        if never_stale:
            with pytest.raises(RuntimeError):
                face.run(cache.fetch("k", face.loader(failing), **policy))
        else:
            assert face.run(cache.fetch("k", face.loader(failing), **policy)) == \
                ("v2", "stale"), "a failed load: the invalidated value, stale"
    finally:
        other.close()


def test_tags_never_stale_must_be_a_bool(face, server, prefix):
    cache = face.Cache(server.url, prefix=prefix)
    with pytest.raises(TypeError, match="tags_never_stale"):
        face.run(cache.get_or_compute("k", face.loader(lambda: 1), ttl=60,
                                      tags_never_stale=1))
