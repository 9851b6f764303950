/* What the near-cache tests share (tests only): a redis-server of the
 * test's own, a share with a near cache, a client on it, another client
 * without it (another process's view) and a raw connection; and the small
 * steps every near test takes (set, get, warm a key until a read is a near
 * hit, wait for an invalidation). Used by test_near.c, test_near_stale.c,
 * test_near_users.c, test_near_open.c; test_near_batch.c and test_near_tls.c
 * (their own servers) take its steps. */
#ifndef XFT_NEAR_ENV_H
#define XFT_NEAR_ENV_H

#include <stdint.h>
#include <xfetch.h>

#include "fixture.h"

#define NEAR_BYTES (1u << 20)
#ifndef BOUND_MS
#define BOUND_MS 5000 /* how long a test waits for what must come (never hit) */
#endif

typedef struct near_env {
  xft_server srv;
  xf_share *share;
  xf_client *c;     /* with the near cache */
  xf_client *other; /* another process's view: no share */
  redisContext *r;  /* raw */
} near_env;

/* A client of port on share (NULL: none), as user (NULL: default). */
xf_client *near_client(int port, xf_share *share, const char *user, const char *password);
/* near_client's open without the assertion, for a thread of the test's own
 * (thread_fail.h): XF_OK or the open's code (xf_errmsg(NULL) says why). */
int near_client_open(xf_client **c, int port, xf_share *share, const char *user,
                     const char *password);

/* Makes c's waits with wake-on-write poll only every NEAR_FALLBACK_POLL_MS
 * (200 ms otherwise): a call waiting at most NEAR_WAIT_MS (its policy's
 * wait_ms) that comes back within NEAR_WOKEN_MS of a write was woken by
 * it, not by its poll, on any machine (the margin is 15 s both ways). */
#define NEAR_FALLBACK_POLL_MS 30000
#define NEAR_WAIT_MS 60000
#define NEAR_WOKEN_MS 15000
void near_wake_by_writes_only(xf_client *c);

void near_env_open(near_env *e);
void near_env_close(near_env *e);

/* xf_set of value, asserted. */
void near_put(xf_client *c, const char *key, const char *value);

/* xf_get's value of key into buf, "" when not found. */
void near_get(xf_client *c, const char *key, char *buf, size_t cap);

uint64_t near_hits(xf_client *c);

/* Reads key (each read must be want) until a read is a near hit: the first
 * reads fill the cache, and a hit goes to Redis while the tracker has
 * invalidations still to read (a bounded wait on a loaded machine). */
void near_warm(xf_client *c, const char *key, const char *want);

/* Waits (bounded) until share's tracker has seen more than `seen`
 * invalidations or drops and has applied all it read: it counts each key
 * while its node's read is still under way (reading odd), and until that
 * read ends a near hit on that node goes to Redis instead. */
void near_await_invalidations(xf_share *s, uint64_t seen);

/* Whether share's tracker has the invalidation connection to port asked
 * for or being opened (not open, not failed yet). */
int near_opening(xf_share *s, int port);

/* How many of share's tracker's opener threads are not joined yet (an open
 * under way, or done and its thread not joined). */
int near_openers_unjoined(xf_share *s);

#endif
