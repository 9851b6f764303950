/* The public link (xf_link_*): one connection of a driver's own as bytes in
 * and bytes out over the connection engine (link.h), and the calls sent on it
 * (xf_call_send). The engine queues their commands behind its setup and
 * answers them in order; a call whose reply came (or whose stream failed)
 * moves on at once and is listed for the driver (xf_link_ready); a call the
 * engine allows to go once more waits for the next stream. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "call.h"
#include "call_link.h"
#include "client.h"
#include "flow_steps.h"
#include "link.h"
#include "wake_pipe.h"

static const xf__cmd readonly_cmd = {.argc = 1, .argv = {"READONLY"}, .lens = {8}};

int xf__calls_reserve(calls *v, size_t n) {
  if (v->cap >= n)
    return XF_OK;
  size_t cap = v->cap ? 2 * v->cap : 16;
  while (cap < n)
    cap *= 2;
  xf_call **at = realloc(v->at, cap * sizeof *at);
  if (!at)
    return XF_ENOMEM;
  v->at = at;
  v->cap = cap;
  return XF_OK;
}

void xf__link_moved(xf_link *k, xf_call *call, xf__reply *r, int rc) {
  call->on_link = ON_READY;
  k->ready.at[k->ready.len++] = call;
  call->got = r;
  call->got_rc = rc;
  call->got_set = GOT_REPLY;
  if (!r)
    snprintf(call->errstr, sizeof call->errstr, "%s",
             k->l.why[0] ? k->l.why : "the connection failed");
}

xf_call_step xf_call_received(xf_call *call, int64_t now_ms) {
  if (!call || !call->got_set || call->on_link != ON_NONE)
    return xf_call_next(call);
  if (call->got_set == GOT_WAKE) {
    call->got_set = GOT_NONE;
    return xf_call_woke(call, now_ms);
  }
  xf__reply *r = call->got;
  call->got = NULL;
  call->got_set = GOT_NONE;
  if (!r)
    xf__fail(call->f.c, call->got_rc, "%s", call->errstr);
  return xf__call_on_reply(call, r, call->got_rc, now_ms);
}

static void on_reply(xf__link *l, void *ud, int rc, xf__reply **reply) {
  (void)l;
  xf_call *call = ud;
  xf_link *k = call->link;
  if (rc == XF__LINK_AGAIN) { /* the server closed a working stream: once more */
    call->resend = 1;
    call->on_link = ON_WAIT;
    k->waiting.at[k->waiting.len++] = call;
    return;
  }
  xf__reply *r = NULL;
  if (rc == XF_OK) {
    r = *reply;
    *reply = NULL;
  }
  xf__link_moved(k, call, r, r || rc != XF_OK ? rc : XF_EIO);
}

/* Puts the call's commands on the live stream. */
static int submit(xf_link *k, xf_call *call, int64_t now_ms) {
  xf__link *l = &k->l;
  int rc = XF_OK;
  if (call->pre & PRE_LOAD) { /* a NOSCRIPT's script, ahead of its command */
    xf__cmd load;
    xf__route_script(call->send_cmd, &load);
    rc = xf__link_submit(l, &load, 0, now_ms, NULL, NULL);
  }
  if (rc == XF_OK && (call->pre & PRE_READONLY)) /* a replica's read */
    rc = xf__link_submit(l, &readonly_cmd, 0, now_ms, NULL, NULL);
  int opts =
      (call->pre & PRE_ASKING ? XF__LINK_ASKING : 0) | (call->resend ? XF__LINK_RESENT : 0);
  if (rc == XF_OK)
    rc = xf__link_submit(l, call->send_cmd, opts, now_ms, on_reply, call);
  if (rc == XF_OK)
    call->on_link = ON_WIRE;
  return rc;
}

/* The link's wake pipe, on its client's near cache: a byte on every
 * invalidation, so that its parked calls' waits end on a write. */
static int wake_open(xf_link *k) {
  int p[2];
  if (xf__wake_pipe_open(k->c, p) != XF_OK)
    return XF_ENOMEM;
  k->wake_rd = p[0];
  k->wake_wr = p[1];
  k->c->link_wakes++;
  return XF_OK;
}

static void wake_close(xf_link *k) {
  if (k->wake_wr < 0)
    return;
  xf__wake_pipe_close(k->c, k->wake_rd, k->wake_wr);
  k->wake_rd = k->wake_wr = -1;
  k->c->link_wakes--;
}

int xf_link_open(xf_link **out, xf_client *c, const char *host, int port, int flags) {
  if (!out)
    return XF_EINVAL;
  *out = NULL;
  if (!c)
    return XF_EINVAL;
  xf_link *k = calloc(1, sizeof *k);
  if (!k || (host && !(k->host = strdup(host)))) {
    free(k);
    return XF_ENOMEM;
  }
  k->c = c;
  k->wake_rd = k->wake_wr = -1;
  /* each reply is judged as it is fed (its call moves in its completion) */
  flags = (flags & (XF_SETUP_REPLICA | XF_SETUP_SCRIPTS)) | XF__LINK_ONE_SCRIPT;
  if (xf__link_init(&k->l, c, k->host, port, c->unix_path, flags) != XF_OK) {
    xf_link_close(k);
    return XF_ENOMEM;
  }
  if (c->near && wake_open(k) != XF_OK) {
    xf_link_close(k);
    return XF_ENOMEM;
  }
  *out = k;
  return XF_OK;
}

