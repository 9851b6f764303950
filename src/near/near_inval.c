/* One invalidation connection of the near cache (near_impl.h): over the
 * project's stream (stream.h), plain or TLS as the client's data
 * connections, with the same setup (setup.c: AUTH, SELECT), then
 * CLIENT SETNAME xfetch-invalidate, CLIENT ID and SUBSCRIBE
 * __redis__:invalidate in the same write; RESP2 replies through hiredis'
 * reader into the project's replies (reader.c). Opened (blocking) and read
 * (without waiting) by the tracker thread, as the client that asked for it
 * (xf__inval_who: a copy of that client's TLS settings and credentials). */
#include <openssl/ssl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "near_impl.h"
#include "reader.h"
#include "reply.h"
#include "resp.h"
#include "setup.h"
#include "stream.h"
#include "tls.h"

#define READ_CHUNK 16384

struct xf__inval {
  xf__stream s; /* heap-held: OpenSSL's I/O hooks point at it */
  redisReader *rd;
};

void xf__inval_close(xf__inval *v) {
  if (!v)
    return;
  xf__stream_close(&v->s);
  if (v->rd)
    redisReaderFree(v->rd);
  free(v);
}

void xf__inval_forget(xf__inval *v) {
  if (!v)
    return;
  xf__stream_forget(&v->s);
  if (v->rd)
    redisReaderFree(v->rd);
  free(v);
}

int xf__inval_fd(const xf__inval *v) { return v->s.fd; }

/* The next reply, read blocking until deadline_ms. XF_OK with *r, or the
 * code with the reason on c. */
static int next_reply(xf_client *c, xf__inval *v, int64_t deadline_ms, xf__reply **r) {
  void *got = NULL;
  char buf[READ_CHUNK];
  while (xf__reader_get_reply(v->rd, &got) == REDIS_OK && !got) {
    size_t n;
    int rc = xf__stream_read_some(&v->s, buf, sizeof buf, &n, deadline_ms);
    if (rc != XF_OK)
      return xf__fail(c, rc, "near cache invalidation connection: %s", v->s.errstr);
    if (redisReaderFeed(v->rd, buf, n) != REDIS_OK)
      break;
  }
  if (!got)
    return xf__fail(c, XF_EIO, "near cache invalidation connection: unreadable reply");
  *r = got;
  return XF_OK;
}

/* Sends the setup and the subscription in one write and judges the
 * replies; *id gets the CLIENT ID. */
static int subscribe(xf_client *c, xf__inval *v, long long *id) {
  xf__setup s;
  xf__setup_build(c, 0, &s);
  static const char *const name[] = {"CLIENT", "SETNAME", "xfetch-invalidate"};
  static const size_t name_lens[] = {6, 7, 17};
  static const char *const cid[] = {"CLIENT", "ID"};
  static const size_t cid_lens[] = {6, 2};
  static const char *const sub[] = {"SUBSCRIBE", "__redis__:invalidate"};
  static const size_t sub_lens[] = {9, 20};
  xf__buf req = {0};
  int bad = 0;
  for (int i = 0; i < s.n; i++)
    bad |= xf__resp_append_cmd(&req, &s.cmd[i]);
  bad |= xf__resp_append(&req, 3, name, name_lens) |
         xf__resp_append(&req, 2, cid, cid_lens) | xf__resp_append(&req, 2, sub, sub_lens);
  int64_t deadline_ms = xf__stream_now_ms() + c->command_timeout_ms;
  int rc = bad ? xf__fail(c, XF_ENOMEM, "out of memory for the invalidation connection")
               : xf__stream_write_all(&v->s, req.data, req.len, deadline_ms);
  if (rc != XF_OK && !bad)
    rc = xf__fail(c, rc, "near cache invalidation connection: %s", v->s.errstr);
  xf__buf_free(&req);
  static const char *const what[] = {"CLIENT SETNAME", "CLIENT ID", "SUBSCRIBE"};
  for (int i = 0; rc == XF_OK && i < s.n + 3; i++) {
    xf__reply *r = NULL;
    if ((rc = next_reply(c, v, deadline_ms, &r)) != XF_OK)
      break;
    if (i < s.n)
      rc = xf__setup_judge(c, s.kind[i], r);
    else if (r->type == XF_REPLY_ERROR)
      rc = xf__fail(c, XF_EREDIS, "near cache invalidation connection: %s: %s",
                    what[i - s.n], r->str);
    else if (i == s.n + 1 && r->type == XF_REPLY_INTEGER)
      *id = r->integer;
    else if (i == s.n + 1)
      rc = xf__fail(c, XF_EPROTO, "near cache invalidation connection: CLIENT ID: no id");
    xf__reply_free(r);
  }
  return rc;
}

int xf__near_test_open_delay_ms;

