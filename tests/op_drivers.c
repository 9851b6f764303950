/* Every driver behind one face (op_drivers.h). */
#include "op_drivers.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xfetch_libevent.h>
#include <xfetch_libuv.h>

#include "link_net.h"

const char *const xft_driver_names[XFT_NDRIVERS] = {"blocking", "pool", "async", "call",
                                                    "async-libuv"};

enum { XFT_CLUSTER_MAX_NETS = 8 }; /* the servers a call driver talks to */

struct xft_drv {
  int driver;
  xf_client *c; /* blocking, call */
  xf_pool *pool;
  xf_async *ac;
  struct event_base *base;            /* async on libevent */
  uv_loop_t *uv;                      /* async on libuv */
  xft_net nets[XFT_CLUSTER_MAX_NETS]; /* the call's links, one per server it named */
  int nnets;
  xf_async_load *pending; /* an async load its loader left for the test */
  xft_op_loader *pending_l;
  char errmsg[256];
};

xft_drv *xft_drv_open(int driver, const xf_options *o) {
  xft_drv *d = calloc(1, sizeof *d);
  cr_assert_not_null(d);
  d->driver = driver;
  xf_options co = *o;
  switch (driver) {
  case XFT_POOL:
    cr_assert_eq(xf_pool_open(&d->pool, &co, 2, 0), XF_OK);
    break;
  case XFT_ASYNC:
    cr_assert_not_null(d->base = event_base_new());
    cr_assert_eq(xf_async_open_libevent(&d->ac, &co, d->base), XF_OK);
    break;
  case XFT_ASYNC_UV:
    cr_assert_not_null(d->uv = malloc(sizeof *d->uv));
    cr_assert_eq(uv_loop_init(d->uv), 0);
    cr_assert_eq(xf_async_open_libuv(&d->ac, &co, d->uv), XF_OK);
    break;
  case XFT_CALL:
    co.lazy_connect = 1; /* the links, opened as the calls name servers */
    cr_assert_eq(xf_client_open(&d->c, &co), XF_OK);
    break;
  default:
    cr_assert_eq(xf_client_open(&d->c, &co), XF_OK);
  }
  return d;
}

void xft_drv_close(xft_drv *d) {
  xf_async_close(d->ac);
  if (d->base)
    event_base_free(d->base);
  if (d->uv) { /* the handles xf_async_close closed, then the loop */
    uv_run(d->uv, UV_RUN_DEFAULT);
    cr_expect_eq(uv_loop_close(d->uv), 0);
    free(d->uv);
  }
  xf_pool_close(d->pool);
  for (int i = 0; i < d->nnets; i++)
    xft_net_close(&d->nets[i]);
  xf_client_close(d->c);
  free(d);
}

void xft_drv_stats(const xft_drv *d, xf_stats *out) {
  if (d->pool) {
    xf_pool_info info;
    xf_pool_stats(d->pool, &info);
    *out = info.clients;
  } else if (d->ac) {
    xf_async_stats(d->ac, out);
  } else {
    xf_client_stats(d->c, out);
  }
}

const char *xft_drv_errmsg(const xft_drv *d) { return d->errmsg; }

static int keep_msg(xft_drv *d, int rc, const char *msg) {
  snprintf(d->errmsg, sizeof d->errmsg, "%s", rc == XF_OK ? "" : msg);
  return rc;
}

/* ---- blocking and pool: the loader runs inside the call ------------------------ */

typedef struct sync_load {
  xft_drv *d;
  xft_op_loader *l;
} sync_load;

/* Records the previous validator the load was given. */
static void seen_validator(xft_op_loader *l, int has, const void *data, size_t len) {
  size_t n =
      has ? (len < sizeof l->previous_validator ? len : sizeof l->previous_validator - 1)
          : 0;
  if (n)
    memcpy(l->previous_validator, data, n);
  l->previous_validator[n] = '\0';
}

/* Records the previous value the load was given (data, len: has). */
static void seen_previous(xft_op_loader *l, int has, const void *data, size_t len,
                          int64_t age_ms) {
  l->had_previous = has;
  l->previous_age_ms = age_ms;
  size_t n = has && len < sizeof l->previous ? len : has ? sizeof l->previous - 1 : 0;
  if (n)
    memcpy(l->previous, data, n);
  l->previous[n] = '\0';
}

