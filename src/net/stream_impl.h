/* Between stream.c (sockets) and stream_tls.c (OpenSSL): not for callers. */
#ifndef XF_STREAM_IMPL_H
#define XF_STREAM_IMPL_H

#include "stream.h"

/* Sets s->err and s->errstr (printf-style), marks s failed: XF__IO_FAIL. */
xf__io xf__stream_fail(xf__stream *s, xf__stream_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Keeps the first bytes the server sent, for "not speaking TLS" messages. */
void xf__stream_note(xf__stream *s, const void *data, size_t n);

/* Connects to s->addr, else each next address (s->addrs resolved). */
xf__io xf__stream_try_addresses(xf__stream *s);

/* ---- stream_resolve.c ---- */
struct addrinfo;
/* getaddrinfo after the test hook's delay. */
int xf__stream_getaddrinfo(const char *host, const char *service,
                           const struct addrinfo *hints, struct addrinfo **res);
/* Resolves host on a resolver thread (AGAIN: RESOLVING), or here when no
 * thread starts (then connects: DONE, AGAIN or FAIL). */
xf__io xf__stream_resolve_start(xf__stream *s, const char *host, const char *service,
                                const struct addrinfo *hints);
/* RESOLVING: AGAIN until the answer is in, then connects to it. */
xf__io xf__stream_resolve_step(xf__stream *s);
/* Fails s with "cannot resolve host: why". */
xf__io xf__stream_resolve_failed(xf__stream *s, const char *host, int rc, int sys_errno);
/* Lets go of a resolution under way (s->fd, its pipe, is closed by the caller). */
void xf__stream_resolve_drop(xf__stream *s);

/* Starts TLS on the connected s->fd and runs the handshake's first step. */
xf__io xf__stream_tls_start(xf__stream *s);
/* One more handshake step once s->fd is ready for s->want. */
xf__io xf__stream_tls_handshake(xf__stream *s);
xf__io xf__stream_tls_write(xf__stream *s, const void *buf, size_t len, size_t *put);
xf__io xf__stream_tls_read(xf__stream *s, void *buf, size_t cap, size_t *got);
/* Frees s->ssl; with notify, sends close_notify first (best effort). */
void xf__stream_tls_end(xf__stream *s, int notify);

#endif
