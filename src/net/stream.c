/* The stream's sockets (stream.h): a non-blocking connect over every
 * resolved address, plain reads and writes, close; TLS is stream_tls.c. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "stream_impl.h"
#include "xfetch.h"

void xf__stream_init(xf__stream *s) {
  memset(s, 0, sizeof *s);
  s->fd = -1;
}

xf__io xf__stream_fail(xf__stream *s, xf__stream_err err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->errstr, sizeof s->errstr, fmt, ap);
  va_end(ap);
  s->err = err;
  s->state = XF__STREAM_FAILED;
  s->want = 0;
  return XF__IO_FAIL;
}

void xf__stream_note(xf__stream *s, const void *data, size_t n) {
  s->got_bytes = 1;
  size_t room = sizeof s->first - s->nfirst;
  n = n < room ? n : room;
  memcpy(s->first + s->nfirst, data, n);
  s->nfirst += n;
}

/* Everything but the handshake counter back to "closed"; no byte sent. */
static void release(xf__stream *s, int notify) {
  if (s->ssl)
    xf__stream_tls_end(s, notify);
  if (s->fd >= 0)
    close(s->fd);
  xf__stream_resolve_drop(s);
  if (s->addrs)
    freeaddrinfo(s->addrs);
  unsigned handshakes = s->handshakes, fd_gen = s->fd_gen;
  xf__stream_init(s);
  s->handshakes = handshakes;
  s->fd_gen = fd_gen;
}

void xf__stream_close(xf__stream *s) {
  if (s)
    release(s, s->state == XF__STREAM_OPEN);
}

void xf__stream_forget(xf__stream *s) {
  if (s)
    release(s, 0);
}

int xf__stream_code(const xf__stream *s) {
  switch (s->err) {
  case XF__SE_NONE:
    return XF_OK;
  case XF__SE_CONFIG:
    return XF_EINVAL;
  case XF__SE_NOMEM:
    return XF_ENOMEM;
  case XF__SE_CONNECT:
    return XF_ECONNECT;
  case XF__SE_TLS:
  case XF__SE_CERT:
    return XF_ETLS;
  case XF__SE_IO:
  case XF__SE_CLOSED:
    break;
  }
  return XF_EIO;
}

/* Keepalive as hiredis sets it (a peer gone silent is found in about 30 s)
 * and no Nagle delay: commands are small and each waits for its reply. */