static int run_sync_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  sync_load *s = ud;
  s->l->calls++;
  const void *prev;
  size_t prev_len;
  int64_t age_ms;
  int has = xf_sink_previous(sink, &prev, &prev_len, &age_ms);
  seen_previous(s->l, has, prev, prev_len, age_ms);
  has = xf_sink_previous_validator(sink, &prev, &prev_len);
  seen_validator(s->l, has, prev, prev_len);
  has = s->l->had_previous;
  if (s->l->validator)
    cr_assert_eq(xf_sink_validator(sink, s->l->validator, strlen(s->l->validator)), XF_OK);
  if (s->l->during)
    s->l->during(s->d, s->l->arg);
  if (s->l->fail)
    return s->l->fail;
  if (s->l->unchanged && has)
    return xf_sink_unchanged(sink);
  if (!s->l->value) {
    xf_sink_not_found(sink);
    return 0;
  }
  return xf_sink_set(sink, s->l->value, strlen(s->l->value));
}

/* ---- the event loop: a load is completed by the test, between loop turns ------- */

typedef struct async_wait {
  xft_drv *d;
  int done, rc;
  xf_value *out;
} async_wait;

static void on_value(int rc, const xf_value *v, void *privdata) {
  async_wait *w = privdata;
  w->rc = rc;
  w->done = 1;
  keep_msg(w->d, rc, xf_async_errmsg(w->d->ac));
  if (rc == XF_OK && w->out) {
    w->out->data = malloc(v->len + 1);
    cr_assert_not_null(w->out->data);
    memcpy(w->out->data, v->data, v->len);
    w->out->data[v->len] = '\0';
    w->out->len = v->len;
    w->out->source = v->source;
  }
}

static void on_code(int rc, void *privdata) { on_value(rc, NULL, privdata); }

static void async_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key, (void)keylen;
  xft_drv *d = ud;
  cr_assert_null(d->pending, "one load at a time");
  d->pending = load;
}

/* Runs the loop until w is done, completing the loads its loader left. */
static int async_run(xft_drv *d, async_wait *w, int start_rc, xft_op_loader *l) {
  cr_assert_eq(start_rc, XF_OK, "%s", xf_async_errmsg(d->ac));
  while (!w->done) {
    if (!d->pending) {
      if (d->uv)
        uv_run(d->uv, UV_RUN_ONCE);
      else
        event_base_loop(d->base, EVLOOP_ONCE);
      continue;
    }
    xf_async_load *load = d->pending;
    d->pending = NULL;
    cr_assert_not_null(l, "a load without a loader");
    l->calls++;
    const void *prev;
    size_t prev_len;
    int64_t age_ms;
    int has = xf_async_load_previous(load, &prev, &prev_len, &age_ms);
    seen_previous(l, has, prev, prev_len, age_ms);
    has = xf_async_load_previous_validator(load, &prev, &prev_len);
    seen_validator(l, has, prev, prev_len);
    has = l->had_previous;
    if (l->validator)
      cr_assert_eq(xf_async_load_validator(load, l->validator, strlen(l->validator)),
                   XF_OK);
    if (l->during)
      l->during(d, l->arg);
    if (l->fail)
      xf_async_load_fail(load, l->fail);
    else if (l->unchanged && has)
      cr_assert_eq(xf_async_load_unchanged(load), XF_OK);
    else if (l->value)
      cr_assert_eq(xf_async_load_done(load, l->value, strlen(l->value)), XF_OK);
    else
      xf_async_load_not_found(load);
  }
  return w->rc;
}

/* ---- the sans-I/O call on links over the test's sockets ------------------------ */

