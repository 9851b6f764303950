/* Keys another program wrote, against a real redis-server: a hash holding a
 * field xfetch never writes (one with none of v d e s l n f, or one with some
 * of them beside its own) is not an entry. Every call on it fails with
 * XF_EWRONGTYPE and leaves it as it was (fields, values, no TTL added), on
 * every driver (blocking, batch, pool, xf_async on libevent, the sans-I/O
 * call) and for clients of either entry format; the loader never runs.
 * A hash whose fields are all xfetch's is an entry, malformed or not. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>
#include <unistd.h>
#include <xfetch_libevent.h>

#include "fixture.h"

enum { BLOCKING, BATCH, POOL, ASYNC, CALL, NDRIVERS };
static const char *const driver_names[] = {"blocking", "batch", "pool", "async", "call"};

/* Another program's hashes: none of the entry's fields, and one whose own
 * fields include names xfetch uses (with values an entry could hold). */
static const char *const shapes[][7] = {
    {"name", "bob", "email", "bob@example.com", NULL},
    {"name", "bob", "e", "99999999999999", "v", "1", NULL},
};
#define NSHAPES (sizeof shapes / sizeof shapes[0])

/* key := the hash of shape (any TTL dropped). */
static void plant(redisContext *r, const char *key, const char *const *shape) {
  freeReplyObject(xft_cmd(r, "DEL %s", key));
  for (int i = 0; shape[i]; i += 2)
    freeReplyObject(xft_cmd(r, "HSET %s %s %s", key, shape[i], shape[i + 1]));
}

/* key still holds exactly the hash of shape, with no TTL. */
static void expect_untouched(redisContext *r, const char *key, const char *const *shape,
                             const char *what) {
  redisReply *t = xft_cmd(r, "TYPE %s", key);
  cr_expect_str_eq(t->str, "hash", "%s: %s became a %s", what, key, t->str);
  freeReplyObject(t);
  int n = 0;
  for (; shape[n]; n += 2) {
    redisReply *v = xft_cmd(r, "HGET %s %s", key, shape[n]);
    cr_expect(v->type == REDIS_REPLY_STRING && strcmp(v->str, shape[n + 1]) == 0,
              "%s: field %s of %s changed", what, shape[n], key);
    freeReplyObject(v);
  }
  cr_expect_eq(xft_int(r, "HLEN %s", key), n / 2, "%s: fields added to %s", what, key);
  cr_expect_eq(xft_int(r, "PTTL %s", key), -1, "%s: a TTL on %s", what, key);
}

static xf_options options(int format) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_port();
  o.seed = 7;
  o.entry_format = format;
  return o;
}

/* ---- the sans-I/O call over a raw socket ----------------------------------------- */

static xf_reply *exchange(redisContext *sock, xf_reader *rd, const xf_call *call) {
  return xft_call_exchange(sock->fd, rd, call, 0);
}

/* Runs call to its end (a LOAD is answered and counted in *loads); its code. */
static int call_run(xf_call *call, int *loads) {
  redisContext *sock = xft_redis();
  xf_reader *rd;
  cr_assert_eq(xf_reader_open(&rd), XF_OK);
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    cr_assert(step == XF_CALL_SEND || step == XF_CALL_LOAD, "step %d", step);
    if (step == XF_CALL_LOAD)
      (*loads)++;
    step = step == XF_CALL_SEND
               ? xf_call_reply(call, exchange(sock, rd, call), xft_now_ms())
               : xf_call_loaded(call, "loaded", 6, 1000, xft_now_ms());
  }
  int rc = xf_call_result(call, NULL);
  xf_call_free(call);
  xf_reader_close(rd);
  redisFree(sock);
  return rc;
}

/* ---- xf_async on libevent ---------------------------------------------------------- */

typedef struct run {
  struct event_base *base;
  int done, rc, loads;
} run;

static void on_done(int rc, const xf_value *v, void *privdata) {
  (void)v;
  run *r = privdata;
  r->rc = rc;
  r->done = 1;
  event_base_loopbreak(r->base);
}

static void async_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key, (void)keylen;
  ((run *)ud)->loads++;
  xf_async_load_done(load, "loaded", 6);
}

/* One get-or-compute of key on ac; its code (the loads are counted in r). */
static int async_get(xf_async *ac, run *r, const char *key) {
  xf_policy p = XF_POLICY_INIT;
  r->done = 0;
  cr_assert_eq(
      xf_async_get_or_compute(ac, key, strlen(key), &p, async_loader, r, on_done, r),
      XF_OK);
  while (!r->done)
    event_base_dispatch(r->base);
  return r->rc;
}

/* ---- get-or-compute on every driver ------------------------------------------------- */

/* One driver's handle, open for a few calls. */
typedef struct handle {
  int driver;
  xf_client *c;
  xf_pool *pool;
  xf_async *ac;
  run r;
  xft_loader ld;
  int call_loads;
} handle;

