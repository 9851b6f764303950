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
#include "near_env.h"
#include "near_impl.h"
#include "share.h"

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
  xf_client *first = near_client(srv.port, s, NULL, NULL); /* opens it, as default */
  xf_client *alice = near_client(srv.port, s, "alice", "alicepw");
  xf_client *other = near_client(srv.port, NULL, NULL, NULL);
  near_put(other, "near:u1", "old");
  near_warm(first, "near:u1", "old");
  near_warm(alice, "near:u1", "old"); /* her own entry (her namespace) */
  uint64_t seen = xf__near_invalidations(xf__share_near(s));
  near_put(other, "near:u1", "new");
  near_await_invalidations(s, seen);
  char got[64];
  near_get(alice, "near:u1", got, sizeof got);
  cr_assert_str_eq(got, "new");
  near_warm(alice, "near:u1", "new");
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
  xf_client *bob = near_client(srv.port, s, "bob", "bobpw");
  xf_client *other = near_client(srv.port, NULL, NULL, NULL);
  near_put(other, "near:u2", "old");
  char got[64];
  for (int i = 0; i < 20; i++) { /* served by Redis, untracked: nothing kept */
    near_get(bob, "near:u2", got, sizeof got);
    cr_assert_str_eq(got, "old");
  }
  cr_assert_eq(near_hits(bob), 0);
  xf_client *next = near_client(srv.port, s, NULL, NULL); /* opens it, as default */
  near_warm(next, "near:u2", "old");
  uint64_t seen = xf__near_invalidations(xf__share_near(s));
  near_put(other, "near:u2", "new");
  near_await_invalidations(s, seen);
  near_get(next, "near:u2", got, sizeof got);
  cr_assert_str_eq(got, "new");
  near_get(bob, "near:u2", got, sizeof got);
  cr_assert_str_eq(got, "new");
  /* bob's connections opened now are tracked through it (REDIRECT names
   * another user's connection: Redis allows it) */
  xf_client *bob2 = near_client(srv.port, s, "bob", "bobpw");
  near_warm(bob2, "near:u2", "new");
  seen = xf__near_invalidations(xf__share_near(s));
  near_put(other, "near:u2", "newer");
  near_await_invalidations(s, seen);
  near_get(bob2, "near:u2", got, sizeof got);
  cr_assert_str_eq(got, "newer");
  xf_client_close(bob2);
  xf_client_close(other), xf_client_close(next), xf_client_close(bob);
  xf_share_close(s);
  redisFree(r);
  xft_server_stop(&srv);
}