/* xf__inval_open, telling on (if any) of its socket (xf__inval_who_watch). */
static int open_watched(xf__inval **out, xf_client *c, const char *host, int port,
                        const char *unix_path, long long *id, void (*on)(void *ud, int fd),
                        void *ud) {
  *out = NULL;
  if (xf__near_test_open_delay_ms > 0) /* a slow server (tests) */
    poll(NULL, 0, xf__near_test_open_delay_ms);
  xf__inval *v = calloc(1, sizeof *v);
  if (!v || !(v->rd = xf__reader_create())) {
    free(v);
    return xf__fail(c, XF_ENOMEM, "out of memory for the invalidation connection");
  }
  xf__stream_init(&v->s);
  xf__io r = host ? xf__stream_open_tcp(&v->s, host, port, c->tls)
                  : xf__stream_open_unix(&v->s, unix_path, c->tls);
  int rc =
      r == XF__IO_FAIL
          ? xf__stream_code(&v->s)
          : xf__stream_connect_blocking(&v->s, xf__stream_now_ms() + c->connect_timeout_ms);
  if (rc != XF_OK)
    rc = xf__fail(c, rc, "near cache invalidation connection: %s", v->s.errstr);
  /* Only the handshake reads the TLS settings; they are the client's, which
   * may close before this connection does. */
  v->s.tls = NULL;
  if (rc == XF_OK && on)
    on(ud, v->s.fd);
  if (rc == XF_OK)
    rc = subscribe(c, v, id);
  if (on)
    on(ud, -1);
  if (rc != XF_OK) {
    xf__inval_close(v);
    return rc;
  }
  *out = v;
  return XF_OK;
}

int xf__inval_open(xf__inval **out, xf_client *c, const char *host, int port,
                   const char *unix_path, long long *id) {
  return open_watched(out, c, host, port, unix_path, id, NULL, NULL);
}

struct xf__inval_who {
  xf_client c; /* a stand-in: only what xf__inval_open reads is set */
  xf__tls tls; /* c.tls: the client's, its SSL_CTX referenced once more */
  void (*on_fd)(void *ud, int fd);
  void *on_fd_ud;
};

void xf__inval_who_watch(xf__inval_who *w, void (*on)(void *ud, int fd), void *ud) {
  w->on_fd = on;
  w->on_fd_ud = ud;
}

xf__inval_who *xf__inval_who_new(const xf_client *c) {
  xf__inval_who *w = calloc(1, sizeof *w);
  if (!w)
    return NULL;
  w->c.connect_timeout_ms = c->connect_timeout_ms;
  w->c.command_timeout_ms = c->command_timeout_ms;
  w->c.db = c->db;
  int bad = (c->username && !(w->c.username = strdup(c->username))) ||
            (c->password && !(w->c.password = strdup(c->password)));
  if (c->tls) {
    w->tls = (xf__tls){.ctx = c->tls->ctx, .verify = c->tls->verify};
    SSL_CTX_up_ref(w->tls.ctx);
    w->c.tls = &w->tls;
    bad |= c->tls->server_name && !(w->tls.server_name = strdup(c->tls->server_name));
  }
  if (bad) {
    xf__inval_who_free(w);
    return NULL;
  }
  return w;
}

void xf__inval_who_free(xf__inval_who *w) {
  if (!w)
    return;
  if (w->c.tls)
    SSL_CTX_free(w->tls.ctx);
  free(w->tls.server_name);
  free(w->c.username);
  free(w->c.password);
  free(w);
}

int xf__inval_open_as(xf__inval **out, xf__inval_who *w, const char *host, int port,
                      const char *unix_path, long long *id, char *why, size_t whylen) {
  w->c.errstr[0] = '\0';
  int rc = open_watched(out, &w->c, host, port, unix_path, id, w->on_fd, w->on_fd_ud);
  snprintf(why, whylen, "%s", w->c.errstr);
  return rc;
}

int xf__inval_read(xf__inval *v, void (*on)(void *ud, const xf__reply *r), void *ud) {
  char buf[READ_CHUNK];
  for (;;) {
    size_t n = 0;
    xf__io io = xf__stream_read(&v->s, buf, sizeof buf, &n);
    if (io == XF__IO_FAIL)
      return -1;
    if (io == XF__IO_AGAIN) /* drained: TLS holds nothing decrypted either */
      break;
    if (redisReaderFeed(v->rd, buf, n) != REDIS_OK)
      return -1;
  }
  void *r;
  int rc;
  while ((rc = xf__reader_get_reply(v->rd, &r)) == REDIS_OK && r) {
    on(ud, r);
    xf__reply_free(r);
  }
  if (rc != REDIS_OK)
    return -1;
  return v->rd->reply != NULL || v->rd->pos < v->rd->len; /* a message begun */
}
