/* The near cache never serves a value its tracker thread has been told is
 * gone (issue 20's bound under load): the thread reads an invalidation
 * connection's bytes before it applies them, and a loaded machine can
 * deschedule it for milliseconds in between; the socket is then empty and
 * the entry still there. A test hook pauses the thread there, after another
 * client's write was acknowledged: a near hit must not return the old value
 * (it goes to Redis). Against a real redis-server, one per test. */
#include <criterion/criterion.h>
#include <string.h>

#include "fixture.h"
#include "near_impl.h"
#include "share.h"

#define NEAR_BYTES (1u << 20)
#define BOUND_MS 5000 /* how long a test waits for what must come (never hit) */

typedef struct stale_env {
  xft_server srv;
  xf_share *share;
  xf_client *c;     /* with the near cache */
  xf_client *other; /* another process's view: no share */
  redisContext *r;  /* raw */
} stale_env;

static xf_client *client_of(int port, xf_share *share) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.share = share;
  o.seed = 7;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static void env_open(stale_env *e) {
  memset(e, 0, sizeof *e);
  cr_assert_eq(xft_server_start(&e->srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = NEAR_BYTES};
  cr_assert_eq(xf_share_open(&e->share, &so), XF_OK);
  e->c = client_of(e->srv.port, e->share);
  e->other = client_of(e->srv.port, NULL);
  e->r = xft_redis_port(e->srv.port);
}

static void env_close(stale_env *e) {
  redisFree(e->r);
  xf_client_close(e->other);
  xf_client_close(e->c);
  xf_share_close(e->share);
  xft_server_stop(&e->srv);
}

static void put(xf_client *c, const char *key, const char *value) {
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, key, strlen(key), value, strlen(value), &p), XF_OK, "%s",
               xf_errmsg(c));
}

/* xf_get's value of key, "" when not found. */
static void get(xf_client *c, const char *key, char *buf, size_t cap) {
  xf_value v;
  int rc = xf_get(c, key, strlen(key), &v);
  cr_assert(rc == XF_OK || rc == XF_ENOTFOUND, "%s", xf_errmsg(c));
  snprintf(buf, cap, "%s", rc == XF_OK ? v.data : "");
  xf_value_free(&v);
}

static uint64_t near_hits(xf_client *c) {
  xf_stats st;
  xf_client_stats(c, &st);
  return st.near_hits;
}

static void warm(xf_client *c, const char *key, const char *want) {
  char got[64];
  uint64_t before = near_hits(c);
  int64_t until = xft_now_ms() + BOUND_MS;
  while (near_hits(c) == before && xft_now_ms() < until) {
    get(c, key, got, sizeof got);
    cr_assert_str_eq(got, want);
    if (near_hits(c) == before)
      xft_sleep_ms(1);
  }
  cr_assert_gt(near_hits(c), before, "never a near hit");
}

/* The hook: the tracker thread, having read a message, waits (bounded)
 * until the test lets it apply it. */
static int armed, paused, released;

static void pause_before_apply(void) {
  if (!__atomic_load_n(&armed, __ATOMIC_SEQ_CST) ||
      __atomic_exchange_n(&paused, 1, __ATOMIC_SEQ_CST))
    return;
  int64_t until = xft_now_ms() + BOUND_MS;
  while (!__atomic_load_n(&released, __ATOMIC_SEQ_CST) && xft_now_ms() < until)
    xft_sleep_ms(1);
}

static void await_paused(void) {
  int64_t until = xft_now_ms() + BOUND_MS;
  while (!__atomic_load_n(&paused, __ATOMIC_SEQ_CST) && xft_now_ms() < until)
    xft_sleep_ms(1);
  cr_assert(__atomic_load_n(&paused, __ATOMIC_SEQ_CST), "the tracker read nothing");
}

static void arm(void) {
  armed = paused = released = 0;
  xf__near_test_before_apply = pause_before_apply;
  __atomic_store_n(&armed, 1, __ATOMIC_SEQ_CST);
}

static void release(void) {
  __atomic_store_n(&released, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&armed, 0, __ATOMIC_SEQ_CST);
}

Test(near_stale, a_read_but_unapplied_invalidation_is_not_served_over) {
  stale_env e;
  env_open(&e);
  put(e.other, "near:s1", "old");
  warm(e.c, "near:s1", "old");
  arm();
  put(e.other, "near:s1", "new"); /* acknowledged; its invalidation read, held */
  await_paused();
  uint64_t hits = near_hits(e.c);
  char got[64];
  get(e.c, "near:s1", got, sizeof got);
  int still_paused = !__atomic_load_n(&released, __ATOMIC_SEQ_CST);
  release();
  cr_assert(still_paused);
  cr_assert_str_eq(got, "new", "a near hit served a value its tracker knew was gone");
  cr_assert_eq(near_hits(e.c), hits, "served from the near cache");
  xf__near_test_before_apply = NULL;
  env_close(&e);
}

/* The same for a FLUSHALL's message (no keys: the node's entries go). */
Test(near_stale, a_read_but_unapplied_flush_is_not_served_over) {
  stale_env e;
  env_open(&e);
  put(e.other, "near:s2", "old");
  warm(e.c, "near:s2", "old");
  arm();
  freeReplyObject(xft_cmd(e.r, "FLUSHALL"));
  await_paused();
  char got[64];
  get(e.c, "near:s2", got, sizeof got);
  release();
  cr_assert_str_eq(got, "", "a near hit served a flushed value");
  xf__near_test_before_apply = NULL;
  env_close(&e);
}

/* Other keys of the node are served from Redis meanwhile, never wrong; once
 * the thread has applied what it read, hits come back. */
Test(near_stale, hits_resume_once_applied) {
  stale_env e;
  env_open(&e);
  put(e.other, "near:s3", "a");
  put(e.other, "near:s4", "b");
  warm(e.c, "near:s3", "a");
  warm(e.c, "near:s4", "b");
  arm();
  put(e.other, "near:s3", "a2");
  await_paused();
  char got[64];
  get(e.c, "near:s4", got, sizeof got);
  cr_assert_str_eq(got, "b");
  release();
  xf__near_test_before_apply = NULL;
  warm(e.c, "near:s4", "b");
  warm(e.c, "near:s3", "a2");
  env_close(&e);
}