/* The driver's clock (the fixture's, without the fixture: op_drivers.h). */
static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The link to the server call names (xf_call_target: the seed, or a
 * cluster's node), opened on first use. */
static xft_net *net_for(xft_drv *d, const xf_call *call) {
  int port;
  cr_assert_geq(xf_call_target(call, NULL, &port), 1);
  for (int i = 0; i < d->nnets; i++)
    if (d->nets[i].port == port)
      return &d->nets[i];
  cr_assert_lt(d->nnets, XFT_CLUSTER_MAX_NETS, "a call driver of more servers");
  d->nets[d->nnets] = xft_net_open(d->c, port, 0);
  return &d->nets[d->nnets++];
}

/* Runs *callp (set by the start whose code is start_rc: an argument, so read
 * after the start) to its end; its code. */
static int call_run(xft_drv *d, int start_rc, xf_call **callp, xft_op_loader *l,
                    xf_value *out) {
  cr_assert_eq(start_rc, XF_OK);
  xf_call *call = *callp;
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    if (step == XF_CALL_SEND) {
      step = xft_net_exchange(net_for(d, call), call);
    } else if (step == XF_CALL_LOAD) {
      cr_assert_not_null(l, "a load without a loader");
      l->calls++;
      int64_t t0 = now_ms();
      const void *prev;
      size_t prev_len;
      int64_t age_ms;
      xf_sink *sink = xf_call_sink(call);
      int has = xf_sink_previous(sink, &prev, &prev_len, &age_ms);
      seen_previous(l, has, prev, prev_len, age_ms);
      has = xf_sink_previous_validator(sink, &prev, &prev_len);
      seen_validator(l, has, prev, prev_len);
      has = l->had_previous;
      if (l->validator)
        cr_assert_eq(xf_sink_validator(sink, l->validator, strlen(l->validator)), XF_OK);
      if (l->during)
        l->during(d, l->arg);
      int64_t took_us = (now_ms() - t0) * 1000;
      if (!l->fail && l->unchanged && has) {
        cr_assert_eq(xf_sink_unchanged(sink), XF_OK);
        step = xf_call_load_done(call, 0, took_us, now_ms());
        continue;
      }
      step = l->fail ? xf_call_load_failed(call, l->fail, now_ms())
             : l->value
                 ? xf_call_loaded(call, l->value, strlen(l->value), took_us, now_ms())
                 : xf_call_not_found(call, took_us, now_ms());
    } else {
      usleep((useconds_t)xf_call_wait_ms(call, now_ms()) * 1000);
      step = xf_call_woke(call, now_ms());
    }
  }
  int rc = xf_call_result(call, out);
  keep_msg(d, rc, xf_call_errmsg(call));
  xf_call_free(call);
  return rc;
}

/* ---- the operations ------------------------------------------------------------ */

int xft_drv_get_or_compute(xft_drv *d, const char *key, const xf_policy *p,
                           xft_op_loader *l, xf_value *out) {
  size_t len = strlen(key);
  sync_load s = {d, l};
  async_wait w = {.d = d, .out = out};
  xf_call *call = NULL;
  memset(out, 0, sizeof *out);
  switch (d->driver) {
  case XFT_BLOCKING:
    return keep_msg(d, xf_get_or_compute(d->c, key, len, p, run_sync_loader, &s, out),
                    xf_errmsg(d->c));
  case XFT_POOL:
    return keep_msg(d,
                    xf_pool_get_or_compute(d->pool, key, len, p, run_sync_loader, &s, out),
                    xf_pool_errmsg());
  case XFT_ASYNC:
  case XFT_ASYNC_UV:
    return async_run(
        d, &w, xf_async_get_or_compute(d->ac, key, len, p, async_loader, d, on_value, &w),
        l);
  default:
    return call_run(d, xf_call_start(&call, d->c, key, len, p, now_ms()), &call, l, out);
  }
}

int xft_drv_get(xft_drv *d, const char *key, xf_value *out) {
  size_t len = strlen(key);
  async_wait w = {.d = d, .out = out};
  xf_call *call = NULL;
  memset(out, 0, sizeof *out);
  switch (d->driver) {
  case XFT_BLOCKING:
    return keep_msg(d, xf_get(d->c, key, len, out), xf_errmsg(d->c));
  case XFT_POOL:
    return keep_msg(d, xf_pool_get(d->pool, key, len, out), xf_pool_errmsg());
  case XFT_ASYNC:
  case XFT_ASYNC_UV:
    return async_run(d, &w, xf_async_get(d->ac, key, len, on_value, &w), NULL);
  default:
    return call_run(d, xf_call_start_get(&call, d->c, key, len, now_ms()), &call, NULL,
                    out);
  }
}

