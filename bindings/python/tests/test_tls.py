"""rediss:// on both faces (xfetch.Cache and xfetch.aio.Cache: the `face`
fixture) against a real redis-server --tls-port, with a throwaway CA and
certificates made by the openssl CLI."""
import os
import shutil
import socket
import subprocess
import time

import pytest

import xfetch
import xfetch.testing
from xfetch._url import parse_url, tls_options

pytestmark = pytest.mark.skipif(not shutil.which("openssl") or not shutil.which("redis-server"),
                                reason="needs openssl and redis-server")


def _run(*args, cwd):
    subprocess.run(args, cwd=cwd, check=True, capture_output=True)


def _cert(d, name, ca, san, cn):
    _run("openssl", "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
         "-subj", f"/CN={cn}", "-out", f"{name}.csr", cwd=d)
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _run("openssl", "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey",
         f"{ca}.key", "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext",
         "-out", f"{name}.crt", cwd=d)


def _tls_server(sdir, certs, auth):
    """A redis-server with a TLS port on certs' server certificate; another
    port when the one drawn was taken meanwhile (the server exits)."""
    os.mkdir(sdir)
    for _ in range(5):
        port = xfetch.testing.free_port()
        try:
            srv = xfetch.testing.RedisServer(sdir, extra_args=(
                "--bind", "127.0.0.1", "127.0.0.2",  # 127.0.0.2: a name the certificate lacks
                "--tls-port", str(port), "--tls-cert-file", f"{certs}/server.crt",
                "--tls-key-file", f"{certs}/server.key", "--tls-ca-cert-file",
                f"{certs}/ca.crt", "--tls-auth-clients", auth))
        except RuntimeError:
            continue
        srv.tls_port = port
        return srv
    raise RuntimeError("no TLS redis-server started (5 ports tried)")


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("tls"))
    for ca in ("ca", "other-ca"):
        _run("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
             "-subj", f"/CN=xfetch {ca}", "-days", "2", "-out", f"{ca}.crt", cwd=d)
    _cert(d, "server", "ca", "DNS:localhost,IP:127.0.0.1", "localhost")
    _cert(d, "client", "ca", "DNS:client", "client")
    servers, ports = [], {}
    for kind, auth in (("tls", "no"), ("mtls", "yes")):
        servers.append(_tls_server(os.path.join(d, kind), d, auth))
        ports[kind] = servers[-1].tls_port
    yield d, ports
    for s in servers:
        s.stop()


def test_rediss_miss_then_hit(tls, face):
    d, ports = tls
    cache = face.Cache(f"rediss://127.0.0.1:{ports['tls']}/0?ssl_ca_certs={d}/ca.crt",
                       prefix="pytls:")
    key = f"k{time.time_ns()}"
    calls = []
    assert face.run(cache.get_or_compute(key, lambda: calls.append(1) or b"v", ttl=60)) == b"v"
    assert face.run(cache.get_or_compute(key, lambda: calls.append(1) or b"w", ttl=60)) == b"v"
    assert calls == [1]
    assert face.run(cache.get(key)) == b"v"
    assert cache.stats()["hits"] >= 1


def test_values_larger_than_a_tls_record_and_a_read(tls, face):
    d, ports = tls  # a reply across TLS records (16 KiB) and reads (the aio link's 256 KiB)
    cache = face.Cache(f"rediss://127.0.0.1:{ports['tls']}/0?ssl_ca_certs={d}/ca.crt",
                       prefix=f"pytlsbig{time.time_ns()}:", serializer="bytes")
    for size in (20_000, 300_000):
        value = os.urandom(size)
        assert face.run(cache.set(f"k{size}", value, ttl=60)) is True
        assert face.run(cache.get(f"k{size}")) == value


def test_a_host_name_is_verified_and_sent(tls, face):
    d, ports = tls  # the certificate names DNS:localhost and IP:127.0.0.1
    cache = face.Cache(f"rediss://localhost:{ports['tls']}", ssl_ca_certs=f"{d}/ca.crt")
    assert face.run(cache.get_or_compute(f"h{time.time_ns()}", lambda: b"x", ttl=60)) == b"x"


