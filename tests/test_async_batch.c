/* What a binding builds on the event-loop driver (xf_async on libuv), against
 * a real Redis: corked hits go as one MGET (xf_async_cork, xf_async_uncork);
 * a fail-open load goes through the handle's share, so another handle's call
 * is served its value ("local") without loading; a loader completes through
 * its sink (xf_async_load_sink, xf_async_load_complete).
 *
 * Timing margin: the corked round is judged exactly only while the
 * connection's clock estimate is fresh (younger than 0.5 s, half its refresh
 * period; learned after `learning`): if everything took under 0.49 s (2-3 ms
 * on a quiet machine). Past it the round may refresh the estimate with one
 * read script, and then reads no key alone besides. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <xfetch_libuv.h>

#include "fixture.h"

#define NKEYS 10
#define FRESH_MS 490

typedef struct tally {
  int fired, ok, wrong, loads;
  int rc[NKEYS];
  xf_source source[NKEYS];
} tally;

typedef struct slot {
  tally *t;
  int i;
  const char *want;
} slot;

static void on_done(int rc, const xf_value *v, void *privdata) {
  slot *s = privdata;
  s->t->fired++;
  s->t->rc[s->i] = rc;
  if (rc != XF_OK)
    return;
  s->t->ok++;
  s->t->source[s->i] = v->source;
  if (v->len != strlen(s->want) || memcmp(v->data, s->want, v->len) != 0)
    s->t->wrong++;
}

/* The loader: the key is the value. */
static void load_key(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  ((tally *)ud)->loads++;
  xf_async_load_done(load, key, keylen);
}

static xf_async *open_on(uv_loop_t *loop, int port, xf_share *share) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.seed = 11;
  o.lazy_connect = 1;
  o.share = share;
  o.entry_format = XF_ENTRY_STRING; /* the format whose hit is a GET */
  xf_async *ac = NULL;
  cr_assert_eq(xf_async_open_libuv(&ac, &o, loop), XF_OK);
  return ac;
}

/* get-or-compute of keys[0..n) on ac (corked: sent at once, then uncorked),
 * the loop run until every callback fired. */
static void round_of(uv_loop_t *loop, xf_async *ac, char keys[][32], int n, int corked,
                     tally *t) {
  static slot slots[NKEYS];
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 600000;
  p.beta = 0; /* no early refresh: every warm read is a hit */
  memset(t, 0, sizeof *t);
  if (corked)
    xf_async_cork(ac);
  for (int i = 0; i < n; i++) {
    slots[i] = (slot){t, i, keys[i]};
    cr_assert_eq(xf_async_get_or_compute(ac, keys[i], strlen(keys[i]), &p, load_key, t,
                                         on_done, &slots[i]),
                 XF_OK);
  }
  if (corked)
    xf_async_uncork(ac);
  int64_t deadline = xft_now_ms() + 10000; /* a hang guard only */
  while (t->fired < n && xft_now_ms() < deadline)
    uv_run(loop, UV_RUN_ONCE);
  cr_assert_eq(t->fired, n, "every callback fires");
  cr_assert_eq(t->wrong, 0);
}

/* A loop and a redis-server of the test's own: its command counts are the
 * test's alone. */
typedef struct bed {
  uv_loop_t loop;
  xft_server own;
  redisContext *r;
} bed;

static void bed_open(bed *b) {
  cr_assert_eq(uv_loop_init(&b->loop), 0);
  cr_assert_eq(xft_server_start(&b->own, NULL), 0);
  b->r = xft_redis_port(b->own.port);
}

static void bed_close(bed *b) {
  uv_run(&b->loop, UV_RUN_DEFAULT); /* the closed handles' last events */
  uv_loop_close(&b->loop);
  redisFree(b->r);
  xft_server_stop(&b->own);
}