int xft_drv_set(xft_drv *d, const char *key, const char *value, const xf_policy *p) {
  size_t len = strlen(key), vlen = strlen(value);
  async_wait w = {.d = d};
  xf_call *call = NULL;
  switch (d->driver) {
  case XFT_BLOCKING:
    return keep_msg(d, xf_set(d->c, key, len, value, vlen, p), xf_errmsg(d->c));
  case XFT_POOL:
    return keep_msg(d, xf_pool_set(d->pool, key, len, value, vlen, p), xf_pool_errmsg());
  case XFT_ASYNC:
  case XFT_ASYNC_UV:
    return async_run(d, &w, xf_async_set(d->ac, key, len, value, vlen, p, on_code, &w),
                     NULL);
  default:
    return call_run(d, xf_call_start_set(&call, d->c, key, len, value, vlen, p, now_ms()),
                    &call, NULL, NULL);
  }
}

int xft_drv_delete(xft_drv *d, const char *key) {
  size_t len = strlen(key);
  async_wait w = {.d = d};
  xf_call *call = NULL;
  switch (d->driver) {
  case XFT_BLOCKING:
    return keep_msg(d, xf_delete(d->c, key, len), xf_errmsg(d->c));
  case XFT_POOL:
    return keep_msg(d, xf_pool_delete(d->pool, key, len), xf_pool_errmsg());
  case XFT_ASYNC:
  case XFT_ASYNC_UV:
    return async_run(d, &w, xf_async_delete(d->ac, key, len, on_code, &w), NULL);
  default:
    return call_run(d, xf_call_start_delete(&call, d->c, key, len, now_ms()), &call, NULL,
                    NULL);
  }
}

int xft_drv_invalidate_tags(xft_drv *d, const char *const *tags, size_t n) {
  async_wait w = {.d = d};
  xf_call *call = NULL;
  switch (d->driver) {
  case XFT_BLOCKING:
    return keep_msg(d, xf_invalidate_tags(d->c, tags, n), xf_errmsg(d->c));
  case XFT_POOL:
    return keep_msg(d, xf_pool_invalidate_tags(d->pool, tags, n), xf_pool_errmsg());
  case XFT_ASYNC:
  case XFT_ASYNC_UV:
    return async_run(d, &w, xf_async_invalidate_tags(d->ac, tags, n, on_code, &w), NULL);
  default:
    return call_run(d, xf_call_start_invalidate_tags(&call, d->c, tags, n, now_ms()), &call,
                    NULL, NULL);
  }
}

int xft_drv_has_batch(int driver) { return driver == XFT_BLOCKING || driver == XFT_POOL; }

/* The batch loader (l->batch): value (or not found) to every key, or fail;
 * during runs first. */
static int run_batch_loader(void *ud, size_t n, const char *const *keys,
                            const size_t *keylens, xf_sink *const *sinks) {
  (void)keys, (void)keylens;
  sync_load *s = ud;
  xft_op_loader *l = s->l;
  l->batch_calls++;
  l->calls += (int)n;
  if (l->during)
    l->during(s->d, l->arg);
  if (l->fail)
    return l->fail;
  for (size_t i = 0; i < n; i++) {
    if (!l->value)
      xf_sink_not_found(sinks[i]);
    else if (xf_sink_set(sinks[i], l->value, strlen(l->value)) != XF_OK)
      return XF_ENOMEM;
  }
  return 0;
}

int xft_drv_many(xft_drv *d, size_t n, const char *const *keys, const xf_policy *p,
                 xft_op_loader *l, xf_value *values, int *rcs) {
  cr_assert(xft_drv_has_batch(d->driver), "%s has no batch", xft_driver_names[d->driver]);
  size_t lens[16];
  cr_assert_leq(n, 16);
  for (size_t i = 0; i < n; i++)
    lens[i] = strlen(keys[i]);
  sync_load s = {d, l};
  int pool = d->driver == XFT_POOL;
  if (l->batch)
    return keep_msg(d,
                    pool ? xf_pool_get_or_compute_many_batch(
                               d->pool, n, keys, lens, p, run_batch_loader, &s, values, rcs)
                         : xf_get_or_compute_many_batch(d->c, n, keys, lens, p,
                                                        run_batch_loader, &s, values, rcs),
                    pool ? xf_pool_errmsg() : xf_errmsg(d->c));
  if (pool)
    return keep_msg(d,
                    xf_pool_get_or_compute_many(d->pool, n, keys, lens, p, run_sync_loader,
                                                &s, values, rcs),
                    xf_pool_errmsg());
  return keep_msg(
      d, xf_get_or_compute_many(d->c, n, keys, lens, p, run_sync_loader, &s, values, rcs),
      xf_errmsg(d->c));
}