static void tune_tcp(int fd) {
  int on = 1, idle = 15, intvl = 5, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

static xf__io connected(xf__stream *s) {
  if (s->addrs) {
    tune_tcp(s->fd);
    freeaddrinfo(s->addrs);
    s->addrs = s->addr = NULL;
  }
  if (s->tls) {
    s->state = XF__STREAM_HANDSHAKING;
    return xf__stream_tls_start(s);
  }
  s->state = XF__STREAM_OPEN;
  s->want = 0;
  return XF__IO_DONE;
}

/* Starts a connect to s->addr, then to each next address after a failure;
 * the last address's error is the one reported. */
xf__io xf__stream_try_addresses(xf__stream *s) {
  for (; s->addr; s->addr = s->addr->ai_next) {
    const struct addrinfo *a = s->addr;
    s->fd =
        socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (s->fd < 0) {
      s->sys_errno = errno;
      continue;
    }
    s->fd_gen++;
    int rc;
    do
      rc = connect(s->fd, a->ai_addr, a->ai_addrlen);
    while (rc != 0 && errno == EINTR);
    if (rc == 0)
      return connected(s);
    if (errno == EINPROGRESS) {
      s->state = XF__STREAM_CONNECTING;
      s->want = XF__WANT_WRITE;
      return XF__IO_AGAIN;
    }
    s->sys_errno = errno;
    close(s->fd);
    s->fd = -1;
  }
  return xf__stream_fail(s, XF__SE_CONNECT, "connect to %s: %s", s->peer,
                         strerror(s->sys_errno));
}

static int is_ip(const char *host) {
  unsigned char buf[sizeof(struct in6_addr)];
  return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

static void start(xf__stream *s, xf__tls *tls) {
  release(s, 0);
  s->tls = tls;
  s->started_ms = xf__stream_now_ms();
}

xf__io xf__stream_open_tcp(xf__stream *s, const char *host, int port, xf__tls *tls) {
  start(s, tls);
  int v6 = strchr(host, ':') != NULL;
  snprintf(s->peer, sizeof s->peer, "%s%s%s:%d", v6 ? "[" : "", host, v6 ? "]" : "", port);
  if (tls)
    snprintf(s->name, sizeof s->name, "%s", tls->server_name ? tls->server_name : host);
  char service[16];
  snprintf(service, sizeof service, "%d", port);
  /* No AI_ADDRCONFIG: it hides "localhost" on a host with only loopback. */
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  if (!is_ip(host)) /* a name: off this thread (stream_resolve.c) */
    return xf__stream_resolve_start(s, host, service, &hints);
  hints.ai_flags = AI_NUMERICHOST; /* never waits */
  int rc = getaddrinfo(host, service, &hints, &s->addrs);
  if (rc != 0)
    return xf__stream_resolve_failed(s, host, rc, errno);
  s->addr = s->addrs;
  return xf__stream_try_addresses(s);
}

xf__io xf__stream_open_unix(xf__stream *s, const char *path, xf__tls *tls) {
  start(s, tls);
  snprintf(s->peer, sizeof s->peer, "%s", path);
  if (tls && tls->server_name)
    snprintf(s->name, sizeof s->name, "%s", tls->server_name);
  else if (tls && tls->verify)
    return xf__stream_fail(s, XF__SE_CONFIG,
                           "TLS on the Unix socket %s needs a server name to verify", path);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof a.sun_path)
    return xf__stream_fail(s, XF__SE_CONFIG, "Unix socket path too long: %s", path);
  memcpy(a.sun_path, path, strlen(path) + 1);
  struct addrinfo one = {.ai_family = AF_UNIX,
                         .ai_socktype = SOCK_STREAM,
                         .ai_addr = (struct sockaddr *)&a,
                         .ai_addrlen = sizeof a};
  s->addr = &one; /* tried at once: a Unix connect never waits to be accepted */
  xf__io r = xf__stream_try_addresses(s);
  s->addr = NULL;
  return r;
}

/* The pending connect has an answer: connected, or failed (next address). */
static xf__io finish_connect(xf__stream *s) {
  struct pollfd p = {.fd = s->fd, .events = POLLOUT};
  if (poll(&p, 1, 0) == 0)
    return XF__IO_AGAIN; /* called early: SO_ERROR would still read 0 */
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
    err = errno;
  if (err == 0)
    return connected(s);
  s->sys_errno = err;
  close(s->fd);
  s->fd = -1;
  s->addr = s->addr ? s->addr->ai_next : NULL; /* a Unix socket: one address */
  return xf__stream_try_addresses(s);
}

xf__io xf__stream_continue(xf__stream *s) {
  switch (s->state) {
  case XF__STREAM_RESOLVING:
    return xf__stream_resolve_step(s);
  case XF__STREAM_CONNECTING:
    return finish_connect(s);
  case XF__STREAM_HANDSHAKING:
    return xf__stream_tls_handshake(s);
  case XF__STREAM_OPEN:
    return XF__IO_DONE;
  case XF__STREAM_FAILED:
    return XF__IO_FAIL;
  case XF__STREAM_CLOSED:
    break;
  }
  return xf__stream_fail(s, XF__SE_CONFIG, "the stream is not open");
}

/* A peer that resets or closes before it ever answered is most often a TLS
 * port spoken to in plain text (Redis drops such a client at once). */
static xf__io plain_closed(xf__stream *s, const char *how) {
  return xf__stream_fail(s, XF__SE_CLOSED, "%s %s%s", s->peer, how,
                         s->got_bytes ? ""
                                      : " before answering (if it is a TLS port, connect "
                                        "with TLS: rediss://)");
}

static xf__io not_open(xf__stream *s) {
  return s->state == XF__STREAM_FAILED
             ? XF__IO_FAIL
             : xf__stream_fail(s, XF__SE_CONFIG, "the stream is not open");
}

xf__io xf__stream_write(xf__stream *s, const void *buf, size_t len, size_t *put) {
  *put = 0;
  if (s->state != XF__STREAM_OPEN)
    return not_open(s);
  if (len == 0) /* SSL_write(0) is an error, send(0) a no-op: neither is asked */
    return XF__IO_DONE;
  if (s->ssl)
    return xf__stream_tls_write(s, buf, len, put);
  ssize_t n;
  do
    n = send(s->fd, buf, len, MSG_NOSIGNAL); /* EPIPE, never SIGPIPE */
  while (n < 0 && errno == EINTR);
  if (n >= 0) {
    *put = (size_t)n;
    return XF__IO_DONE;
  }
  s->sys_errno = errno;
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    s->want = XF__WANT_WRITE;
    return XF__IO_AGAIN;
  }
  if (errno == EPIPE || errno == ECONNRESET)
    return plain_closed(s, "closed the connection");
  return xf__stream_fail(s, XF__SE_IO, "write to %s: %s", s->peer, strerror(errno));
}