Test(async_batch, corked_hits_go_as_one_mget) {
  bed b;
  bed_open(&b);
  uv_loop_t *loop = &b.loop;
  redisContext *r = b.r;
  char keys[NKEYS][32];
  for (int i = 0; i < NKEYS; i++)
    snprintf(keys[i], sizeof keys[i], "corked:%d:%lld", i, (long long)xft_now_ms());
  xf_async *ac = open_on(loop, b.own.port, NULL);
  tally t;
  int64_t learning = xft_now_ms();
  round_of(loop, ac, keys, NKEYS, 1, &t); /* cold: loads and writes */
  cr_assert_eq(t.loads, NKEYS);
  round_of(loop, ac, keys, NKEYS, 1, &t); /* warm: the connection's clock, learned */

  long long mget = xft_command_calls(r, "mget"), get = xft_command_calls(r, "get");
  round_of(loop, ac, keys, NKEYS, 0, &t); /* uncorked: a GET each */
  cr_assert_eq(t.ok, NKEYS);
  int fresh = xft_now_ms() - learning < FRESH_MS;
  if (fresh) {
    cr_expect_eq(xft_command_calls(r, "get") - get, NKEYS);
    cr_expect_eq(xft_command_calls(r, "mget") - mget, 0);
  }

  mget = xft_command_calls(r, "mget"), get = xft_command_calls(r, "get");
  round_of(loop, ac, keys, NKEYS, 1, &t); /* corked: one MGET */
  fresh = xft_now_ms() - learning < FRESH_MS;
  cr_assert_eq(t.ok, NKEYS);
  cr_assert_eq(t.loads, 0, "every key was a hit");
  for (int i = 0; i < NKEYS; i++)
    cr_expect_eq(t.source[i], XF_SOURCE_CACHE);
  if (fresh) {
    cr_expect_eq(xft_command_calls(r, "mget") - mget, 1);
    cr_expect_eq(xft_command_calls(r, "get") - get, 0);
  } else {
    cr_expect_leq(xft_command_calls(r, "mget") - mget, 1);
  }
  xf_async_close(ac);
  bed_close(&b);
}

/* With autocork, the calls started while one is in flight (a burst of
 * concurrent requests) go together on the loop's next turn: the first one's
 * GET, then one MGET for the others; without it, a GET each (the test
 * above). Counted only while the connection's clock estimate is fresh
 * (FRESH_MS: else a read script refreshes it first). */
Test(async_batch, autocork_sends_the_hits_of_calls_started_together_as_one_mget) {
  bed b;
  bed_open(&b);
  char keys[NKEYS][32];
  for (int i = 0; i < NKEYS; i++)
    snprintf(keys[i], sizeof keys[i], "auto:%d:%lld", i, (long long)xft_now_ms());
  xf_async *ac = open_on(&b.loop, b.own.port, NULL);
  xf_async_set_autocork(ac, 1);
  tally t;
  round_of(&b.loop, ac, keys, NKEYS, 0, &t); /* cold: loads and writes */
  cr_assert_eq(t.loads, NKEYS);
  int64_t learning = xft_now_ms();
  round_of(&b.loop, ac, keys, NKEYS, 0, &t); /* warm: the connection's clock, learned */
  int tries = 0, fresh = 0;
  long long mget = 0, get = 0;
  while (!fresh && tries++ < 5) { /* a busy machine may take a round past FRESH_MS */
    if (xft_now_ms() - learning >= FRESH_MS / 2) {
      round_of(&b.loop, ac, keys, NKEYS, 0, &t); /* a read script learns the clock again */
      learning = xft_now_ms();
    }
    mget = xft_command_calls(b.r, "mget"), get = xft_command_calls(b.r, "get");
    round_of(&b.loop, ac, keys, NKEYS, 0, &t);
    cr_assert_eq(t.ok, NKEYS);
    cr_assert_eq(t.loads, 0, "every key was a hit");
    fresh = xft_now_ms() - learning < FRESH_MS;
    mget = xft_command_calls(b.r, "mget") - mget, get = xft_command_calls(b.r, "get") - get;
  }
  cr_assert(fresh, "no round within %d ms of the clock's estimate in 5 tries", FRESH_MS);
  cr_expect_eq(get, 1, "the first call's GET alone");
  cr_expect_eq(mget, 1, "the other %d hits in one MGET", NKEYS - 1);
  xf_async_close(ac);
  bed_close(&b);
}

Test(async_batch, a_fail_open_load_is_served_to_another_handle_from_the_share) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  xf_share *share = NULL;
  xf_share_options so = {0};
  cr_assert_eq(xf_share_open(&share, &so), XF_OK);
  int dead = xft_free_port(); /* nothing listens: every call fails open */
  xf_async *a = open_on(&loop, dead, share), *b = open_on(&loop, dead, share);
  char keys[1][32] = {"shared-down"};
  tally t;
  round_of(&loop, a, keys, 1, 0, &t);
  cr_assert_eq(t.rc[0], XF_OK);
  cr_expect_eq(t.source[0], XF_SOURCE_UNCACHED);
  cr_expect_eq(t.loads, 1);
  round_of(&loop, b, keys, 1, 0, &t);
  cr_assert_eq(t.rc[0], XF_OK);
  cr_expect_eq(t.source[0], XF_SOURCE_LOCAL, "the share's value, source %d", t.source[0]);
  cr_expect_eq(t.loads, 0, "the other handle loads nothing");
  xf_async_close(a);
  xf_async_close(b);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  xf_share_close(share);
}