int xf_link_wants_stream(const xf_link *k) { return k && k->waiting.len > 0 && !k->l.live; }

/* Puts the calls waiting on the stream just connected, or fails them with rc
 * (the breaker, a failed connect). */
static void flush_waiting(xf_link *k, int rc, int64_t now_ms) {
  size_t n = k->waiting.len;
  k->waiting.len = 0;
  for (size_t i = 0; i < n; i++) {
    xf_call *call = k->waiting.at[i];
    int sent = rc == XF_OK ? submit(k, call, now_ms) : rc;
    if (sent != XF_OK)
      xf__link_moved(k, call, NULL, sent);
  }
}

int xf_link_start(xf_link *k, int64_t now_ms) {
  if (!k)
    return XF_EINVAL;
  k->now_ms = now_ms;
  if (k->l.live && xf__link_pending_count(&k->l) > 0) /* a stream replaced */
    xf__link_fail(&k->l, XF_EIO, XF__LINK_CANCELED, "the stream was replaced", now_ms);
  int rc = xf__link_allows(&k->l, now_ms);
  if (rc == XF_OK)
    rc = xf__link_start(&k->l, now_ms);
  if (rc != XF_OK)
    flush_waiting(k, rc, now_ms);
  return rc;
}

void xf_link_connected(xf_link *k, int fd, int64_t now_ms) {
  if (!k)
    return;
  xf__link_connected(&k->l, fd, now_ms);
  xf__link_up(&k->l);
  k->now_ms = now_ms;
  flush_waiting(k, XF_OK, now_ms); /* sent now: the clock's bounds start here */
}

const char *xf_link_output(const xf_link *k, size_t *len) {
  const char *data = NULL;
  size_t n = 0;
  if (k)
    xf__link_output(&k->l, &data, &n);
  if (len)
    *len = n;
  return data;
}

void xf_link_written(xf_link *k, size_t n) {
  if (k)
    xf__link_written(&k->l, n);
}

int xf_link_feed(xf_link *k, const void *data, size_t len, int64_t now_ms) {
  if (!k)
    return XF_EINVAL;
  k->now_ms = now_ms;
  if (xf__link_feed(&k->l, data, len, now_ms) == XF_OK)
    return XF_OK;
  return k->l.setup_rc != XF_OK ? k->l.setup_rc : XF_EIO;
}

void xf_link_failed(xf_link *k, xf_link_how how, const char *why, int64_t now_ms) {
  static const int hows[] = {XF__LINK_PEER_CLOSED, XF__LINK_BROKEN, XF__LINK_TIMEOUT,
                             XF__LINK_BROKEN, XF__LINK_CANCELED};
  if (!k || (unsigned)how > XF_LINK_CANCELED)
    return;
  k->now_ms = now_ms;
  int rc = how == XF_LINK_TLS ? XF_ETLS : k->l.connected ? XF_EIO : XF_ECONNECT;
  char name[300], msg[256];
  const char *what = how == XF_LINK_TIMEOUT ? "timed out" : "connection lost";
  snprintf(msg, sizeof msg, "%.120s: %.120s", xf__link_name(&k->l, name, sizeof name),
           why && why[0] ? why : what);
  xf__fail(k->c, rc, "%s", msg);
  int connect_failed = !k->l.connected;
  xf__link_fail(&k->l, rc, hows[how], msg, now_ms);
  if (connect_failed) /* so do the calls waiting for the connect */
    flush_waiting(k, rc, now_ms);
}

static int64_t stream_deadline(const xf_link *k) {
  return xf__link_deadline(&k->l, k->l.connected, k->c->connect_timeout_ms,
                           k->c->command_timeout_ms);
}

/* When a parked call's wait ends, on the driver's clock. */
static int64_t wait_end(const xf_call *call) {
  return call->backoff ? call->wake_ms : call->f.wake_ms;
}

int64_t xf_link_deadline(const xf_link *k) {
  if (!k)
    return INT64_MAX;
  int64_t at = stream_deadline(k);
  for (size_t i = 0; i < k->parked.len; i++)
    if (wait_end(k->parked.at[i]) < at)
      at = wait_end(k->parked.at[i]);
  return at;
}

int xf_call_park(xf_call *call, xf_link *k, int64_t now_ms) {
  if (!call || !k || call->step != XF_STEP_WAIT || call->on_link != ON_NONE ||
      call->got_set)
    return XF_EINVAL;
  if (xf__calls_reserve(&k->ready, k->ready.len + k->attached + 1) != XF_OK ||
      xf__calls_reserve(&k->parked, k->attached + 1) != XF_OK)
    return XF_ENOMEM;
  call->link = k;
  call->on_link = ON_PARKED;
  k->attached++;
  k->parked.at[k->parked.len++] = call;
  xf_link_tick(k, now_ms); /* a wait of 0 ms, a key written already */
  return XF_OK;
}