@pytest.mark.parametrize("lazy", [False, True])
def test_a_wrong_host_name_is_a_tls_error(tls, face, lazy):
    d, ports = tls  # 127.0.0.2 reaches the same server; the certificate is not for it
    url = f"rediss://127.0.0.2:{ports['tls']}"
    with pytest.raises(xfetch.TLSError, match="host name mismatch"):
        cache = face.Cache(url, ssl_ca_certs=f"{d}/ca.crt", lazy_connect=lazy)
        face.run(cache.get_or_compute("k", lambda: b"v", ttl=60))
    # ssl_cert_reqs="none" trusts any certificate for any name (insecure)
    cache = face.Cache(url, ssl_cert_reqs="none", lazy_connect=lazy)
    assert face.run(cache.get_or_compute(f"n{time.time_ns()}", lambda: b"y", ttl=60)) == b"y"


@pytest.mark.parametrize("lazy", [False, True])
def test_keywords_and_mutual_tls(tls, face, lazy):
    d, ports = tls
    cache = face.Cache(f"rediss://127.0.0.1:{ports['mtls']}", ssl_ca_certs=f"{d}/ca.crt",
                       ssl_certfile=f"{d}/client.crt", ssl_keyfile=f"{d}/client.key",
                       lazy_connect=lazy)
    assert face.run(cache.get_or_compute(f"m{time.time_ns()}", lambda: b"x", ttl=60)) == b"x"


@pytest.mark.parametrize("lazy", [False, True])
def test_mutual_tls_without_a_certificate_is_a_tls_error(tls, face, lazy):
    d, ports = tls
    calls = []
    cache = None
    for _ in range(2 if lazy else 1):
        with pytest.raises(xfetch.TLSError, match="client certificate"):
            cache = cache or face.Cache(f"rediss://127.0.0.1:{ports['mtls']}",
                                        ssl_ca_certs=f"{d}/ca.crt", lazy_connect=lazy)
            face.run(cache.get_or_compute("k", lambda: calls.append(1) or b"v", ttl=60))
    assert calls == []


def test_a_wrong_ca_raises_from_the_constructor_naming_the_reason(tls, face):
    d, ports = tls
    with pytest.raises(xfetch.ConnectionError, match="certificate not trusted") as e:
        face.Cache(f"rediss://127.0.0.1:{ports['tls']}", ssl_ca_certs=f"{d}/other-ca.crt")
    assert isinstance(e.value, xfetch.TLSError)


@pytest.mark.parametrize("breaker", [1.0, 0])
def test_lazy_connect_raises_on_every_call_never_fails_open(tls, face, breaker):
    d, ports = tls
    cache = face.Cache(f"rediss://127.0.0.1:{ports['tls']}", ssl_ca_certs=f"{d}/other-ca.crt",
                       lazy_connect=True, breaker=breaker)
    calls = []
    for call in ("get_or_compute", "get_or_compute", "get", "set", "delete"):
        args = {"get_or_compute": ("k", lambda: calls.append(1) or b"v"), "get": ("k",),
                "set": ("k", b"v"), "delete": ("k",)}[call]
        kw = {"ttl": 60} if call in ("get_or_compute", "set") else {}
        with pytest.raises(xfetch.TLSError, match="not trusted"):
            face.run(getattr(cache, call)(*args, **kw))
    assert calls == []


def test_plain_redis_to_a_tls_port_errors_quickly(tls, face):
    _, ports = tls
    t0 = time.monotonic()
    with pytest.raises(xfetch.ConnectionError, match="rediss://"):
        face.Cache(f"redis://127.0.0.1:{ports['tls']}", timeout=5.0, connect_timeout=5.0)
    # quickly: not by a 5 s timeout; half of it leaves a busy machine room
    assert time.monotonic() - t0 < 2.5


def test_tls_to_a_plain_port_is_a_tls_error(server, face):
    t0 = time.monotonic()  # redis-server waits for the end of a line
    with pytest.raises(xfetch.TLSError, match="timed out.*plain, non-TLS port"):
        cache = face.Cache(f"rediss://127.0.0.1:{server.port}", ssl_cert_reqs="none",
                           lazy_connect=True, connect_timeout=0.3)
        face.run(cache.get_or_compute("k", lambda: b"v", ttl=60))
    assert time.monotonic() - t0 < 1.5


