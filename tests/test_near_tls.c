/* The near cache over TLS (options.tls with a share's near_cache_bytes)
 * against a real TLS redis-server (tls_fixture.c): hits served in the
 * process, the invalidation connection made over TLS as the data
 * connections are, another client's write seen, the loss of the
 * invalidation connection dropping what it guarded. One server for the
 * binary: its tests run one at a time (--jobs 1: they kill connections). */
#include <criterion/criterion.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "near_env.h"
#include "near_impl.h"
#include "share.h"
#include "tls.h"
#include "tls_fixture.h"
#include "xfetch.h"

#define BOUND_MS 5000 /* how long a test waits for what must come (never hit) */

typedef struct tls_env {
  xf_share *share;
  xf_client *c;    /* over TLS, with the near cache */
  redisContext *r; /* raw, on the same server's plain port: another client */
  char key[64];
} tls_env;

static void env_open(tls_env *e, const char *what) {
  memset(e, 0, sizeof *e);
  xf_share_options so = {.near_cache_bytes = 1u << 20};
  cr_assert_eq(xf_share_open(&e->share, &so), XF_OK);
  xf_options o = XF_OPTIONS_INIT;
  o.host = "127.0.0.1";
  o.port = xft_tls_port();
  o.connect_timeout_ms = o.command_timeout_ms = 5000;
  o.tls.enable = 1;
  o.tls.ca_file = xft_tls_file("ca.crt");
  o.share = e->share;
  cr_assert_eq(xf_client_open(&e->c, &o), XF_OK, "%s", e->c ? xf_errmsg(e->c) : "");
  e->r = xft_redis_port(xft_tls_plain_port());
  snprintf(e->key, sizeof e->key, "tlsnear:%s:%d", what, getpid());
}

static void env_close(tls_env *e) {
  redisFree(e->r);
  xf_client_close(e->c);
  xf_share_close(e->share);
}

static void put(tls_env *e, const char *value) { /* another client's write */
  xf_options o = XF_OPTIONS_INIT;
  o.port = xft_tls_plain_port();
  xf_client *w;
  cr_assert_eq(xf_client_open(&w, &o), XF_OK);
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(w, e->key, strlen(e->key), value, strlen(value), &p), XF_OK, "%s",
               xf_errmsg(w));
  xf_client_close(w);
}

static void get(tls_env *e, char *buf, size_t cap) {
  xf_value v;
  int rc = xf_get(e->c, e->key, strlen(e->key), &v);
  cr_assert(rc == XF_OK || rc == XF_ENOTFOUND, "%s", xf_errmsg(e->c));
  snprintf(buf, cap, "%s", rc == XF_OK ? v.data : "");
  xf_value_free(&v);
}

/* Reads until a read is a near hit (bounded). */
static void warm(tls_env *e, const char *want) {
  char got[64];
  uint64_t before = near_hits(e->c);
  int64_t until = xft_now_ms() + BOUND_MS;
  while (near_hits(e->c) == before && xft_now_ms() < until) {
    get(e, got, sizeof got);
    cr_assert_str_eq(got, want);
    if (near_hits(e->c) == before)
      xft_sleep_ms(1);
  }
  cr_assert_gt(near_hits(e->c), before, "never a near hit over TLS");
}

Test(near_tls, hits_over_tls_and_a_write_elsewhere_is_seen) {
  tls_env e;
  env_open(&e, "w");
  put(&e, "old");
  warm(&e, "old");
  /* the data connection's handshake; the invalidation connection's is the
   * tracker thread's, on its copy of the client's TLS settings (the server
   * takes TLS only: the invalidations below came over TLS) */
  cr_assert_eq(xf__tls_handshakes(e.c->tls), 1);
  long long before = xft_read_calls(e.r) + xft_command_calls(e.r, "evalsha");
  char got[64];
  for (int i = 0; i < 1000; i++) {
    get(&e, got, sizeof got);
    cr_assert_str_eq(got, "old");
  }
  long long sent = xft_read_calls(e.r) + xft_command_calls(e.r, "evalsha") - before;
  cr_assert_leq(sent, 50, "1,000 near hits sent %lld commands", sent);
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  put(&e, "new");
  near_await_invalidations(e.share, seen);
  get(&e, got, sizeof got);
  cr_assert_str_eq(got, "new");
  warm(&e, "new");
  env_close(&e);
}

Test(near_tls, losing_the_invalidation_connection_drops_entries) {
  tls_env e;
  env_open(&e, "k");
  put(&e, "old");
  warm(&e, "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  freeReplyObject(xft_cmd(e.r, "CLIENT KILL TYPE pubsub"));
  near_await_invalidations(e.share, seen);
  put(&e, "new"); /* nobody is told */
  char got[64];
  get(&e, got, sizeof got);
  cr_assert_str_eq(got, "new");
  warm(&e, "new"); /* tracked again, under a new TLS invalidation connection */
  seen = xf__near_invalidations(xf__share_near(e.share));
  put(&e, "newer");
  near_await_invalidations(e.share, seen);
  get(&e, got, sizeof got);
  cr_assert_str_eq(got, "newer");
  env_close(&e);
}

Test(near_tls, losing_a_data_connection_drops_entries) {
  tls_env e;
  env_open(&e, "d");
  put(&e, "old");
  warm(&e, "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(e.share));
  freeReplyObject(xft_cmd(e.r, "CLIENT KILL TYPE normal SKIPME yes"));
  near_await_invalidations(e.share, seen);
  put(&e, "new");
  char got[64];
  get(&e, got, sizeof got);
  cr_assert_str_eq(got, "new", "an entry outlived its tracked connection");
  env_close(&e);
}
