"""URLs: parsing, Unix sockets, ACL users, databases."""
from urllib.parse import quote

import pytest

import xfetch
from conftest import ACL_PASS, ACL_USER, peek, stored
from xfetch._url import parse_url


@pytest.mark.parametrize("url,expected", [
    ("redis://localhost", dict(host="localhost", port=6379, db=0)),
    ("redis://h:7000/3", dict(host="h", port=7000, db=3)),
    ("redis://:pw@h", dict(host="h", username=None, password="pw")),
    ("redis://u:p%40ss@h:1/2", dict(username="u", password="p@ss", db=2)),
    ("unix:///tmp/r.sock", dict(unix_path="/tmp/r.sock", host=None, db=0)),
    ("unix:///tmp/r.sock?db=4&password=x", dict(unix_path="/tmp/r.sock", db=4, password="x")),
])
def test_parse_url(url, expected):
    got = parse_url(url)
    assert {k: got[k] for k in expected} == expected


@pytest.mark.parametrize("url,exc", [("http://h", ValueError),
                                     ("redis://h/x", ValueError), ("redis://h:99999", ValueError),
                                     ("redis://", ValueError), ("unix://", ValueError),
                                     ("redis://u@h", ValueError),
                                     ("redis://h?foo=1", ValueError), (b"redis://h", TypeError)])
def test_bad_urls(url, exc):
    with pytest.raises(exc):
        xfetch.Cache(url)


def test_unix_socket_url(server, admin, counter):
    c = xfetch.Cache(f"unix://{server.unix_path}", prefix="u:")
    assert c.fetch("k", counter(b"via unix"), ttl=60) == (b"via unix", "loader")
    assert stored(peek(admin, "u:k").v) == b"via unix"
    assert any(cl.get("flags") == "U" or cl["addr"].startswith("/")
               or "unix" in cl.get("laddr", "") for cl in admin.client_list())
    c.close()


def test_acl_user_password_url(server, admin, counter):
    url = f"redis://{ACL_USER}:{quote(ACL_PASS, safe='')}@127.0.0.1:{server.port}/2"
    c = xfetch.Cache(url)
    assert c.get_or_compute("k", counter(b"acl"), ttl=60) == b"acl"
    assert repr(c) == f"<xfetch.Cache redis://127.0.0.1:{server.port}/2 prefix=''>"
    users = {cl["user"] for cl in admin.client_list()}
    assert ACL_USER in users
    admin.execute_command("SELECT", 2)
    assert stored(peek(admin, "k").v) == b"acl"  # db 2 from the URL path
    admin.execute_command("SELECT", 0)
    c.close()


def test_wrong_password_raises_auth_error(server):
    with pytest.raises(xfetch.AuthError) as info:
        xfetch.Cache(f"redis://{ACL_USER}:wrong@127.0.0.1:{server.port}/0")
    assert info.value.code == xfetch.lib.XF_EAUTH == -11
    assert isinstance(info.value, PermissionError)
    assert "AUTH: " in info.value.message  # the server's own words


def test_bad_db_raises_invalid_argument(server):
    with pytest.raises(xfetch.InvalidArgumentError, match="SELECT: .*DB index is out of range"):
        xfetch.Cache(f"redis://127.0.0.1:{server.port}/999")


def test_seed_lists_and_cluster_parameters():
    f = parse_url("redis://a:7000,b,[::1]:7002/0?cluster=on&replica_reads=yes")
    assert f["host"] == "a:7000,b:6379,[::1]:7002"
    assert f["cluster"] == 1 and f["read_from_replicas"] == 1
    assert parse_url("redis://h")["cluster"] == 0
    assert parse_url("redis://h?cluster=off")["cluster"] == 2
    for bad in ("redis://a:7000,:7001", "redis://a,b:99999", "redis://h?cluster=maybe",
                "redis://h?replica_reads=1"):
        with pytest.raises(ValueError):
            parse_url(bad)
