/* One near cache, clients of different ACL users (against a real
 * redis-server, one per test). A node's invalidation connection is opened
 * with the credentials of the first client of the share whose connection
 * to that node is armed: Redis sends every tracked connection's
 * invalidations to the connection it names in REDIRECT, whatever its user,
 * so a client of another user is kept correct through it; and a first
 * client whose user may not subscribe leaves the node without one, for the
 * next client to open with its own (through which that user's later
 * connections are then tracked). Entries are per user (the namespace:
 * server, db, user), so one user never reads another's. */
#include <criterion/criterion.h>
#include <string.h>

#include "fixture.h"
#include "near_impl.h"
#include "share.h"

#define NEAR_BYTES (1u << 20)
#define BOUND_MS 5000

static xf_client *client_as(int port, xf_share *share, const char *user, const char *pw) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.share = share;
  o.username = user;
  o.password = pw;
  o.seed = 7;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

static void put(xf_client *c, const char *key, const char *value) {
  xf_policy p = XF_POLICY_INIT;
  cr_assert_eq(xf_set(c, key, strlen(key), value, strlen(value), &p), XF_OK, "%s",
               xf_errmsg(c));
}

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

static void await_invalidations(xf_share *s, uint64_t seen) {
  int64_t until = xft_now_ms() + BOUND_MS;
  while (xf__near_invalidations(xf__share_near(s)) <= seen && xft_now_ms() < until)
    xft_sleep_ms(1);
  cr_assert_gt(xf__near_invalidations(xf__share_near(s)), seen, "no invalidation came");
}

static void acl(redisContext *r, const char *cmd) {
  redisReply *rep = xft_cmd(r, cmd);
  cr_assert(rep && rep->type == REDIS_REPLY_STATUS, "%s: %s", cmd,
            rep && rep->str ? rep->str : "no reply");
  freeReplyObject(rep);
}

Test(near_users, a_client_of_another_user_is_invalidated_through_the_first_ones) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  redisContext *r = xft_redis_port(srv.port);
  acl(r, "ACL SETUSER alice on >alicepw ~* &* +@all");
  xf_share *s;
  xf_share_options so = {.near_cache_bytes = NEAR_BYTES};
  cr_assert_eq(xf_share_open(&s, &so), XF_OK);
  xf_client *first = client_as(srv.port, s, NULL, NULL); /* opens it, as default */
  xf_client *alice = client_as(srv.port, s, "alice", "alicepw");
  xf_client *other = client_as(srv.port, NULL, NULL, NULL);
  put(other, "near:u1", "old");
  warm(first, "near:u1", "old");
  warm(alice, "near:u1", "old"); /* her own entry (her namespace) */
  uint64_t seen = xf__near_invalidations(xf__share_near(s));
  put(other, "near:u1", "new");
  await_invalidations(s, seen);
  char got[64];
  get(alice, "near:u1", got, sizeof got);
  cr_assert_str_eq(got, "new");
  warm(alice, "near:u1", "new");
  xf_client_close(other), xf_client_close(alice), xf_client_close(first);
  xf_share_close(s);
  redisFree(r);
  xft_server_stop(&srv);
}

Test(near_users, a_first_client_that_may_not_subscribe_leaves_it_to_the_next) {
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  redisContext *r = xft_redis_port(srv.port);
  acl(r, "ACL SETUSER bob on >bobpw ~* resetchannels +@all"); /* no SUBSCRIBE */
  xf_share *s;
  xf_share_options so = {.near_cache_bytes = NEAR_BYTES};
  cr_assert_eq(xf_share_open(&s, &so), XF_OK);
  xf_client *bob = client_as(srv.port, s, "bob", "bobpw");
  xf_client *other = client_as(srv.port, NULL, NULL, NULL);
  put(other, "near:u2", "old");
  char got[64];
  for (int i = 0; i < 20; i++) { /* served by Redis, untracked: nothing kept */
    get(bob, "near:u2", got, sizeof got);
    cr_assert_str_eq(got, "old");
  }
  cr_assert_eq(near_hits(bob), 0);
  xf_client *next = client_as(srv.port, s, NULL, NULL); /* opens it, as default */
  warm(next, "near:u2", "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(s));
  put(other, "near:u2", "new");
  await_invalidations(s, seen);
  get(next, "near:u2", got, sizeof got);
  cr_assert_str_eq(got, "new");
  get(bob, "near:u2", got, sizeof got);
  cr_assert_str_eq(got, "new");
  /* bob's connections opened now are tracked through it (REDIRECT names
   * another user's connection: Redis allows it) */
  xf_client *bob2 = client_as(srv.port, s, "bob", "bobpw");
  warm(bob2, "near:u2", "new");
  seen = xf__near_invalidations(xf__share_near(s));
  put(other, "near:u2", "newer");
  await_invalidations(s, seen);
  get(bob2, "near:u2", got, sizeof got);
  cr_assert_str_eq(got, "newer");
  xf_client_close(bob2);
  xf_client_close(other), xf_client_close(next), xf_client_close(bob);
  xf_share_close(s);
  redisFree(r);
  xft_server_stop(&srv);
}
