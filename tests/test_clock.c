/* The hit path's clock (src/core/clock.c): a hit is a plain read (GET of a
 * format-2 string, HMGET of a format-1 hash), the server's time estimated per
 * connection. The estimate's bounds always hold
 * the server's time; a client whose own clock is off by an hour, or jumps,
 * keeps every promise (no value past e + stale, XFetch refreshes early,
 * leases expire); and old clients (the read script) and new ones (the plain read) on
 * one hot key load it once per episode. Real redis-server. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "client_io.h"
#include "clock.h"
#include "entry.h"
#include "fixture.h"
#include "fleet.h"

/* ---- the estimate alone ------------------------------------------------------ */

/* A server whose clock is driver + off ms; requests that take rtt ms. */
static void learn_at(xf__clock *k, int64_t off, int64_t sent, int64_t rtt, int64_t at) {
  xf__clock_learn(k, sent + at + off, sent, sent + rtt);
}

Test(clock, the_bounds_hold_the_servers_time) {
  static const int64_t offs[] = {0, 3600000, -3600000, 1700000000000LL, 17};
  for (size_t i = 0; i < sizeof offs / sizeof *offs; i++)
    for (int64_t rtt = 0; rtt < 40; rtt += 7)
      for (int64_t at = 0; at <= rtt; at++) {
        xf__clock k;
        xf__clock_reset(&k);
        learn_at(&k, offs[i], 10000000, rtt, at);
        for (int64_t later = 0; later <= XF_CLOCK_REFRESH_MS; later += 97) {
          int64_t now = 10000000 + rtt + later, lo, hi;
          cr_assert(xf__clock_server_now(&k, now, &lo, &hi));
          cr_assert(lo <= now + offs[i] && now + offs[i] <= hi, "off %lld rtt %lld",
                    (long long)offs[i], (long long)rtt);
          cr_assert(hi - lo <= rtt + 6, "the error is the round trip (+ms floors, drift)");
        }
      }
}

Test(clock, unknown_old_or_backwards_is_not_used) {
  xf__clock k;
  int64_t lo, hi;
  xf__clock_reset(&k);
  cr_expect_not(xf__clock_server_now(&k, 5000, &lo, &hi), "nothing learned");
  cr_expect_not(xf__clock_server_now(NULL, 5000, &lo, &hi), "no connection's clock");
  learn_at(&k, 3600000, 5000, 2, 1);
  cr_expect(xf__clock_server_now(&k, 5002 + XF_CLOCK_REFRESH_MS, &lo, &hi));
  cr_expect_not(xf__clock_server_now(&k, 5003 + XF_CLOCK_REFRESH_MS, &lo, &hi), "too old");
  cr_expect_not(xf__clock_server_now(&k, 4999, &lo, &hi), "the driver's clock went back");
}

Test(clock, fresh_is_younger_than_half_the_refresh_period) {
  xf__clock k;
  xf__clock_reset(&k);
  cr_expect_not(xf__clock_fresh(NULL, 0));
  cr_expect_not(xf__clock_fresh(&k, 5000), "unknown");
  xf__clock_learn(&k, 1000000, 5000, 5002);
  cr_expect(xf__clock_fresh(&k, 5002));
  cr_expect(xf__clock_fresh(&k, 5001 + XF_CLOCK_REFRESH_MS / 2));
  cr_expect_not(xf__clock_fresh(&k, 5002 + XF_CLOCK_REFRESH_MS / 2), "aged");
  cr_expect_not(xf__clock_fresh(&k, 5001), "the driver's clock went back");
}

/* The transport's choice for a plain read: HMGET where the connection's clock
 * is fresh, else the read script on the same key, routed the same way. */
