/* The write fence (options.write_fence) against a real redis-server: a write
 * that changes an entry (a load's write, xf_set, xf_delete) is followed by
 * one PING on the same connection before the call returns, so that Redis has
 * sent the invalidations the write caused before the writer holds its
 * acknowledgement (docs/design.md, "The near cache"). Counted with INFO commandstats, on
 * every driver (blocking, batch, pool, xf_async on libevent, the sans-I/O
 * call): on by default with a near cache, forced on or off by the option. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>
#include <unistd.h>
#include <xfetch_libevent.h>

#include "fixture.h"

enum { BLOCKING, BATCH, POOL, ASYNC, CALL, NDRIVERS };
static const char *const driver_names[] = {"blocking", "batch", "pool", "async", "call"};

/* How a client is opened, and whether its writes are fenced then. */
typedef struct mode {
  int near;  /* on a share with a near cache */
  int fence; /* options.write_fence */
  int fenced;
} mode;
static const mode modes[] = {
    {1, XF_FENCE_AUTO, 1}, /* the default with a near cache */
    {1, XF_FENCE_OFF, 0},
    {0, XF_FENCE_ON, 1}, /* a writer without a near cache in a near-cache fleet */
    {0, XF_FENCE_AUTO, 0},
};
#define NMODES (sizeof modes / sizeof modes[0])

typedef struct env {
  xft_server srv;
  xf_share *share;
  xf_options o;
  redisContext *raw;
} env;

static void env_open(env *e, const mode *m) {
  memset(e, 0, sizeof *e);
  cr_assert_eq(xft_server_start(&e->srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = 1u << 20};
  if (m->near)
    cr_assert_eq(xf_share_open(&e->share, &so), XF_OK);
  e->o = (xf_options)XF_OPTIONS_INIT;
  e->o.port = e->srv.port;
  e->o.share = e->share;
  e->o.write_fence = m->fence;
  e->o.seed = 5;
  e->raw = xft_redis_port(e->srv.port);
}

static void env_close(env *e) {
  redisFree(e->raw);
  xf_share_close(e->share);
  xft_server_stop(&e->srv);
}

static long long pings(env *e) { return xft_command_calls(e->raw, "ping"); }

/* ---- the sans-I/O call over a raw socket (as tests/test_call.c) ---------------- */

static xf_reply *exchange(redisContext *sock, xf_reader *rd, const xf_call *call,
                          int *saw_ping) {
  size_t len;
  const char *req = xf_call_request(call, &len);
  cr_assert_not_null(req);
  if (len >= 14 && memcmp(req, "*1\r\n$4\r\nPING\r\n", 14) == 0)
    (*saw_ping)++;
  return xft_call_exchange(sock->fd, rd, call, 0);
}

/* Runs a get-or-compute (data NULL) or a set as calls; the PINGs among the
 * requests it made. */
static int call_run(env *e, xf_client *c, const char *key, const char *data) {
  redisContext *sock = xft_redis_port(e->srv.port);
  xf_reader *rd;
  cr_assert_eq(xf_reader_open(&rd), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  xf_call *call;
  cr_assert_eq(data ? xf_call_start_set(&call, c, key, strlen(key), data, strlen(data), &p,
                                        xft_now_ms())
                    : xf_call_start(&call, c, key, strlen(key), &p, xft_now_ms()),
               XF_OK);
  int saw = 0;
  for (xf_call_step step = xf_call_next(call); step != XF_CALL_DONE;) {
    cr_assert(step == XF_CALL_SEND || step == XF_CALL_LOAD);
    step = step == XF_CALL_SEND
               ? xf_call_reply(call, exchange(sock, rd, call, &saw), xft_now_ms())
               : xf_call_loaded(call, "loaded", 6, 1000, xft_now_ms());
  }
  xf_value v;
  cr_assert_eq(xf_call_result(call, data ? NULL : &v), XF_OK, "%s", xf_call_errmsg(call));
  if (!data) {
    cr_assert_str_eq(v.data, "loaded");
    xf_value_free(&v);
  }
  xf_call_free(call);
  xf_reader_close(rd);
  redisFree(sock);
  return saw;
}

/* ---- xf_async on libevent -------------------------------------------------------- */

typedef struct run {
  struct event_base *base;
  int done, rc;
} run;

static void on_done(int rc, const xf_value *v, void *privdata) {
  (void)v;
  run *r = privdata;
  r->rc = rc;
  r->done = 1;
  event_base_loopbreak(r->base);
}

static void async_loader(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)ud, (void)key, (void)keylen;
  xf_async_load_done(load, "loaded", 6);
}

static void async_get(env *e, const char *key) {
  run r = {.base = event_base_new()};
  cr_assert_not_null(r.base);
  xf_async *ac;
  cr_assert_eq(xf_async_open_libevent(&ac, &e->o, r.base), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(
      xf_async_get_or_compute(ac, key, strlen(key), &p, async_loader, NULL, on_done, &r),
      XF_OK);
  while (!r.done)
    event_base_dispatch(r.base);
  cr_assert_eq(r.rc, XF_OK, "%s", xf_async_errmsg(ac));
  xf_async_close(ac);
  event_base_free(r.base);
}

/* ---- one body over drivers and modes ------------------------------------------- */

/* One get-or-compute of a missing key (a load, then its write) on driver;
 * how many PINGs Redis ran for it. */
static long long load_and_write(env *e, int driver, const char *key) {
  xft_loader ld = {.value = "loaded", .len = 6};
  xf_policy p = XF_POLICY_INIT;
  xf_value v;
  long long before = pings(e), saw = -1;
  if (driver == BLOCKING || driver == BATCH || driver == CALL) {
    xf_client *c;
    if (driver == CALL) { /* no socket of its own: the test's is the wire */
      e->o.lazy_connect = 1;
      e->o.share = NULL; /* the call's near cache needs tracking set up by hand */
    }
    cr_assert_eq(xf_client_open(&c, &e->o), XF_OK);
    if (driver == CALL) {
      saw = call_run(e, c, key, NULL);
    } else if (driver == BLOCKING) {
      cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, xft_load, &ld, &v), XF_OK,
                   "%s", xf_errmsg(c));
      xf_value_free(&v);
    } else {
      const char *keys[2] = {key, "fence:other"};
      size_t lens[2] = {strlen(key), strlen(keys[1])};
      xf_value vs[2];
      int rcs[2];
      cr_assert_eq(xf_get_or_compute_many(c, 2, keys, lens, &p, xft_load, &ld, vs, rcs),
                   XF_OK, "%s", xf_errmsg(c));
      for (int i = 0; i < 2; i++) {
        cr_assert_eq(rcs[i], XF_OK);
        xf_value_free(&vs[i]);
      }
    }
    xf_client_close(c);
  } else if (driver == POOL) {
    xf_pool *pool;
    cr_assert_eq(xf_pool_open(&pool, &e->o, 2, 0), XF_OK);
    cr_assert_eq(xf_pool_get_or_compute(pool, key, strlen(key), &p, xft_load, &ld, &v),
                 XF_OK, "%s", xf_pool_errmsg());
    xf_value_free(&v);
    xf_pool_close(pool);
  } else {
    async_get(e, key);
  }
  long long ran = pings(e) - before;
  if (driver == CALL)
    cr_assert_eq(ran, saw, "the call's requests and Redis disagree");
  return ran;
}

