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
  armed = paused = released = 0;
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