Test(clock, a_plain_read_goes_as_the_script_where_the_clock_is_not_fresh) {
  xf__clock k;
  xf__clock_reset(&k);
  xf__clock *whose = NULL, **clock_out = &whose;
  int plain = -1, asked = 0;
  xf__cmd hmget, script;
  xf__entry_fields_cmd(&hmget, "key", 3);
  hmget.plain_out = &plain;
  hmget.clock_out = clock_out;
  hmget.asked_out = &asked;
  hmget.ask_node = 2;
  hmget.on_master = 1;
  const xf__cmd *sent = xf__entry_read_as(&hmget, &k, 5000, &script);
  cr_expect_eq(sent, &script, "unknown: the script");
  cr_expect_eq(plain, 0);
  cr_expect_eq(script.lens[0], 10);
  cr_expect_eq(memcmp(script.argv[0], "EVALSHA_RO", 10), 0);
  cr_expect_eq(script.keylen, 3);
  cr_expect_eq(script.clock_out, clock_out);
  cr_expect_eq(script.asked_out, &asked);
  cr_expect_eq(script.ask_node, 2);
  cr_expect_eq(script.on_master, 1);
  cr_expect_null(script.plain_out, "the script is never swapped again");
  xf__clock_learn(&k, 1000000, 5000, 5002);
  cr_expect_eq(xf__entry_read_as(&hmget, &k, 5100, &script), &hmget, "fresh: HMGET");
  cr_expect_eq(plain, 1);
  cr_expect_eq(xf__entry_read_as(&hmget, &k, 5002 + XF_CLOCK_REFRESH_MS / 2, &script),
               &script, "aged: the script");
  cr_expect_eq(plain, 0);
  xf__cmd other;
  xf__entry_read_cmd(&other, "key", 3);
  cr_expect_eq(xf__entry_read_as(&other, NULL, 0, &script), &other, "not a plain read");
}

Test(clock, a_server_clock_that_was_set_replaces_the_estimate) {
  xf__clock k;
  int64_t lo, hi;
  xf__clock_reset(&k);
  learn_at(&k, 0, 1000, 4, 2);
  learn_at(&k, 3600000, 1100, 4, 2); /* an hour later, all at once */
  cr_assert(xf__clock_server_now(&k, 1110, &lo, &hi));
  cr_expect(lo <= 1110 + 3600000 && 1110 + 3600000 <= hi);
  learn_at(&k, 3600000, 1200, 30, 0); /* a wider sample that agrees narrows nothing */
  cr_assert(xf__clock_server_now(&k, 1230, &lo, &hi));
  cr_expect(hi - lo <= 10, "agreeing samples keep the narrower bounds: %lld",
            (long long)(hi - lo));
}

/* ---- a client whose clock is off, or jumps ------------------------------------ */

static int64_t real_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A loader whose every value names its generation. */
typedef struct gen_loader {
  int n;
  int sleep_ms;
} gen_loader;

static int gen_load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key;
  (void)keylen;
  gen_loader *g = ud;
  xft_sleep_ms(g->sleep_ms);
  char buf[32];
  int len = snprintf(buf, sizeof buf, "g%d", ++g->n);
  return xf_sink_set(sink, buf, (size_t)len);
}

#define MAX_GEN 4096

/* Runs one client on key for ms of real time with the drivers' clock skewed
 * by skews[i] during the i-th of nskews equal slices. Every value served
 * from the cache must be one whose expiry (no later than its write's return
 * + ttl) is not behind the call's start. Returns the client's stats. */
static xf_stats hammer(const char *key, int ms, const int64_t *skews, int nskews) {
  xf_client *c = xft_client(7);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 200;
  p.stale_ms = 0;
  p.stale_if_error_ms = 0;
  p.beta = 1.0;
  gen_loader g = {.sleep_ms = 10};
  static int64_t written_at[MAX_GEN + 1]; /* real ms the write of gen n returned */
  int64_t start = real_ms();
  xf_stats st;
  /* ms of calls, then more (in the last slice's skew, up to 10 s) until
   * XFetch elected an early refresh: a busy machine's slow calls may all
   * miss the last milliseconds of a few 200 ms lifetimes. */
  for (int64_t now = start; now - start < ms || (xf_client_stats(c, &st), st.early == 0);
       now = real_ms()) {
    if (now - start > 10000)
      break;
    int slice = now - start < ms ? (int)((now - start) * nskews / ms) : nskews - 1;
    __atomic_store_n(&xf__test_clock_skew_ms, skews[slice], __ATOMIC_SEQ_CST);
    xf_value v;
    int64_t called = real_ms();
    cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, gen_load, &g, &v), XF_OK, "%s",
                 xf_errmsg(c));
    int gen = atoi(v.data + 1);
    cr_assert(gen >= 1 && gen <= MAX_GEN);
    if (v.source == XF_SOURCE_LOADER)
      written_at[gen] = real_ms();
    else
      cr_assert(v.source == XF_SOURCE_CACHE, "source %d", v.source);
    if (v.source == XF_SOURCE_CACHE && written_at[gen])
      cr_assert(called <= written_at[gen] + p.ttl_ms,
                "gen %d served %lld ms past its expiry", gen,
                (long long)(called - written_at[gen] - p.ttl_ms));
    xf_value_free(&v);
  }
  __atomic_store_n(&xf__test_clock_skew_ms, 0, __ATOMIC_SEQ_CST);
  xf_client_stats(c, &st);
  cr_expect_gt(st.early, 0, "XFetch refreshed early");
  /* A client that misjudged the clock by the skew would load on (nearly)
   * every call: hits ~0. A 200 ms life with a 10 ms loader gives ~20 hits
   * per load on a quiet machine; under ASan on a busy one a call can take
   * tens of ms (fewer than 10 hits per load seen): 2 per load holds there. */
  cr_expect_gt(st.hits, st.loads * 2, "most calls were hits (%llu hits, %llu loads)",
               (unsigned long long)st.hits, (unsigned long long)st.loads);
  xf_client_close(c);
  return st;
}