static void handle_open(handle *h, int driver, const xf_options *o) {
  memset(h, 0, sizeof *h);
  h->driver = driver;
  h->ld = (xft_loader){.value = "loaded", .len = 6};
  xf_options co = *o;
  co.lazy_connect = driver == CALL; /* no socket of its own: the test's is the wire */
  if (driver == ASYNC) {
    h->r.base = event_base_new();
    cr_assert_not_null(h->r.base);
    cr_assert_eq(xf_async_open_libevent(&h->ac, o, h->r.base), XF_OK);
  } else if (driver == POOL) {
    cr_assert_eq(xf_pool_open(&h->pool, o, 2, 0), XF_OK);
  } else {
    cr_assert_eq(xf_client_open(&h->c, &co), XF_OK);
  }
}

static void handle_close(handle *h) {
  xf_async_close(h->ac);
  if (h->r.base)
    event_base_free(h->r.base);
  xf_pool_close(h->pool);
  xf_client_close(h->c);
}

/* The loads the handle's calls ran so far. */
static int handle_loads(handle *h) {
  return __atomic_load_n(&h->ld.calls, __ATOMIC_SEQ_CST) + h->r.loads + h->call_loads;
}

/* One get-or-compute of key on the handle's driver; its code. The batch
 * asks for key beside other (a missing key it loads): only key fails. */
static int get_or_compute(handle *h, const char *key, const char *other) {
  xf_policy p = XF_POLICY_INIT;
  xf_value v = {0};
  int rc;
  size_t len = strlen(key);
  switch (h->driver) {
  case ASYNC:
    return async_get(h->ac, &h->r, key);
  case POOL:
    rc = xf_pool_get_or_compute(h->pool, key, len, &p, xft_load, &h->ld, &v);
    break;
  case BLOCKING:
    rc = xf_get_or_compute(h->c, key, len, &p, xft_load, &h->ld, &v);
    break;
  case BATCH: {
    const char *keys[2] = {key, other};
    size_t lens[2] = {len, strlen(other)};
    xf_value vs[2] = {{0}};
    int rcs[2];
    cr_assert_eq(xf_get_or_compute_many(h->c, 2, keys, lens, &p, xft_load, &h->ld, vs, rcs),
                 XF_OK, "%s", xf_errmsg(h->c));
    cr_expect_eq(rcs[1], XF_OK, "the other key: %d", rcs[1]);
    cr_expect_str_eq(vs[1].data, "loaded");
    h->ld.calls--; /* the other key's load */
    xf_value_free(&vs[0]);
    xf_value_free(&vs[1]);
    return rcs[0];
  }
  default: {
    xf_call *call;
    cr_assert_eq(xf_call_start(&call, h->c, key, len, &p, xft_now_ms()), XF_OK);
    return call_run(call, &h->call_loads);
  }
  }
  xf_value_free(&v);
  return rc;
}

/* driver x client format (1, 2) x shape */
ParameterizedTestParameters(foreign, get_or_compute_leaves_a_foreign_hash) {
  static int params[NDRIVERS * 2 * NSHAPES];
  for (int i = 0; i < (int)(NDRIVERS * 2 * NSHAPES); i++)
    params[i] = i;
  return cr_make_param_array(int, params, NDRIVERS * 2 * NSHAPES);
}

ParameterizedTest(int *param, foreign, get_or_compute_leaves_a_foreign_hash) {
  int driver = *param / (2 * (int)NSHAPES), format = 1 + *param / (int)NSHAPES % 2;
  const char *const *shape = shapes[*param % (int)NSHAPES];
  char key[64], warm[64], other[64], what[64];
  snprintf(key, sizeof key, "foreign:goc:%d", *param);
  snprintf(warm, sizeof warm, "foreign:goc:%d:warm", *param);
  snprintf(what, sizeof what, "%s, format %d, shape %d", driver_names[driver], format,
           *param % (int)NSHAPES);
  redisContext *r = xft_redis();
  xf_options o = options(format);
  handle h;
  handle_open(&h, driver, &o);
  /* Round 0 on a handle with no clock estimate (the read script reads);
   * round 1 after a call that gave it one (the plain read: HMGET or GET). */
  for (int round = 0; round < 2; round++) {
    plant(r, key, shape);
    snprintf(other, sizeof other, "foreign:goc:%d:other%d", *param, round);
    freeReplyObject(xft_cmd(r, "DEL %s", other));
    int before = handle_loads(&h), rc = get_or_compute(&h, key, other);
    cr_expect_eq(rc, XF_EWRONGTYPE, "%s, round %d: rc %d (%s)", what, round, rc,
                 xf_strerror(rc));
    cr_expect_eq(handle_loads(&h) - before, 0, "%s, round %d: the loader ran", what, round);
    expect_untouched(r, key, shape, what);
    freeReplyObject(xft_cmd(r, "DEL %s", warm));
    cr_assert_eq(get_or_compute(&h, warm, other), XF_OK, "%s: a missing key", what);
  }
  handle_close(&h);
  redisFree(r);
}