/* A loader that completes through its sink: its ttl and value, or a failure. */
static void load_by_sink(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  (void)key, (void)keylen;
  tally *t = ud;
  t->loads++;
  xf_sink *s = xf_async_load_sink(load);
  cr_assert_not_null(s);
  if (t->loads > 1) { /* the second call: fails */
    xf_async_load_complete(load, XF_ELOADER);
    return;
  }
  cr_expect_eq(xf_sink_ttl(s, 20000), XF_OK);
  cr_expect_eq(xf_sink_set(s, "by-sink", 7), XF_OK);
  xf_async_load_complete(load, XF_OK);
}

static void on_result(int rc, const xf_value *v, void *privdata) {
  slot *s = privdata;
  s->t->fired++;
  s->t->rc[0] = rc;
  if (rc == XF_OK)
    s->t->wrong += v->len != 7 || memcmp(v->data, "by-sink", 7) != 0;
}

Test(async_batch, a_loader_completes_through_its_sink) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  redisContext *r = xft_redis();
  xf_async *ac = open_on(&loop, xft_port(), NULL);
  char key[48];
  snprintf(key, sizeof key, "by-sink:%lld", (long long)xft_now_ms());
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 600000;
  tally t = {0};
  slot s = {&t, 0, NULL};
  for (int round = 0; round < 2; round++) {
    if (round == 1) /* gone: the second load runs, and fails */
      freeReplyObject(xft_cmd(r, "DEL %s", key));
    int fired = t.fired;
    cr_assert_eq(
        xf_async_get_or_compute(ac, key, strlen(key), &p, load_by_sink, &t, on_result, &s),
        XF_OK);
    int64_t deadline = xft_now_ms() + 10000;
    while (t.fired == fired && xft_now_ms() < deadline)
      uv_run(&loop, UV_RUN_ONCE);
    if (round == 0) {
      cr_assert_eq(t.rc[0], XF_OK);
      cr_expect_eq(t.wrong, 0);
      long long pttl = xft_int(r, "PTTL %s", key);
      cr_expect(pttl > 0 && pttl <= 20000, "the sink's ttl: PTTL %lld", pttl);
    } else {
      cr_expect_eq(t.rc[0], XF_ELOADER, "rc %d", t.rc[0]);
    }
  }
  cr_expect_eq(t.loads, 2);
  xf_async_close(ac);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  redisFree(r);
}

static void on_get(int rc, const xf_value *v, void *privdata) {
  (void)v;
  *(int *)privdata = rc == XF_OK || rc == XF_ENOTFOUND ? 1 : -1;
}

/* An eager handle writes a call's command as xf_async_get returns: Redis runs
 * it while the loop never turns; a handle left as it opened does not (its
 * commands wait for the loop's writable event). Polled up to 5 s (a busy
 * machine), and the lazy handle watched 300 ms: nothing writes without the
 * loop, so no margin decides its outcome. */
Test(async_batch, an_eager_handle_writes_as_the_call_starts) {
  bed b;
  bed_open(&b);
  uv_loop_t *loop = &b.loop;
  redisContext *r = b.r;
  for (int eager = 0; eager < 2; eager++) {
    xf_async *ac = open_on(loop, b.own.port, NULL);
    xf_async_set_eager(ac, eager);
    int done = 0;
    cr_assert_eq(xf_async_get(ac, "eager-probe", 11, on_get, &done), XF_OK);
    while (!done) /* connected, the setup over, the first get answered */
      uv_run(loop, UV_RUN_ONCE);
    long long before = xft_command_calls(r, "get");
    done = 0;
    cr_assert_eq(xf_async_get(ac, "eager-probe", 11, on_get, &done), XF_OK);
    int64_t deadline = xft_now_ms() + (eager ? 5000 : 300);
    while (xft_command_calls(r, "get") == before && xft_now_ms() < deadline)
      xft_sleep_ms(5);
    if (eager)
      cr_expect_eq(xft_command_calls(r, "get") - before, 1, "written as the get started");
    else
      cr_expect_eq(xft_command_calls(r, "get") - before, 0, "written by the loop only");
    while (!done)
      uv_run(loop, UV_RUN_ONCE);
    xf_async_close(ac);
  }
  bed_close(&b);
}
