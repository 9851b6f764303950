/* The project's own byte transport : one non-blocking
 * TCP or Unix-socket stream to a Redis server, plain or TLS over OpenSSL,
 * as a small state machine that never waits by itself:
 *
 *   open_tcp / open_unix -> [RESOLVING] -> CONNECTING -> (TLS) HANDSHAKING
 *                        -> OPEN -> closed
 *
 * Every step returns XF__IO_DONE, XF__IO_AGAIN (s->want says whether the
 * descriptor must become readable or writable first) or XF__IO_FAIL (s->err,
 * s->errstr say what failed; xf__stream_code gives the public code). It does
 * no RESP: bytes in, bytes out.
 *
 * Both transports run over it:
 *  - The blocking connection (conn.c) keeps a stream and a redisReader:
 *    xf__stream_connect_blocking with the connect timeout, then the setup; a
 *    command is xf__stream_write of the encoded request (one SSL_write under
 *    TLS), then xf__stream_read_sliced into redisReaderFeed until the reply
 *    is whole, under the command timeout (stream_wait.c: the one place that
 *    polls, in slices for options.interrupt).
 *  - The event-loop connection (async_wire.c) has the user's loop watch s->fd
 *    (the adapters' watch hook: uv_poll_t, a libevent event) for s->want,
 *    calls xf__stream_continue until OPEN, then xf__stream_write with its
 *    output buffer and xf__stream_read until the socket is drained and
 *    xf__stream_pending is 0 (TLS may hold decrypted bytes the descriptor no
 *    longer signals), feeding a redisReader and matching replies to its FIFO
 *    of callbacks. Its watchdog calls xf__stream_timeout, which words the
 *    failure for the stage.
 *  - Both keep one xf__tls per client (tls.h); OpenSSL reads ahead, so a
 *    reply's record costs one recv.
 *
 * A stream is used by one thread at a time and must not move in memory while
 * open (OpenSSL's I/O hooks point at it). */
#ifndef XF_STREAM_H
#define XF_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "tls.h"

typedef enum xf__io { XF__IO_DONE = 0, XF__IO_AGAIN = 1, XF__IO_FAIL = -1 } xf__io;

enum { XF__WANT_READ = 1, XF__WANT_WRITE = 2 };

typedef enum xf__stream_state {
  XF__STREAM_CLOSED = 0,
  XF__STREAM_RESOLVING, /* a host name, on a resolver thread: fd is its pipe */
  XF__STREAM_CONNECTING,
  XF__STREAM_HANDSHAKING,
  XF__STREAM_OPEN,
  XF__STREAM_FAILED /* s->err says why; only xf__stream_close helps */
} xf__stream_state;

/* What failed, finer than the public codes (xf__stream_code maps them;
 * XF__SE_TLS and XF__SE_CERT are XF_ETLS: a misconfiguration, never a
 * server that is down). */
typedef enum xf__stream_err {
  XF__SE_NONE = 0,
  XF__SE_CONFIG,  /* bad arguments (e.g. TLS on a Unix socket without a name): EINVAL */
  XF__SE_NOMEM,   /* ENOMEM */
  XF__SE_CONNECT, /* resolve, refuse, unreachable, connect timeout: ECONNECT */
  XF__SE_TLS,     /* the handshake failed: not TLS, closed, alert, timeout */
  XF__SE_CERT,    /* the server's certificate: not trusted, name mismatch */
  XF__SE_IO,      /* an open stream failed (reset, TLS alert, deadline): EIO */
  XF__SE_CLOSED   /* the server closed an open stream: EIO, worth one reconnect */
} xf__stream_err;

typedef struct xf__resolve xf__resolve;

typedef struct xf__stream {
  int fd; /* -1 when closed */
  xf__stream_state state;
  int want;                /* XF__WANT_* after XF__IO_AGAIN */
  struct ssl_st *ssl;      /* NULL on a plain stream */
  xf__tls *tls;            /* borrowed; NULL = plain */
  xf__resolve *resolving;  /* the resolver thread's job, while RESOLVING */
  struct addrinfo *addrs;  /* the resolved list, while connecting */
  struct addrinfo *addr;   /* the address being tried */
  int64_t started_ms;      /* when open_* was called (monotonic ms) */
  unsigned handshakes;     /* completed TLS handshakes on this stream */
  unsigned fd_gen;         /* one more per descriptor made (the resolver's pipe, a
                              socket per address): an event loop watches one, and
                              a new one may reuse the old one's number */
  unsigned recvs;          /* recv() calls made since open (TLS's too): tests */
  int got_bytes;           /* the server has sent at least one byte */
  unsigned char first[24]; /* the first bytes the server sent (diagnostics) */
  size_t nfirst;
  int peer_eof;     /* the server closed its side (read EOF) */
  int got_data;     /* TLS: application bytes have been read */
  int cert_missing; /* TLS: the server asked for a client certificate, we have none */
  int sys_errno;    /* errno of the last failed socket call */
  char peer[300];   /* "host:port" or the path, for messages */
  char name[256];   /* the name sent as SNI and verified; "" = none */
  xf__stream_err err;
  char errstr[256];
} xf__stream;

/* s as after close: fd -1, no error. Call once before the first open. */
void xf__stream_init(xf__stream *s);

