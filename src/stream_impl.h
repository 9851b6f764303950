/* Between stream.c (sockets) and stream_tls.c (OpenSSL): not for callers. */
#ifndef XF_STREAM_IMPL_H
#define XF_STREAM_IMPL_H

#include "stream.h"

/* Sets s->err and s->errstr (printf-style), marks s failed: XF__IO_FAIL. */
xf__io xf__stream_fail(xf__stream *s, xf__stream_err err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Keeps the first bytes the server sent, for "not speaking TLS" messages. */
void xf__stream_note(xf__stream *s, const void *data, size_t n);

/* Starts TLS on the connected s->fd and runs the handshake's first step. */
xf__io xf__stream_tls_start(xf__stream *s);
/* One more handshake step once s->fd is ready for s->want. */
xf__io xf__stream_tls_handshake(xf__stream *s);
xf__io xf__stream_tls_write(xf__stream *s, const void *buf, size_t len, size_t *put);
xf__io xf__stream_tls_read(xf__stream *s, void *buf, size_t cap, size_t *got);
/* Frees s->ssl; with notify, sends close_notify first (best effort). */
void xf__stream_tls_end(xf__stream *s, int notify);

#endif