/* ---- get, set, delete: blocking, pool, the call ------------------------------------ */

enum { OP_GET, OP_SET, OP_DELETE, NOPS };
static const char *const op_names[] = {"get", "set", "delete"};
static const int op_drivers[] = {BLOCKING, POOL, CALL};
#define NOP_DRIVERS 3

/* op on key through the handle (blocking, pool or call); its code. */
static int op_run(handle *h, int op, const char *key) {
  xf_policy p = XF_POLICY_INIT;
  size_t len = strlen(key);
  if (h->driver == POOL)
    return op == OP_SET ? xf_pool_set(h->pool, key, len, "x", 1, &p)
                        : xf_pool_delete(h->pool, key, len); /* the pool has no get */
  if (h->driver == CALL) {
    xf_call *call;
    int64_t now = xft_now_ms();
    cr_assert_eq(op == OP_GET   ? xf_call_start_get(&call, h->c, key, len, now)
                 : op == OP_SET ? xf_call_start_set(&call, h->c, key, len, "x", 1, &p, now)
                                : xf_call_start_delete(&call, h->c, key, len, now),
                 XF_OK);
    return call_run(call, &h->call_loads);
  }
  if (op == OP_GET) {
    xf_value v = {0};
    int rc = xf_get(h->c, key, len, &v);
    xf_value_free(&v);
    return rc;
  }
  return op == OP_SET ? xf_set(h->c, key, len, "x", 1, &p) : xf_delete(h->c, key, len);
}

/* op x driver x client format (1, 2) x shape */
#define NOP_PARAMS (NOPS * NOP_DRIVERS * 2 * NSHAPES)
ParameterizedTestParameters(foreign, get_set_and_delete_leave_a_foreign_hash) {
  static int params[NOP_PARAMS];
  int n = 0;
  for (int i = 0; i < (int)NOP_PARAMS; i++)
    if (!(i / (int)(NOP_DRIVERS * 2 * NSHAPES) == OP_GET &&
          op_drivers[i / (int)(2 * NSHAPES) % NOP_DRIVERS] == POOL))
      params[n++] = i;
  return cr_make_param_array(int, params, (size_t)n);
}

ParameterizedTest(int *param, foreign, get_set_and_delete_leave_a_foreign_hash) {
  int op = *param / (int)(NOP_DRIVERS * 2 * NSHAPES);
  int driver = op_drivers[*param / (int)(2 * NSHAPES) % NOP_DRIVERS];
  int format = 1 + *param / (int)NSHAPES % 2;
  const char *const *shape = shapes[*param % (int)NSHAPES];
  char key[64], warm[64], what[96];
  snprintf(key, sizeof key, "foreign:op:%d", *param);
  snprintf(warm, sizeof warm, "foreign:op:%d:warm", *param);
  snprintf(what, sizeof what, "%s, %s, format %d, shape %d", op_names[op],
           driver_names[driver], format, *param % (int)NSHAPES);
  redisContext *r = xft_redis();
  xf_options o = options(format);
  handle h;
  handle_open(&h, driver, &o);
  for (int round = 0; round < 2; round++) { /* as get_or_compute's: no clock, then one */
    plant(r, key, shape);
    int rc = op_run(&h, op, key);
    cr_expect_eq(rc, XF_EWRONGTYPE, "%s, round %d: rc %d (%s)", what, round, rc,
                 xf_strerror(rc));
    expect_untouched(r, key, shape, what);
    freeReplyObject(xft_cmd(r, "DEL %s", warm));
    cr_assert_eq(get_or_compute(&h, warm, warm), XF_OK, "%s: a missing key", what);
  }
  handle_close(&h);
  redisFree(r);
}

/* ---- what stays an entry ------------------------------------------------------------ */

/* A hash holding only xfetch's fields, with values xfetch never writes, is a
 * malformed entry: a counted miss, loaded and overwritten. */
Test(foreign, a_hash_of_only_entry_fields_is_a_malformed_entry) {
  redisContext *r = xft_redis();
  for (int format = 1; format <= 2; format++) {
    xf_options o = options(format);
    xf_client *c;
    cr_assert_eq(xf_client_open(&c, &o), XF_OK);
    freeReplyObject(xft_cmd(r, "DEL foreign:ours"));
    freeReplyObject(xft_cmd(r, "HSET foreign:ours v old e soon d x"));
    xft_loader ld = {.value = "fresh", .len = 5};
    xf_policy p = XF_POLICY_INIT;
    xf_value v;
    cr_assert_eq(xf_get_or_compute(c, "foreign:ours", 12, &p, xft_load, &ld, &v), XF_OK,
                 "format %d: %s", format, xf_errmsg(c));
    cr_expect_str_eq(v.data, "fresh");
    xf_value_free(&v);
    cr_expect_eq(ld.calls, 1);
    xf_stats s;
    xf_client_stats(c, &s);
    cr_expect_eq(s.malformed, 1, "format %d", format);
    xf_client_close(c);
  }
  redisFree(r);
}
