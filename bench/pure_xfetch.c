/* Pure XFetch (the "xfetch_nolease" strategy): the paper's early recomputation
 * with no lease, on the same entry format as the library (hash v, d, e, s), so
 * the only difference from the library is the missing lease. Read: value,
 * delta and remaining logical ms from the server's clock, one round trip.
 * Write: value, delta, expiry = server now + ttl, PEXPIRE ttl. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const char READ_LUA[] =
    "#!lua flags=no-writes\n"
    "local f = redis.call('HMGET', KEYS[1], 'v', 'd', 'e')\n"
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local e = tonumber(f[3])\n"
    "if not f[1] or not e then return {0, 0, 0} end\n"
    "return {1, tonumber(f[2]) or 0, e - now, f[1]}\n";

static const char WRITE_LUA[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local ttl = tonumber(ARGV[3])\n"
    "redis.call('HSET', KEYS[1], 'v', ARGV[1], 'd', ARGV[2], 'e',\n"
    "           string.format('%d', now + ttl), 's', string.format('%d', now))\n"
    "redis.call('PEXPIRE', KEYS[1], ttl)\n"
    "return 1\n";

/* The same entry in the library's format 2 (src/core/entry_string.c: the
 * 20-byte header of version 3, flags value | s, then the value), for the
 * library's strategy to read with GET. */
static const char WRITE2_LUA[] =
    "local t = redis.call('TIME')\n"
    "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "local ttl = tonumber(ARGV[3])\n"
    "local h = struct.pack('>BBBI5I6I6', 248, 3, 9, tonumber(ARGV[2]), now + ttl, now)\n"
    "redis.call('SET', KEYS[1], h .. ARGV[1], 'PX', ttl)\n"
    "return 1\n";

static char read_sha[41], write_sha[41], write2_sha[41];

static int load_one(redisContext *rc, const char *src, char sha[41]) {
  redisReply *r = redisCommand(rc, "SCRIPT LOAD %s", src);
  int ok = r && r->type == REDIS_REPLY_STRING && r->len == 40;
  if (ok)
    memcpy(sha, r->str, 41);
  else
    fprintf(stderr, "xfetch-bench: SCRIPT LOAD: %s\n", r ? r->str : rc->errstr);
  if (r)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

int pure_load_scripts(redisContext *rc) {
  return load_one(rc, READ_LUA, read_sha) || load_one(rc, WRITE_LUA, write_sha) ||
                 load_one(rc, WRITE2_LUA, write2_sha)
             ? -1
             : 0;
}

static int is_noscript(const redisReply *r) {
  return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static redisReply *run(redisContext *rc, const char *sha, int argc, const char **argv,
                       const size_t *lens) {
  redisReply *r = redisCommandArgv(rc, argc, argv, lens);
  if (is_noscript(r)) { /* the server lost its script cache: load and retry once */
    freeReplyObject(r);
    if (pure_load_scripts(rc) != 0)
      return NULL;
    argv[1] = sha == read_sha ? read_sha : write_sha;
    r = redisCommandArgv(rc, argc, argv, lens);
  }
  return r;
}

int pure_read_entry(redisContext *rc, const char *key, size_t keylen, pure_read *out) {
  const char *argv[] = {"EVALSHA", read_sha, "1", key};
  size_t lens[] = {7, 40, 1, keylen};
  redisReply *r = run(rc, read_sha, 4, argv, lens);
  int ok = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 3;
  if (ok) {
    out->present = (int)r->element[0]->integer;
    out->delta_us = r->element[1]->integer;
    out->remaining_ms = r->element[2]->integer;
  }
  if (r)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

static void fill_write(const char **argv, size_t *lens, char *d, char *ttl, const char *key,
                       size_t keylen, const char *v, size_t vlen, int64_t delta_us,
                       int64_t ttl_ms) {
  snprintf(d, 24, "%lld", (long long)delta_us);
  snprintf(ttl, 24, "%lld", (long long)ttl_ms);
  const char *a[] = {"EVALSHA", write_sha, "1", key, v, d, ttl};
  size_t l[] = {7, 40, 1, keylen, vlen, strlen(d), strlen(ttl)};
  memcpy(argv, a, sizeof a);
  memcpy(lens, l, sizeof l);
}

int pure_write_entry(redisContext *rc, const char *key, size_t keylen, const char *v,
                     size_t vlen, int64_t delta_us, int64_t ttl_ms) {
  const char *argv[7];
  size_t lens[7];
  char d[24], ttl[24];
  fill_write(argv, lens, d, ttl, key, keylen, v, vlen, delta_us, ttl_ms);
  redisReply *r = run(rc, write_sha, 7, argv, lens);
  int ok = r && r->type == REDIS_REPLY_INTEGER;
  if (r)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

void pure_append_write(redisContext *rc, const char *key, size_t keylen, const char *v,
                       size_t vlen, int64_t delta_us, int64_t ttl_ms, int format) {
  const char *argv[7];
  size_t lens[7];
  char d[24], ttl[24];
  fill_write(argv, lens, d, ttl, key, keylen, v, vlen, delta_us, ttl_ms);
  if (format == 2)
    argv[1] = write2_sha;
  redisAppendCommandArgv(rc, 7, argv, lens);
}

/* XFetch, with the library's own rule (src/decide.c): recompute when missing,
 * expired, or remaining <= -delta * beta * ln(u). */
int pure_decide(pcg *r, double beta, const pure_read *e) {
  if (!e->present || e->remaining_ms <= 0)
    return 1;
  return xf__recompute_early(r, e->remaining_ms, e->delta_us, beta);
}
