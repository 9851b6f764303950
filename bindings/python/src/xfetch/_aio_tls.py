"""xfetch.aio over TLS (rediss://): Python's ssl module on the link's own
non-blocking socket, through memory BIOs (ssl.SSLObject), so the link
(_aio_link) keeps its reader callback and its one-recv fast path. The rules
are the C side's (src/net/tls.c): TLS 1.2 minimum; the certificate and the
host name verified unless ssl_cert_reqs="none" (the name checked is the host
connected to: an IP address against the certificate's IP SANs, a name
against its DNS names, sent as SNI); the CA file and/or directory, or the
system store; an optional client certificate and key. A failure is
xfetch.TLSError naming the reason, worded as the C side words it: a
misconfiguration, raised by the call (never served fail-open)."""
from __future__ import annotations

import asyncio
import ssl

from ._errors import TLSError
from ._native import lib

# Alerts a server sends when it refuses the client's certificate (stream_tls.c).
_REFUSES_CLIENT = ("CERTIFICATE_REQUIRED", "UNKNOWN_CA", "BAD_CERTIFICATE",
                   "HANDSHAKE_FAILURE", "CERTIFICATE_UNKNOWN")
# X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH
_NAME_MISMATCH = (62, 64)


def tls_error(message):
    return TLSError(lib.XF_ETLS, message)


def context(tls):
    """An ssl.SSLContext for tls (_url.tls_options' dict); TLSError when a
    file cannot be loaded."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if tls["no_verify"]:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    try:
        if tls["ca_file"] or tls["ca_dir"]:
            ctx.load_verify_locations(cafile=tls["ca_file"], capath=tls["ca_dir"])
        elif not tls["no_verify"]:
            ctx.set_default_verify_paths()
        if tls["cert_file"]:
            ctx.load_cert_chain(tls["cert_file"], tls["key_file"])
    except (ssl.SSLError, OSError) as e:
        raise tls_error(f"TLS: cannot load the certificates or key: {e}") from None
    return ctx


def _peer(fields):
    host = fields["host"]
    return f"[{host}]:{fields['port']}" if ":" in host else f"{host}:{fields['port']}"


def _shown(data):
    return "".join(chr(c) if 32 <= c < 127 else f"\\x{c:02x}" for c in data[:16])


async def handshake(loop, sock, ctx, fields, budget, has_cert):
    """Runs the TLS handshake on sock (connected, non-blocking) within budget
    seconds; returns the TLS session over it (has_cert: a client certificate
    is configured), or raises TLSError."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname=fields["host"])
    peer, first = _peer(fields), b""

    async def run():
        nonlocal first
        while True:
            try:
                obj.do_handshake()
                done = True
            except ssl.SSLWantReadError:
                done = False
            out = outgoing.read()
            if out:
                await loop.sock_sendall(sock, out)
            if done:
                return
            data = await loop.sock_recv(sock, 65536)
            if not data:
                raise ConnectionResetError("closed")
            first = first or data[:16]
            incoming.write(data)
    try:
        await asyncio.wait_for(run(), budget)
    except asyncio.TimeoutError:
        raise tls_error(f"TLS handshake with {peer} timed out after {round(budget * 1000)} ms"
                        + ("" if first else " (the server sent nothing back: is it a plain, "
                           "non-TLS port?)")) from None
    except ssl.SSLCertVerificationError as e:
        if e.verify_code in _NAME_MISMATCH:
            raise tls_error(f"TLS to {peer}: host name mismatch: {e.verify_message}, wanted "
                            f"{fields['host']}") from None
        raise tls_error(f"TLS to {peer}: certificate not trusted: {e.verify_message}") from None
    except (ssl.SSLError, OSError) as e:
        if first and not 20 <= first[0] <= 23:  # not a TLS record type
            raise tls_error(f"TLS to {peer}: the server is not speaking TLS (it answered "
                            f"\"{_shown(first)}\")") from None
        if isinstance(e, ssl.SSLError):
            raise tls_error(f"TLS handshake with {peer} failed: {e.reason or e}") from None
        raise tls_error(f"TLS to {peer}: the server closed the connection during the "
                        f"handshake") from None
    return _TLS(sock, obj, incoming, outgoing, peer, has_cert)


class _TLS:
    """A socket's bytes through an SSLObject: wrap() encrypts what goes out,
    recv() decrypts what comes in. A server refusing the client's
    certificate (TLS 1.3 says so after the handshake, on the first read)
    raises TLSError."""

    def __init__(self, sock, obj, incoming, outgoing, peer, has_cert):
        self.sock, self.obj, self.incoming, self.outgoing = sock, obj, incoming, outgoing
        self.peer, self.has_cert, self.got_data = peer, has_cert, False

    def wrap(self, data):
        self.obj.write(data)
        return self.outgoing.read()

    def closed_early(self):
        """The server closed the connection after the handshake, before any
        reply: with TLS 1.3 this is how a server refuses a
        client certificate, or the lack of one (its alert lost in the reset),
        so a TLSError, not a lost connection to fail open for."""
        if self.has_cert:
            return tls_error(f"TLS to {self.peer}: the server closed the connection right "
                             f"after the handshake: it refused the client certificate?")
        return tls_error(f"TLS to {self.peer}: the server closed the connection right after "
                         f"the handshake: it requires a client certificate and none is "
                         f"configured (mutual TLS)?")

    def recv(self, n):
        raw = self.sock.recv(n)  # BlockingIOError: nothing yet
        if not raw:
            return raw
        self.incoming.write(raw)
        out = []
        try:
            while True:
                chunk = self.obj.read(n)
                if not chunk:
                    break
                out.append(chunk)
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            if not out:
                return b""
        except ssl.SSLError as e:
            if any(a in (e.reason or "") for a in _REFUSES_CLIENT):
                if not self.has_cert and not self.got_data:
                    raise tls_error(f"TLS to {self.peer}: the server requires a client "
                                    f"certificate and none is configured (mutual TLS): "
                                    f"{e.reason}") from None
                raise tls_error(f"TLS to {self.peer}: the server refused the client "
                                f"certificate: {e.reason}") from None
            raise
        pending = self.outgoing.read()  # a key update, an alert
        if pending:
            self.sock.send(pending)
        if not out:
            raise BlockingIOError  # a record without application bytes (tickets)
        self.got_data = True
        return b"".join(out)