/* Every driver in every mode but the call with a near cache: its tracking is
 * set up by its own driver (a link: test_call_link.c). */
ParameterizedTestParameters(fence, a_loads_write_is_fenced_on_every_driver) {
  static int params[NDRIVERS * NMODES];
  int n = 0;
  for (int i = 0; i < (int)(NDRIVERS * NMODES); i++)
    if (!(i / (int)NMODES == CALL && modes[i % (int)NMODES].near))
      params[n++] = i;
  return cr_make_param_array(int, params, (size_t)n);
}

ParameterizedTest(int *param, fence, a_loads_write_is_fenced_on_every_driver) {
  int driver = *param / (int)NMODES;
  const mode *m = &modes[*param % (int)NMODES];
  env e;
  env_open(&e, m);
  long long ran = load_and_write(&e, driver, "fence:k");
  /* The batch writes its two keys in two rounds (the per-key loader leases
   * one key first): a PING each. */
  long long want = m->fenced ? (driver == BATCH ? 2 : 1) : 0;
  cr_expect_eq(ran, want, "%s, near %d, write_fence %d: %lld PINGs, want %lld",
               driver_names[driver], m->near, m->fence, ran, want);
  env_close(&e);
}

/* A batch's writes of one round share one fence per connection: with the
 * batch loader, every key's write goes in one round (standalone: one
 * connection), then one PING. */
static int load_many(void *ud, size_t n, const char *const *keys, const size_t *keylens,
                     xf_sink *const *sinks) {
  (void)ud, (void)keys, (void)keylens;
  for (size_t i = 0; i < n; i++)
    if (xf_sink_set(sinks[i], "loaded", 6) != XF_OK)
      return 1;
  return 0;
}

ParameterizedTestParameters(fence, a_batch_round_of_writes_shares_one_fence) {
  static int params[NMODES];
  for (int i = 0; i < (int)NMODES; i++)
    params[i] = i;
  return cr_make_param_array(int, params, NMODES);
}

