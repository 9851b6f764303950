"""A server that needs a password, reached without one: AuthError at
construction (unless lazy_connect) and from every call, on both faces; the
loader never runs."""
import pytest

import xfetch
from conftest import RedisServer


@pytest.fixture
def locked(tmp_path):
    srv = RedisServer(str(tmp_path))
    srv.admin.config_set("requirepass", "pw")  # the admin connection stays logged in
    yield srv
    srv.stop()


def test_no_password_is_an_auth_error_for_every_call(locked, face):
    url = f"redis://127.0.0.1:{locked.port}/0"
    with pytest.raises(xfetch.AuthError, match="NOAUTH"):
        face.Cache(url)
    cache = face.Cache(url, lazy_connect=True)
    loads = []

    def loader():
        loads.append(1)
        return b"v"

    calls = {
        "get_or_compute": lambda: cache.get_or_compute("k", loader, ttl=60),
        "get": lambda: cache.get("k"),
        "set": lambda: cache.set("k", b"v", ttl=60),
        "delete": lambda: cache.delete("k"),
    }
    outcomes = {}
    for name, call in calls.items():
        try:
            face.run(call())
            outcomes[name] = "served"
        except xfetch.Error as e:
            outcomes[name] = type(e).__name__
    assert outcomes == {name: "AuthError" for name in calls}
    assert loads == []
