/* SWAPDB against a real redis-server: Redis sends a tracking connection no
 * invalidation for it (nor a keyspace event), so the near cache keeps
 * serving what it read from a database before the swap (README, the near
 * cache's limits); a FLUSHDB, even of an empty database, makes Redis send
 * every tracking connection a flush, which drops it (the README's advice).
 * Each test runs its own server: the swap moves every key. */
#include <criterion/criterion.h>
#include <string.h>

#include "fixture.h"
#include "near_env.h"
#include "share.h"

static xf_client *client_on_db(int port, int db) {
  xf_options o = XF_OPTIONS_INIT;
  o.port = port;
  o.db = db;
  xf_client *c;
  cr_assert_eq(xf_client_open(&c, &o), XF_OK);
  return c;
}

/* Reads key on c until it is want (bounded). */
static void until_read(xf_client *c, const char *key, const char *want) {
  char got[64];
  int64_t until = xft_now_ms() + BOUND_MS;
  for (near_get(c, key, got, sizeof got); strcmp(got, want) != 0;
       near_get(c, key, got, sizeof got)) {
    cr_assert(xft_now_ms() < until, "%s: still \"%s\", not \"%s\"", key, got, want);
    xft_sleep_ms(1);
  }
}

/* The fence: a write of near:fence after the swap, whose invalidation Redis
 * sends on the invalidation connection after anything the swap sent, is
 * applied first; then near:k is still a near hit of db 0's old value while a
 * client without the near cache reads the swapped-in one. Margin: BOUND_MS
 * (5 s) for one invalidation; the order on the connection, not the time,
 * decides. */
Test(near_swapdb, a_swapdb_is_not_seen_until_a_flushdb) {
  near_env e;
  near_env_open(&e);
  xf_client *other1 = client_on_db(e.srv.port, 1);
  near_put(e.other, "near:fence", "f-1");
  near_warm(e.c, "near:fence", "f-1");
  near_put(e.other, "near:k", "db0");
  near_put(other1, "near:k", "db1");
  /* The puts' own invalidations (db 1's write of near:k names the key in
   * every db) are applied before near:k is warmed: a fence, or one of them
   * could drop the warmed entry and read as if the swap had been seen. The
   * fence's near hit says the tracker has applied all it was sent before. */
  near_put(e.other, "near:fence", "f0");
  until_read(e.c, "near:fence", "f0");
  near_warm(e.c, "near:fence", "f0"); /* a near hit: nothing left unapplied */
  near_warm(e.c, "near:k", "db0");
  freeReplyObject(xft_cmd(e.r, "SWAPDB 0 1"));
  char got[64];
  near_get(e.other, "near:k", got, sizeof got);
  cr_assert_str_eq(got, "db1", "the swap did not happen");
  near_put(e.other, "near:fence", "f1");
  until_read(e.c, "near:fence", "f1");
  /* Read from Redis, f1 says nothing of the tracker: while f1's invalidation
   * waits on its connection the near cache sends every read of this node to
   * Redis (near:k too: db1). The fence's near hit says it was applied. */
  near_warm(e.c, "near:fence", "f1");
  uint64_t hits = near_hits(e.c);
  near_get(e.c, "near:k", got, sizeof got);
  cr_assert_str_eq(got, "db0", "the near cache saw the swap: the limit is gone");
  cr_assert_eq(near_hits(e.c), hits + 1);
  freeReplyObject(xft_cmd(e.r, "SELECT 15")); /* empty */
  freeReplyObject(xft_cmd(e.r, "FLUSHDB"));
  until_read(e.c, "near:k", "db1");
  near_get(other1, "near:k", got, sizeof got);
  cr_assert_str_eq(got, "db0", "the FLUSHDB of db 15 emptied another");
  xf_client_close(other1);
  near_env_close(&e);
}