xf__io xf__stream_read(xf__stream *s, void *buf, size_t cap, size_t *got) {
  *got = 0;
  if (s->state != XF__STREAM_OPEN)
    return not_open(s);
  if (cap == 0)
    return xf__stream_fail(s, XF__SE_CONFIG, "a read into no room");
  if (s->ssl)
    return xf__stream_tls_read(s, buf, cap, got);
  ssize_t n;
  do
    n = recv(s->fd, buf, cap, 0);
  while (n < 0 && errno == EINTR);
  s->recvs++;
  if (n > 0) {
    const unsigned char *b = buf;
    if (!s->got_bytes && n >= 2 && b[0] == 0x15 && b[1] == 0x03) /* RESP never */
      return xf__stream_fail(
          s, XF__SE_IO, "%s answered with a TLS alert: it wants TLS (rediss://)", s->peer);
    xf__stream_note(s, buf, (size_t)n);
    *got = (size_t)n;
    return XF__IO_DONE;
  }
  if (n == 0) {
    s->peer_eof = 1;
    return plain_closed(s, "closed the connection");
  }
  s->sys_errno = errno;
  if (errno == EAGAIN || errno == EWOULDBLOCK) {
    s->want = XF__WANT_READ;
    return XF__IO_AGAIN;
  }
  if (errno == ECONNRESET)
    return plain_closed(s, "reset the connection");
  return xf__stream_fail(s, XF__SE_IO, "read from %s: %s", s->peer, strerror(errno));
}

void xf__stream_timeout(xf__stream *s, int ms) {
  switch (s->state) {
  case XF__STREAM_RESOLVING:
    xf__stream_fail(s, XF__SE_CONNECT, "cannot resolve %s: no answer within %d ms", s->peer,
                    ms);
    break;
  case XF__STREAM_CONNECTING:
    xf__stream_fail(s, XF__SE_CONNECT, "connect to %s timed out after %d ms", s->peer, ms);
    break;
  case XF__STREAM_HANDSHAKING:
    xf__stream_fail(s, XF__SE_TLS, "TLS handshake with %s timed out after %d ms%s", s->peer,
                    ms,
                    s->got_bytes ? ""
                                 : " (the server sent nothing back: is it a plain, "
                                   "non-TLS port?)");
    break;
  case XF__STREAM_OPEN:
    if (s->want == XF__WANT_WRITE)
      xf__stream_fail(s, XF__SE_IO, "write to %s timed out after %d ms", s->peer, ms);
    else
      xf__stream_fail(s, XF__SE_IO, "no reply from %s within %d ms", s->peer, ms);
    break;
  case XF__STREAM_CLOSED:
  case XF__STREAM_FAILED:
    break;
  }
}