/* Drains the wake pipe: its bytes only say "look again". */
static void wake_drain(xf_link *k) {
  char buf[256];
  while (k->wake_rd >= 0 && read(k->wake_rd, buf, sizeof buf) > 0)
    ;
}

int xf_link_tick(xf_link *k, int64_t now_ms) {
  if (!k)
    return 0;
  wake_drain(k);
  size_t kept = 0;
  for (size_t i = 0; i < k->parked.len; i++) {
    xf_call *call = k->parked.at[i];
    /* within 1 ms: a driver's timer rounds its time */
    if (wait_end(call) <= now_ms + 1 || xf_call_woken(call)) {
      call->on_link = ON_READY;
      call->got_set = GOT_WAKE;
      k->ready.at[k->ready.len++] = call;
    } else {
      k->parked.at[kept++] = call;
    }
  }
  k->parked.len = kept;
  return stream_deadline(k) <= now_ms + 1;
}

int xf_link_wake_fd(const xf_link *k) { return k ? k->wake_rd : -1; }

xf_call *xf_link_ready(xf_link *k) {
  while (k && k->ready_at < k->ready.len) {
    xf_call *call = k->ready.at[k->ready_at++];
    if (k->ready_at == k->ready.len)
      k->ready_at = k->ready.len = 0;
    if (!call) /* freed meanwhile */
      continue;
    call->link = NULL;
    call->on_link = ON_NONE;
    k->attached--;
    return call;
  }
  return NULL;
}

int xf_call_send(xf_call *call, xf_link *k, int64_t now_ms) {
  if (!call || !k || call->step != XF_STEP_SEND || call->on_link != ON_NONE ||
      call->got_set || !call->send_cmd)
    return XF_EINVAL;
  if (xf__calls_reserve(&k->ready, k->ready.len + k->attached + 1) != XF_OK ||
      xf__calls_reserve(&k->waiting, k->attached + 1) != XF_OK)
    return XF_ENOMEM;
  k->now_ms = now_ms;
  call->link = k;
  call->resend = 0;
  k->attached++;
  if (!k->l.connected) { /* for the stream, once connected */
    call->on_link = ON_WAIT;
    k->waiting.at[k->waiting.len++] = call;
    return XF_OK;
  }
  int rc = submit(k, call, now_ms);
  if (rc != XF_OK) {
    call->link = NULL;
    k->attached--;
  }
  return rc;
}

/* Forgets call wherever it is in list v. */
static void drop(calls *v, size_t from, const xf_call *call, int compact) {
  for (size_t i = from; i < v->len; i++)
    if (v->at[i] == call) {
      if (compact)
        v->at[i] = v->at[--v->len];
      else
        v->at[i] = NULL;
      return;
    }
}

void xf__call_link_forget(xf_call *call) {
  xf_link *k = call->link;
  if (!k)
    return;
  xf__link *l = &k->l;
  if (call->on_link == ON_WIRE && call->many) /* its part is dropped */
    for (size_t i = 0; i < call->many->n; i++) {
      if (call->many->items[i] == call)
        call->many->items[i] = NULL;
    }
  else if (call->on_link == ON_WIRE) /* its reply is read and dropped */
    for (size_t i = 0; i < l->fifo_len; i++) {
      xf__link_pending *p = &l->fifo[(l->fifo_at + i) % l->fifo_cap];
      if (p->ud == call)
        p->fn = NULL, p->ud = NULL;
    }
  else if (call->on_link == ON_WAIT)
    drop(&k->waiting, 0, call, 1);
  else if (call->on_link == ON_READY)
    drop(&k->ready, k->ready_at, call, 0);
  else if (call->on_link == ON_PARKED)
    drop(&k->parked, 0, call, 1);
  call->link = NULL;
  call->on_link = ON_NONE;
  k->attached--;
}

void xf_link_close(xf_link *k) {
  if (!k)
    return;
  if (k->l.clock) { /* initialised: its calls moved, none reported */
    k->now_ms = 0;
    xf__link_fail(&k->l, XF_EIO, XF__LINK_CANCELED, "the link was closed", 0);
    for (size_t i = 0; i < k->waiting.len; i++)
      xf__link_moved(k, k->waiting.at[i], NULL, XF_EIO);
    k->waiting.len = 0;
    xf_call *call;
    while ((call = xf_link_ready(k)))
      if (call->got_set == GOT_WAKE) /* stays in XF_CALL_WAIT */
        call->got_set = GOT_NONE;
      else
        xf_call_received(call, 0);
  }
  for (size_t i = 0; i < k->parked.len; i++) { /* they stay in XF_CALL_WAIT */
    k->parked.at[i]->link = NULL;
    k->parked.at[i]->on_link = ON_NONE;
  }
  wake_close(k);
  xf__link_free(&k->l);
  free(k->parked.at);
  free(k->waiting.at);
  free(k->ready.at);
  free(k->host);
  free(k);
}