ParameterizedTest(int *param, fence, a_batch_round_of_writes_shares_one_fence) {
  const mode *m = &modes[*param];
  env e;
  env_open(&e, m);
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &e.o), XF_OK);
  cr_assert_eq(xf_ping(c), XF_OK);
  enum { N = 20 };
  char buf[N][16];
  const char *keys[N];
  size_t lens[N];
  xf_value vs[N];
  int rcs[N];
  for (int i = 0; i < N; i++) {
    snprintf(buf[i], sizeof buf[i], "fence:b%d", i);
    keys[i] = buf[i];
    lens[i] = strlen(buf[i]);
  }
  xf_policy p = XF_POLICY_INIT;
  long long before = pings(&e);
  cr_assert_eq(xf_get_or_compute_many_batch(c, N, keys, lens, &p, load_many, NULL, vs, rcs),
               XF_OK, "%s", xf_errmsg(c));
  for (int i = 0; i < N; i++) {
    cr_assert_eq(rcs[i], XF_OK);
    cr_assert_str_eq(vs[i].data, "loaded");
    xf_value_free(&vs[i]);
  }
  cr_expect_eq(pings(&e) - before, m->fenced, "%lld PINGs for %d writes in one round",
               pings(&e) - before, N);
  xf_client_close(c);
  env_close(&e);
}

/* ---- set, delete, and what is not a write -------------------------------------- */

ParameterizedTestParameters(fence, set_and_delete_are_fenced) {
  static int params[NMODES];
  for (int i = 0; i < (int)NMODES; i++)
    params[i] = i;
  return cr_make_param_array(int, params, NMODES);
}

ParameterizedTest(int *param, fence, set_and_delete_are_fenced) {
  const mode *m = &modes[*param];
  env e;
  env_open(&e, m);
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &e.o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_ping(c), XF_OK); /* connected: xf_ping's own PING counted before */
  long long before = pings(&e);
  cr_assert_eq(xf_set(c, "fence:s", 7, "v", 1, &p), XF_OK, "%s", xf_errmsg(c));
  cr_expect_eq(pings(&e) - before, m->fenced, "xf_set: near %d, write_fence %d", m->near,
               m->fence);
  before = pings(&e);
  cr_assert_eq(xf_delete(c, "fence:s", 7), XF_OK, "%s", xf_errmsg(c));
  cr_expect_eq(pings(&e) - before, m->fenced, "xf_delete");
  /* A hit, a get: no write, no fence. */
  cr_assert_eq(xf_set(c, "fence:h", 7, "v", 1, &p), XF_OK);
  before = pings(&e);
  xf_value v;
  cr_assert_eq(xf_get(c, "fence:h", 7, &v), XF_OK);
  xf_value_free(&v);
  cr_expect_eq(pings(&e) - before, 0, "a get sent a PING");
  xf_client_close(c);
  env_close(&e);
}

Test(fence, a_set_as_a_call_sends_the_write_then_a_ping) {
  env e;
  env_open(&e, &modes[2]); /* write_fence on, no near cache */
  e.o.lazy_connect = 1;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &e.o), XF_OK);
  cr_expect_eq(call_run(&e, c, "fence:call", "v"), 1);
  xf_client_close(c);
  e.o.write_fence = XF_FENCE_AUTO;
  cr_assert_eq(xf_client_open(&c, &e.o), XF_OK);
  cr_expect_eq(call_run(&e, c, "fence:call", "w"), 0);
  xf_client_close(c);
  env_close(&e);
}

Test(fence, a_bad_write_fence_is_refused) {
  xf_options o = XF_OPTIONS_INIT;
  o.lazy_connect = 1;
  o.write_fence = 3;
  xf_client *c = NULL;
  cr_expect_eq(xf_client_open(&c, &o), XF_EINVAL);
  o.write_fence = -1;
  cr_expect_eq(xf_client_open(&c, &o), XF_EINVAL);
  cr_expect_null(c);
}

/* A fence whose PING fails does not fail an acknowledged write: the call
 * returns XF_OK, the value is written, and stats.fence_failed counts it. */
Test(fence, a_failed_fence_does_not_fail_the_write) {
  env e;
  env_open(&e, &modes[2]);
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &e.o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, "fence:f", 7, "v", 1, &p), XF_OK);
  /* PING refused by an ACL rule for the default user: the fence fails, the
   * write stands. */
  freeReplyObject(xft_cmd(e.raw, "ACL SETUSER default -ping"));
  cr_expect_eq(xf_set(c, "fence:f", 7, "w", 1, &p), XF_OK, "%s", xf_errmsg(c));
  xf_stats st;
  xf_client_stats(c, &st);
  cr_expect_eq(st.fence_failed, 1);
  freeReplyObject(xft_cmd(e.raw, "ACL SETUSER default +ping"));
  xf_value v;
  cr_assert_eq(xf_get(c, "fence:f", 7, &v), XF_OK);
  cr_expect_str_eq(v.data, "w");
  xf_value_free(&v);
  xf_client_close(c);
  env_close(&e);
}
