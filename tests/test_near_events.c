/* XF_EV_INVALIDATION against a real redis-server: what the near cache is
 * told (a key invalidated by another client's write, a node's entries
 * dropped by FLUSHALL or a lost invalidation connection) is reported once
 * through the hook of the next get of a client of the share, on that
 * call's thread. Each test runs its own server (some kill connections). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>

#include "fixture.h"
#include "near_impl.h"
#include "share.h"

#define BOUND_MS 5000

typedef struct seen {
  int n;              /* INVALIDATION events */
  char key[8][64];    /* their keys ("" when NULL) */
  char server[8][64]; /* their servers ("" when NULL) */
  int rc[8];
  pthread_t thread[8];
} seen;

static void hook(const xf_event *ev, void *ud) {
  seen *s = ud;
  if (ev->type != XF_EV_INVALIDATION || s->n >= 8)
    return;
  snprintf(s->key[s->n], sizeof s->key[0], "%.*s", ev->key ? (int)ev->keylen : 0,
           ev->key ? ev->key : "");
  snprintf(s->server[s->n], sizeof s->server[0], "%s", ev->server ? ev->server : "");
  s->rc[s->n] = ev->rc;
  s->thread[s->n++] = pthread_self();
}

typedef struct env {
  xft_server srv;
  xf_share *share;
  xf_client *c, *d; /* both on the share, both with the hook */
  xf_client *other; /* another process's view */
  redisContext *r;
  seen sc, sd;
} env;

static xf_client *client_of(int port, xf_share *share, seen *s) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.share = share;
  o.key_prefix = "ev:";
  o.on_event = s ? hook : NULL;
  o.on_event_ud = s;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static void env_open(env *e) {
  memset(e, 0, sizeof *e);
  cr_assert_eq(xft_server_start(&e->srv, NULL), 0);
  xf_share_options so = {.near_cache_bytes = 1u << 20};
  cr_assert_eq(xf_share_open(&e->share, &so), XF_OK);
  e->c = client_of(e->srv.port, e->share, &e->sc);
  e->d = client_of(e->srv.port, e->share, &e->sd);
  e->other = client_of(e->srv.port, NULL, NULL);
  e->r = xft_redis_port(e->srv.port);
}

static void env_close(env *e) {
  redisFree(e->r);
  xf_client_close(e->other);
  xf_client_close(e->d);
  xf_client_close(e->c);
  xf_share_close(e->share);
  xft_server_stop(&e->srv);
}

static void put(xf_client *c, const char *key, const char *value) {
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, key, strlen(key), value, strlen(value), &p), XF_OK);
}

static void get(xf_client *c, const char *key) {
  xf_value v;
  int rc = xf_get(c, key, strlen(key), &v);
  cr_assert(rc == XF_OK || rc == XF_ENOTFOUND, "%s", xf_errmsg(c));
  xf_value_free(&v);
}

/* Gets key on c until c's hook has seen want events (bounded). */
static void until_events(xf_client *c, seen *s, const char *key, int want) {
  int64_t until = xft_now_ms() + BOUND_MS;
  while (s->n < want && xft_now_ms() < until) {
    get(c, key);
    xft_sleep_ms(1);
  }
  cr_assert_geq(s->n, want, "%d invalidation events, not %d", s->n, want);
}

Test(near_events, a_write_elsewhere_is_reported_once_with_its_key) {
  env e;
  env_open(&e);
  put(e.other, "k", "v1");
  get(e.c, "k"); /* kept near: tracked */
  get(e.c, "k");
  uint64_t told = xf__near_invalidations(xf__share_near(e.share));
  put(e.other, "k", "v2");
  int64_t until = xft_now_ms() + BOUND_MS;
  while (xf__near_invalidations(xf__share_near(e.share)) == told && xft_now_ms() < until)
    xft_sleep_ms(1);
  cr_assert_eq(e.sc.n, 0, "reported before a call");
  get(e.c, "other-key"); /* the next call reports it, on its thread */
  cr_assert_eq(e.sc.n, 1);
  cr_assert_str_eq(e.sc.key[0], "ev:k"); /* the Redis key */
  cr_assert_str_eq(e.sc.server[0], "");
  cr_assert(pthread_equal(e.sc.thread[0], pthread_self()));
  get(e.d, "k"); /* once per share: not again through d */
  get(e.c, "k");
  cr_assert_eq(e.sd.n, 0);
  cr_assert_eq(e.sc.n, 1);
  env_close(&e);
}

/* Gets key on c until c's hook has seen an invalidation of want (bounded):
 * its index. */
static int until_key_event(xf_client *c, seen *s, const char *key, const char *want) {
  int64_t until = xft_now_ms() + BOUND_MS;
  for (;;) {
    for (int i = 0; i < s->n; i++)
      if (strcmp(s->key[i], want) == 0)
        return i;
    cr_assert(s->n < 8 && xft_now_ms() < until, "no invalidation of %s (%d events)", want,
              s->n);
    get(c, key);
    xft_sleep_ms(1);
  }
}

#define SLOW_APPLY_MS 20 /* the tracker, descheduled, before each message */

static void slow_apply(void) { xft_sleep_ms(SLOW_APPLY_MS); }

/* FLUSHALL sends a flush (an invalidation with no keys) for each tracking
 * connection (c's and d's), all to the one invalidation connection, and the
 * tracker logs each drop as it applies it: a call may report the first
 * before the next is applied (the tracker is slowed here as a descheduled
 * one would be). The flushes are known all in by a fence: another client's
 * write of a key c reads after the FLUSHALL, whose invalidation Redis sends
 * on that connection after them. Margin: BOUND_MS (5 s) for three slowed
 * messages (60 ms) and a few round trips; their order, not the time,
 * decides. */
Test(near_events, flushall_and_a_lost_connection_are_their_own_reasons) {
  env e;
  xf__near_test_before_apply = slow_apply; /* before the tracker thread starts */
  env_open(&e);
  put(e.other, "k", "v1");
  get(e.c, "k");
  get(e.d, "k"); /* both connections track */
  freeReplyObject(xft_cmd(e.r, "FLUSHALL"));
  get(e.c, "fence"); /* tracked again after the flush emptied the tracking table */
  put(e.other, "fence", "v1");
  int fence = until_key_event(e.c, &e.sc, "k", "ev:fence");
  char server[64];
  snprintf(server, sizeof server, "127.0.0.1:%d", e.srv.port);
  cr_assert_geq(fence, 1, "no drop for the flush");
  for (int i = 0; i < fence; i++) {
    cr_assert_str_eq(e.sc.key[i], "", "event %d", i);
    cr_assert_eq(e.sc.rc[i], 0, "event %d", i);
    cr_assert_str_eq(e.sc.server[i], server, "event %d", i);
  }
  int before = e.sc.n;
  freeReplyObject(xft_cmd(e.r, "CLIENT KILL TYPE pubsub"));
  until_events(e.c, &e.sc, "k", before + 1);
  cr_assert_str_eq(e.sc.key[before], "");
  cr_assert_str_eq(e.sc.server[before], server);
  cr_assert_eq(e.sc.rc[before], XF_EIO);
  env_close(&e);
  xf__near_test_before_apply = NULL; /* the tracker thread joined */
}
