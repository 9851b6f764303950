"""rediss:// on xfetch.Cache against a real redis-server --tls-port, with a
throwaway CA and certificates made by the openssl CLI."""
import os
import shutil
import socket
import subprocess
import time

import pytest

import xfetch
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


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        port = _free_port()
        servers.append(subprocess.Popen(
            ["redis-server", "--port", "0", "--tls-port", str(port), "--tls-cert-file",
             f"{d}/server.crt", "--tls-key-file", f"{d}/server.key", "--tls-ca-cert-file",
             f"{d}/ca.crt", "--tls-auth-clients", auth, "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        ports[kind] = port
    for port in ports.values():
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.1).close()
                break
            except OSError:
                time.sleep(0.02)
    yield d, ports
    for s in servers:
        s.terminate()
        s.wait()


def test_rediss_miss_then_hit(tls):
    d, ports = tls
    cache = xfetch.Cache(f"rediss://127.0.0.1:{ports['tls']}/0?ssl_ca_certs={d}/ca.crt",
                         prefix="pytls:")
    key = f"k{time.time_ns()}"
    calls = []
    assert cache.get_or_compute(key, lambda: calls.append(1) or b"v", ttl=60) == b"v"
    assert cache.get_or_compute(key, lambda: calls.append(1) or b"w", ttl=60) == b"v"
    assert calls == [1]


def test_keywords_and_mutual_tls(tls):
    d, ports = tls
    cache = xfetch.Cache(f"rediss://127.0.0.1:{ports['mtls']}", ssl_ca_certs=f"{d}/ca.crt",
                         ssl_certfile=f"{d}/client.crt", ssl_keyfile=f"{d}/client.key")
    assert cache.get_or_compute(f"m{time.time_ns()}", lambda: b"x", ttl=60) == b"x"


def test_mutual_tls_without_a_certificate_is_a_tls_error(tls):
    d, ports = tls
    with pytest.raises(xfetch.TLSError, match="client certificate"):
        xfetch.Cache(f"rediss://127.0.0.1:{ports['mtls']}", ssl_ca_certs=f"{d}/ca.crt")


def test_a_wrong_ca_raises_from_the_constructor_naming_the_reason(tls):
    d, ports = tls
    with pytest.raises(xfetch.ConnectionError, match="certificate not trusted") as e:
        xfetch.Cache(f"rediss://127.0.0.1:{ports['tls']}", ssl_ca_certs=f"{d}/other-ca.crt")
    assert isinstance(e.value, xfetch.TLSError)


def test_lazy_connect_raises_on_every_call_never_fails_open(tls):
    d, ports = tls
    cache = xfetch.Cache(f"rediss://127.0.0.1:{ports['tls']}", ssl_ca_certs=f"{d}/other-ca.crt",
                         lazy_connect=True)
    calls = []
    for _ in range(2):
        with pytest.raises(xfetch.TLSError, match="not trusted"):
            cache.get_or_compute("k", lambda: calls.append(1) or b"v", ttl=60)
    assert calls == []


def test_plain_redis_to_a_tls_port_errors_quickly(tls):
    _, ports = tls
    t0 = time.monotonic()
    with pytest.raises(xfetch.ConnectionError, match="rediss://"):
        xfetch.Cache(f"redis://127.0.0.1:{ports['tls']}")
    assert time.monotonic() - t0 < 1.0


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


def test_the_asyncio_face_refuses_tls_clearly():
    import xfetch.aio
    with pytest.raises(ValueError, match="TLS"):
        xfetch.aio.Cache("rediss://127.0.0.1:1")
