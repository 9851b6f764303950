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
#include "near_env.h"
#include "near_impl.h"
#include "share.h"

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
  __atomic_store_n(&armed, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&paused, 0, __ATOMIC_SEQ_CST);
  __atomic_store_n(&released, 0, __ATOMIC_SEQ_CST);
  xf__near_test_before_apply = pause_before_apply;
  __atomic_store_n(&armed, 1, __ATOMIC_SEQ_CST);
}

static void release(void) {
  __atomic_store_n(&released, 1, __ATOMIC_SEQ_CST);
  __atomic_store_n(&armed, 0, __ATOMIC_SEQ_CST);
}

Test(near_stale, a_read_but_unapplied_invalidation_is_not_served_over) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:s1", "old");
  near_warm(e.c, "near:s1", "old");
  arm();
  near_put(e.other, "near:s1", "new"); /* acknowledged; its invalidation read, held */
  await_paused();
  uint64_t hits = near_hits(e.c);
  char got[64];
  near_get(e.c, "near:s1", got, sizeof got);
  int still_paused = !__atomic_load_n(&released, __ATOMIC_SEQ_CST);
  release();
  cr_assert(still_paused);
  cr_assert_str_eq(got, "new", "a near hit served a value its tracker knew was gone");
  cr_assert_eq(near_hits(e.c), hits, "served from the near cache");
  xf__near_test_before_apply = NULL;
  near_env_close(&e);
}

/* The same for a FLUSHALL's message (no keys: the node's entries go). */
Test(near_stale, a_read_but_unapplied_flush_is_not_served_over) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:s2", "old");
  near_warm(e.c, "near:s2", "old");
  arm();
  freeReplyObject(xft_cmd(e.r, "FLUSHALL"));
  await_paused();
  char got[64];
  near_get(e.c, "near:s2", got, sizeof got);
  release();
  cr_assert_str_eq(got, "", "a near hit served a flushed value");
  xf__near_test_before_apply = NULL;
  near_env_close(&e);
}

/* Other keys of the node are served from Redis meanwhile, never wrong; once
 * the thread has applied what it read, hits come back. */
Test(near_stale, hits_resume_once_applied) {
  near_env e;
  near_env_open(&e);
  near_put(e.other, "near:s3", "a");
  near_put(e.other, "near:s4", "b");
  near_warm(e.c, "near:s3", "a");
  near_warm(e.c, "near:s4", "b");
  arm();
  near_put(e.other, "near:s3", "a2");
  await_paused();
  char got[64];
  near_get(e.c, "near:s4", got, sizeof got);
  cr_assert_str_eq(got, "b");
  release();
  xf__near_test_before_apply = NULL;
  near_warm(e.c, "near:s4", "b");
  near_warm(e.c, "near:s3", "a2");
  near_env_close(&e);
}

/* ---- a batch's near hits (near_batch.c): checked together ---- */

#define NB 100

static int checks;
static void count_check(void) { __atomic_add_fetch(&checks, 1, __ATOMIC_SEQ_CST); }

static int no_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen, (void)sink;
  return 1; /* never called: every key is in Redis */
}

static char names[NB][32]; /* a stem and a size_t: what gcc -O0 checks fits */
static const char *keys[NB];

/* One xf_get_or_compute_many of keys[0..n): each value in got[i]. */
static void batch(xf_client *c, size_t n, char (*got)[16]) {
  size_t lens[NB];
  xf_value v[NB];
  int rcs[NB];
  for (size_t i = 0; i < n; i++)
    lens[i] = strlen(keys[i]);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_get_or_compute_many(c, n, keys, lens, &p, no_loader, NULL, v, rcs), XF_OK,
               "%s", xf_errmsg(c));
  for (size_t i = 0; i < n; i++) {
    cr_assert_eq(rcs[i], XF_OK, "key %zu: %s", i, xf_strerror(rcs[i]));
    snprintf(got[i], sizeof got[i], "%s", v[i].data);
    xf_value_free(&v[i]);
  }
}

/* n keys written as "old" by another client, then batched until one batch
 * is n near hits. */
static void warm_batch(near_env *e, size_t n, const char *stem) {
  for (size_t i = 0; i < n; i++) {
    snprintf(names[i], sizeof names[i], "%s%zu", stem, i);
    keys[i] = names[i];
    near_put(e->other, keys[i], "old");
  }
  char got[NB][16];
  int64_t until = xft_now_ms() + BOUND_MS;
  uint64_t hits = 0;
  while (hits < n && xft_now_ms() < until) {
    uint64_t before = near_hits(e->c);
    batch(e->c, n, got);
    hits = near_hits(e->c) - before;
  }
  cr_assert_eq(hits, n, "never a batch of near hits");
}

/* A batch of 100 near hits on one node checks its news once (one poll()),
 * not once per key (before: 100 checks). */
Test(near_stale, a_batch_of_near_hits_checks_each_node_once) {
  near_env e;
  near_env_open(&e);
  warm_batch(&e, NB, "near:b");
  __atomic_store_n(&checks, 0, __ATOMIC_SEQ_CST);
  xf__near_test_on_check = count_check;
  uint64_t hits = near_hits(e.c);
  char got[NB][16];
  batch(e.c, NB, got);
  xf__near_test_on_check = NULL;
  cr_assert_eq(near_hits(e.c) - hits, NB);
  cr_assert_eq(__atomic_load_n(&checks, __ATOMIC_SEQ_CST), 1, "%d checks for one batch",
               __atomic_load_n(&checks, __ATOMIC_SEQ_CST));
  near_env_close(&e);
}

/* Another client's write acknowledged while the batch looks up its keys,
 * its invalidation read by the tracker thread and not yet applied when the
 * batch checks (the sockets empty then): the batch serves the new value,
 * from Redis, for the key written, and no near hit on its node. */
static near_env *mid_env;
static void write_mid_lookup(void) {
  xf__near_test_batch_looked_up = NULL; /* once */
  arm();
  near_put(mid_env->other, keys[3], "new");
  await_paused();
}

Test(near_stale, a_batch_does_not_serve_a_key_invalidated_mid_lookup) {
  near_env e;
  near_env_open(&e);
  warm_batch(&e, 10, "near:m");
  mid_env = &e;
  xf__near_test_batch_looked_up = write_mid_lookup;
  uint64_t hits = near_hits(e.c);
  char got[NB][16];
  batch(e.c, 10, got);
  int still_paused = !__atomic_load_n(&released, __ATOMIC_SEQ_CST);
  release();
  xf__near_test_before_apply = NULL;
  cr_assert(still_paused);
  cr_assert_str_eq(got[3], "new", "a batch served a value its tracker knew was gone");
  for (int i = 0; i < 10; i++)
    if (i != 3)
      cr_assert_str_eq(got[i], "old");
  cr_assert_eq(near_hits(e.c), hits, "%llu near hits on a node with news",
               (unsigned long long)(near_hits(e.c) - hits));
  near_env_close(&e);
}