Test(clock, a_client_an_hour_ahead_keeps_every_promise) {
  static const int64_t skew[] = {3600000};
  hammer("clock:ahead", 1200, skew, 1);
}

Test(clock, a_client_an_hour_behind_keeps_every_promise) {
  static const int64_t skew[] = {-3600000};
  hammer("clock:behind", 1200, skew, 1);
}

Test(clock, a_client_whose_clock_jumps_keeps_every_promise) {
  static const int64_t skews[] = {0, 3600000, -3600000, 0, -120000, 250};
  hammer("clock:jumps", 1800, skews, 6);
}

/* A lease left by a caller that died: the skewed client waits for it to run
 * out on the server's clock, then loads, once. */
static void dead_lease_expires(const char *key, int64_t skew) {
  redisContext *r = xft_redis();
  long long deadline = xft_server_ms(r) + 300;
  int64_t planted = real_ms(); /* at most when the 300 ms begin */
  freeReplyObject(xft_cmd(r, "HSET %s l dead:%lld", key, deadline));
  freeReplyObject(xft_cmd(r, "PEXPIRE %s 300", key));
  __atomic_store_n(&xf__test_clock_skew_ms, skew, __ATOMIC_SEQ_CST);
  xf_client *c = xft_client(1);
  xf_policy p = XF_POLICY_INIT;
  p.wait_ms = 10000; /* a client that misjudged the lease waits all of it, then fails */
  p.on_wait_timeout = XF_WAIT_FAIL;
  xft_loader l = {.value = "fresh"};
  xf_value v;
  /* A hit first: the read after it is plain, its clock estimate learned. */
  cr_assert_eq(xf_get_or_compute(c, "clock:warm", 10, &p, xft_load, &l, &v), XF_OK);
  xf_value_free(&v);
  __atomic_store_n(&l.calls, 0, __ATOMIC_SEQ_CST);
  int64_t t0 = real_ms();
  cr_assert_eq(xf_get_or_compute(c, key, strlen(key), &p, xft_load, &l, &v), XF_OK, "%s",
               xf_errmsg(c));
  int64_t done = real_ms();
  cr_expect_eq(xft_loader_calls(&l), 1);
  cr_expect_eq(v.source, XF_SOURCE_LOADER);
  /* Loaded once the lease ran out: 300 ms after it was planted (less the
   * round trip the deadline was read in; the client's open and warm-up,
   * slow on a busy machine, count too), and no later than 5 s after the
   * call began (half the wait budget; 2.3 s seen under ASan on a busy
   * machine). */
  cr_expect(done - planted >= 200 && done - t0 < 5000,
            "loaded %lld ms after a 300 ms lease was planted (%lld ms into the call)",
            (long long)(done - planted), (long long)(done - t0));
  xf_value_free(&v);
  __atomic_store_n(&xf__test_clock_skew_ms, 0, __ATOMIC_SEQ_CST);
  xf_client_close(c);
  redisFree(r);
}

Test(clock, leases_expire_for_a_client_an_hour_ahead) {
  dead_lease_expires("clock:lease-ahead", 3600000);
}

Test(clock, leases_expire_for_a_client_an_hour_behind) {
  dead_lease_expires("clock:lease-behind", -3600000);
}

/* ---- a mixed fleet: old clients (the read script) and new (a plain read) ---- */

static xf_client *fleet_client(int i, void *ud) {
  (void)ud;
  xf_client *c = xft_client(0);
  c->plain_hits = i % 2 == 0; /* odd: the read script on every hit, as an old client */
  return c;
}

static const char *fleet_label(int i) { return i % 2 ? "old" : "new"; }

Test(clock, old_and_new_clients_on_one_hot_key_load_once_per_episode) {
  xft_fleet_run("clock:fleet", 6, 1500, 3, fleet_client, NULL, fleet_label);
}
