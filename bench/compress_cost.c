/* compress_cost: what policy.compress_min_bytes buys on a 200 KiB JSON value
 * (see bench/README.md). Starts a throwaway redis-server (or uses --port P),
 * writes the value raw (SET) and as an entry compressed (xf_set,
 * compress_min_bytes 1024) and plain (compression off), and prints:
 *   - Redis memory per key (MEMORY USAGE) of each, and compressed / raw;
 *   - hit latency p50 and p99 over K calls (default 2000) of a raw GET
 *     (hiredis) of the uncompressed value, and of xf_get_or_compute hits on
 *     the compressed and the plain entry, and compressed p50 / raw GET p50;
 *   - the p50 of a raw GET of a value as long as the compressed entry (what
 *     the smaller reply saves on the wire).
 *
 *   compress_cost [K] [--port P] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "xfetch.h"

#define BIG (200 * 1024)

static char json[BIG + 256];

/* A 200 KiB JSON document of records (repetitive as real JSON is). */
static size_t make_json(void) {
  size_t n = (size_t)snprintf(json, sizeof json, "[");
  for (int i = 0; n < BIG - 128; i++)
    n += (size_t)snprintf(json + n, sizeof json - n,
                          "{\"id\":%d,\"name\":\"user %d\",\"score\":%d,\"active\":%s},", i,
                          i * 7919 % 100003, i * 31 % 977, i % 3 ? "true" : "false");
  json[n - 1] = ']';
  return n;
}

static int cmp(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

static double pct(int64_t *us, long k, double q) {
  qsort(us, (size_t)k, sizeof *us, cmp);
  return (double)us[(long)(q * (double)(k - 1))];
}

static int loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen;
  return xf_sink_set(sink, json, strlen(json));
}

static long long memory_usage(redisContext *r, const char *key) {
  redisReply *m = redisCommand(r, "MEMORY USAGE %s SAMPLES 0", key);
  long long n = m && m->type == REDIS_REPLY_INTEGER ? m->integer : -1;
  freeReplyObject(m);
  return n;
}

/* K hits of key (an entry), their latencies in us; non-zero on a failure. */
static int time_hits(xf_client *c, const char *key, const xf_policy *p, long k,
                     int64_t *us) {
  for (long i = 0; i < k; i++) {
    xf_value v;
    int64_t t0 = now_us();
    int rc = xf_get_or_compute(c, key, strlen(key), p, loader, NULL, &v);
    us[i] = now_us() - t0;
    if (rc != XF_OK || v.source != XF_SOURCE_CACHE || v.len != strlen(json)) {
      fprintf(stderr, "compress_cost: %s: %s\n", key, xf_errmsg(c));
      return 1;
    }
    xf_value_free(&v);
  }
  return 0;
}

int main(int argc, char **argv) {
  long k = 2000;
  int port = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--port") && i + 1 < argc)
      port = atoi(argv[++i]);
    else
      k = atol(argv[i]);
  size_t len = make_json();
  target t;
  if (target_local_or_start(&t, port) != 0)
    return 1;
  t.entry_format = XF_ENTRY_STRING;
  xf_options o = target_options(&t);
  xf_client *c = NULL;
  redisContext *r = target_connect(&t, 2000);
  int rc = r ? xf_client_open(&c, &o) : XF_ECONNECT;
  xf_policy on = XF_POLICY_INIT, off = XF_POLICY_INIT;
  on.ttl_ms = off.ttl_ms = 3600000;
  on.compress_min_bytes = 1024;
  if (rc == XF_OK)
    rc = xf_set(c, "cc:zstd", 7, json, len, &on);
  if (rc == XF_OK)
    rc = xf_set(c, "cc:plain", 8, json, len, &off);
  int64_t *us = malloc((size_t)k * sizeof *us);
  if (rc != XF_OK || !us) {
    fprintf(stderr, "compress_cost: %s\n", c ? xf_errmsg(c) : "no connection");
    return 1;
  }
  freeReplyObject(redisCommand(r, "SET cc:raw %b", json, len));
  long long m_raw = memory_usage(r, "cc:raw"), m_zstd = memory_usage(r, "cc:zstd"),
            m_plain = memory_usage(r, "cc:plain");
  printf("value: %zu bytes of JSON\n", len);
  printf("memory per key (MEMORY USAGE): raw SET %lld, entry plain %lld, entry "
         "compressed %lld: compressed/raw %.3f (goal <= 0.25)\n",
         m_raw, m_plain, m_zstd, (double)m_zstd / (double)m_raw);
  int bad =
      time_hits(c, "cc:zstd", &on, 100, us) || time_hits(c, "cc:plain", &off, 100, us);
  for (long i = 0; i < 100 && !bad; i++) /* warm-up */
    freeReplyObject(redisCommand(r, "GET cc:raw"));
  double raw50 = 0, raw99 = 0;
  for (long i = 0; i < k && !bad; i++) {
    int64_t t0 = now_us();
    redisReply *g = redisCommand(r, "GET cc:raw");
    us[i] = now_us() - t0;
    bad = !g || g->type != REDIS_REPLY_STRING || g->len != len;
    freeReplyObject(g);
  }
  if (!bad)
    raw50 = pct(us, k, 0.5), raw99 = pct(us, k, 0.99);
  /* What the compressed bytes cost on the wire alone: a raw GET of a value
   * as long as the compressed entry (the rest of a compressed hit decodes). */
  redisReply *sl = redisCommand(r, "STRLEN cc:zstd");
  size_t zlen = sl && sl->type == REDIS_REPLY_INTEGER ? (size_t)sl->integer : 0;
  freeReplyObject(sl);
  freeReplyObject(redisCommand(r, "SET cc:small %b", json, zlen));
  double small50 = 0;
  for (long i = 0; i < k && !bad; i++) {
    int64_t t0 = now_us();
    redisReply *g = redisCommand(r, "GET cc:small");
    us[i] = now_us() - t0;
    bad = !g || g->type != REDIS_REPLY_STRING || g->len != zlen;
    freeReplyObject(g);
  }
  if (!bad)
    small50 = pct(us, k, 0.5);
  double z50 = 0, z99 = 0, p50 = 0, p99 = 0;
  if (!bad && !(bad = time_hits(c, "cc:zstd", &on, k, us)))
    z50 = pct(us, k, 0.5), z99 = pct(us, k, 0.99);
  if (!bad && !(bad = time_hits(c, "cc:plain", &off, k, us)))
    p50 = pct(us, k, 0.5), p99 = pct(us, k, 0.99);
  if (!bad) {
    printf(
        "hit latency over %ld calls, us p50/p99: raw GET %.0f/%.0f, entry plain %.0f/%.0f, "
        "entry compressed %.0f/%.0f\n",
        k, raw50, raw99, p50, p99, z50, z99);
    printf("raw GET of %zu bytes (the compressed entry's length) p50 %.0f us: the wire "
           "saves %.0f us of the raw GET, the rest of a compressed hit decodes\n",
           zlen, small50, raw50 - small50);
    printf("compressed hit p50 / raw GET p50: %.2f (goal <= 1.0)\n", z50 / raw50);
  }
  free(us);
  redisFree(r);
  xf_client_close(c);
  if (t.pid)
    target_stop_server(&t);
  return bad ? 1 : 0;
}