/* Starts a connection to host (a name, an IPv4 or IPv6 address) and port,
 * TLS when tls is not NULL (borrowed: it must outlive the stream). An
 * address is used at once; a name is resolved on a resolver thread
 * (stream_resolve.c: RESOLVING, s->fd the pipe it signals on, want READ),
 * so no caller's thread waits on DNS and the connect deadline covers it
 * (only when no thread can be started is it resolved here). Each address is
 * tried in turn. Returns DONE, AGAIN or FAIL as xf__stream_continue. */
xf__io xf__stream_open_tcp(xf__stream *s, const char *host, int port, xf__tls *tls);

/* The same on a Unix socket. With TLS and verification on, the TLS config's
 * server_name is required (there is no host to check): XF__SE_CONFIG. */
xf__io xf__stream_open_unix(xf__stream *s, const char *path, xf__tls *tls);

/* Non-zero unless s is RESOLVING with the answer still to come. An event
 * loop stops watching s->fd (the pipe) before xf__stream_continue takes a
 * ready answer: the pipe is closed then and s->fd becomes a socket. */
int xf__stream_resolved(const xf__stream *s);

/* Test hook: the resolver sleeps this long before getaddrinfo (a slow DNS
 * server); 0 = none. Read and written with __atomic_*. */
extern unsigned xf__test_resolve_delay_ms;
/* Test hook: resolves names instead of getaddrinfo (its list is freed with
 * freeaddrinfo); NULL = getaddrinfo. Set before any connect. */
struct addrinfo;
extern int (*xf__test_getaddrinfo)(const char *host, const char *service,
                                   const struct addrinfo *hints, struct addrinfo **res);

/* Drives the resolution, the connect and the handshake once s->fd is ready
 * for s->want.
 * DONE when OPEN, AGAIN (wait for s->want), FAIL. Harmless when OPEN. */
xf__io xf__stream_continue(xf__stream *s);

/* Writes up to len bytes: DONE with *put > 0 (maybe fewer than len), AGAIN
 * with *put 0 (wait for s->want, then call again with the same bytes: TLS
 * must be handed the same data after a WANT_*; the buffer may have moved),
 * FAIL. Never raises SIGPIPE. */
xf__io xf__stream_write(xf__stream *s, const void *buf, size_t len, size_t *put);

/* Reads up to cap bytes: DONE with *got > 0, AGAIN with *got 0, FAIL (the
 * server closing the stream is XF__SE_CLOSED). */
xf__io xf__stream_read(xf__stream *s, void *buf, size_t cap, size_t *got);

/* An event loop's deadline passed after ms: fails s with the stage's words
 * ("cannot resolve X: no answer within N ms", "connect to X timed out after N ms", "TLS
 * handshake with X timed out after N ms", "no reply from X within N ms"). */
void xf__stream_timeout(xf__stream *s, int ms);

/* Closes s (NULL-safe), telling a TLS peer (close_notify, best effort, never
 * waiting); s can be opened again. s->handshakes is kept. */
void xf__stream_close(xf__stream *s);

/* In a forked child: frees s without sending a byte on the parent's
 * connection (close_notify would end the parent's TLS session). */
void xf__stream_forget(xf__stream *s);

/* The public code for s->err: XF_OK, XF_EINVAL, XF_ENOMEM, XF_ECONNECT,
 * XF_ETLS, XF_EIO. */
int xf__stream_code(const xf__stream *s);

/* ---- blocking use (stream_wait.c): poll() on s->fd until a deadline ---- */

/* Monotonic milliseconds, the clock of every deadline here (xf__now_ms's). */
int64_t xf__stream_now_ms(void);

/* After open_*: connects and handshakes until deadline_ms. XF_OK, or the
 * code of xf__stream_code with the reason in s->errstr. */
int xf__stream_connect_blocking(xf__stream *s, int64_t deadline_ms);

/* Writes all len bytes by deadline_ms. XF_OK or an error code (s failed). */
int xf__stream_write_all(xf__stream *s, const void *buf, size_t len, int64_t deadline_ms);

/* Reads at least one byte by deadline_ms: XF_OK with *got > 0, or an error
 * code (s failed; a passed deadline is XF_EIO, "no reply ... within N ms"). */
int xf__stream_read_some(xf__stream *s, void *buf, size_t cap, size_t *got,
                         int64_t deadline_ms);

/* xf__stream_read_some for a connection's replies, until *deadline_ms
 * (0: budget_ms from now, set when a wait goes on, so a reply that comes
 * in time costs no clock read; pass the same variable again for the rest of
 * the reply). Waits first (unless TLS holds decrypted bytes), so a reply not
 * yet sent costs one poll, not a read that finds nothing; with ask, asks
 * ask(ud) every slice_ms while it waits: non-zero ends the wait with
 * XF_ECANCELED (s unchanged: the caller drops it). */
int xf__stream_read_sliced(xf__stream *s, void *buf, size_t cap, size_t *got,
                           int64_t *deadline_ms, int budget_ms, int (*ask)(void *),
                           void *ud, int slice_ms);

/* Non-zero when TLS holds bytes already decrypted (or a record buffered):
 * a read answers without the descriptor becoming readable. */
int xf__stream_pending(const xf__stream *s);

#endif