def test_url_parameters():
    f = parse_url("rediss://h:7000/2?ssl_cert_reqs=none&ssl_ca_certs=/etc/hostname")
    assert f["tls"] and f["db"] == 2 and f["port"] == 7000
    t = tls_options(f)
    assert t["no_verify"] == 1 and t["ca_file"] == "/etc/hostname"
    assert tls_options(parse_url("redis://h")) is None
    with pytest.raises(ValueError, match="rediss://"):
        tls_options(parse_url("redis://h?ssl_ca_certs=/x"))
    with pytest.raises(ValueError, match="ssl_cert_reqs"):
        tls_options(parse_url("rediss://h?ssl_cert_reqs=maybe"))
    with pytest.raises(ValueError, match="cannot be read"):
        tls_options(parse_url("rediss://h?ssl_ca_certs=/nonexistent.pem"))


def _raw_command(port, ca, *args):
    """One command on a fresh TLS socket of our own (another client)."""
    import ssl
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), 5) as sock:
        with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as s:
            s.sendall(f"*{len(args)}\r\n".encode()
                      + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in args))
            return s.recv(4096)


def test_near_cache_over_rediss(tls, face):
    d, ports = tls
    url = f"rediss://127.0.0.1:{ports['tls']}/0?ssl_ca_certs={d}/ca.crt"
    prefix = f"pytlsnear{time.time_ns()}:"
    near = face.Cache(url, prefix=prefix, near_cache_bytes=1 << 20)
    other = xfetch.Cache(url, prefix=prefix)  # another process's view

    def until(want, near_hit):
        before, deadline = near.stats()["near_hits"], time.monotonic() + 5
        while True:
            got = face.run(near.get("hot"))
            if got == want and (not near_hit or near.stats()["near_hits"] > before):
                return
            assert time.monotonic() < deadline, f"never {want!r} (near hit: {near_hit})"
            time.sleep(0.001)

    try:
        other.set("hot", b"v1", ttl=60)
        until(b"v1", near_hit=True)
        other.set("hot", b"v2", ttl=60)  # invalidated over the TLS connection
        until(b"v2", near_hit=False)
        until(b"v2", near_hit=True)
        assert b":" in _raw_command(ports["tls"], f"{d}/ca.crt", "CLIENT", "KILL", "TYPE",
                                    "pubsub")
        other.set("hot", b"v3", ttl=60)  # nobody is told: the entries went with it
        until(b"v3", near_hit=False)
        until(b"v3", near_hit=True)  # tracked again under a new connection
    finally:
        other.close()


def _connections_received(port, ca):
    """The server's total_connections_received (counting this query's own)."""
    info = _raw_command(port, ca, "INFO", "stats").decode()
    return int(info.split("total_connections_received:")[1].split()[0])


def test_a_fork_child_leaves_the_parent_s_tls_connection_alone(tls, face):
    """A child of a fork that uses the parent's Cache opens connections of
    its own: it never writes on the parent's (over TLS a close_notify would
    make the server drop it; on the sync face the child closes the parent's
    idle clients) nor touches the parent's event loop. The parent's next call
    then goes on its connection: the server receives one connection across
    it, the count's own query; and its loop still watches that connection:
    a lost registration shows as a call answered only by the watchdog, after
    the 30 s command timeout (20 s with the default), against a bound of 10 s
    for a loopback round trip on a busy machine."""
    d, ports = tls
    port, ca = ports["tls"], f"{d}/ca.crt"
    cache = face.Cache(f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={ca}",
                       prefix=f"pytlsfork{time.time_ns()}:", timeout=30)
    load = face.loader(lambda: b"v")
    assert face.run(cache.get_or_compute("k", load, ttl=60)) == b"v"  # connected
    before = _connections_received(port, ca)
    pid = os.fork()
    if pid == 0:
        ok = False
        try:  # the child's own loop (a loop is not shared with a fork's child)
            run = __import__("asyncio").run if face.aio else (lambda x: x)
            ok = (run(cache.get_or_compute("k", load, ttl=60)) == b"v"
                  and run(cache.get("k")) == b"v")
        finally:
            os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    between = _connections_received(port, ca)
    t0 = time.monotonic()
    assert face.run(cache.get("k")) == b"v"
    assert time.monotonic() - t0 < 10
    assert between - before >= 2  # the child's own, and the count's query
    assert _connections_received(port, ca) - between == 1
