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
 * With --link-mbit N every command goes through an emulated link of N Mbit/s
 * each way (bench/link_proxy.h) and, with --link-delay-us D, D us one way;
 * it also prints the raw GET's least time on that link against the measured
 * one, and a tiny GET through the link against one direct (the proxy's own
 * cost per request).
 *
 *   compress_cost [K] [--port P] [--link-mbit N [--link-delay-us D]] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "link_proxy.h"
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

/* K GETs of key (a string of want bytes), their latencies in us; non-zero on
 * a failure. */
static int time_gets(redisContext *r, const char *key, size_t want, long k, int64_t *us) {
  for (long i = 0; i < k; i++) {
    int64_t t0 = now_us();
    redisReply *g = redisCommand(r, "GET %s", key);
    us[i] = now_us() - t0;
    int ok = g && g->type == REDIS_REPLY_STRING && (size_t)g->len == want;
    freeReplyObject(g);
    if (!ok) {
      fprintf(stderr, "compress_cost: GET %s: %s\n", key, r->err ? r->errstr : "bad reply");
      return 1;
    }
  }
  return 0;
}

/* The link's check: a raw GET of len bytes cannot take less than its request
 * and reply need on the wire (raw_min, its fastest, must not beat it); and a
 * 1-byte GET through the link against one direct: what the proxy itself costs
 * a request. Non-zero when the link does not hold its rate, or on a failure. */
static int link_report(const target *direct, redisContext *r, double mbit, long delay_us,
                       size_t len, double raw_min, double raw50, long k, int64_t *us) {
  size_t req = strlen("*2\r\n$3\r\nGET\r\n$6\r\ncc:raw\r\n");
  size_t reply = (size_t)snprintf(NULL, 0, "$%zu\r\n", len) + len + 2;
  double least = (double)(req + reply) * 8 / mbit + 2.0 * (double)delay_us;
  printf("link: %g Mbit/s each way, one-way delay %ld us (bench/link_proxy.h): a raw "
         "GET's %zu + %zu bytes need at least %.0f us on it; measured min %.0f, p50 %.0f\n",
         mbit, delay_us, req, reply, least, raw_min, raw50);
  if (raw_min < least) {
    fprintf(stderr, "compress_cost: the link is faster than its rate\n");
    return 1;
  }
  redisContext *d = target_connect(direct, 2000);
  freeReplyObject(redisCommand(r, "SET cc:tiny x"));
  int bad = !d || time_gets(r, "cc:tiny", 1, k, us);
  double via50 = bad ? 0 : pct(us, k, 0.5);
  bad = bad || time_gets(d, "cc:tiny", 1, k, us);
  if (!bad) {
    double direct50 = pct(us, k, 0.5);
    size_t tiny = strlen("*2\r\n$3\r\nGET\r\n$7\r\ncc:tiny\r\n") + strlen("$1\r\nx\r\n");
    double on_wire = (double)tiny * 8 / mbit + 2.0 * (double)delay_us;
    printf("GET of a 1-byte value p50: %.0f us through the link (%.1f us of it on the "
           "wire), %.0f us direct: the proxy's own cost about %.0f us a request\n",
           via50, on_wire, direct50, via50 - direct50 - on_wire);
  }
  if (d)
    redisFree(d);
  return bad;
}

int main(int argc, char **argv) {
  long k = 2000, delay_us = 0;
  int port = 0;
  double mbit = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--port") && i + 1 < argc)
      port = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--link-mbit") && i + 1 < argc)
      mbit = atof(argv[++i]);
    else if (!strcmp(argv[i], "--link-delay-us") && i + 1 < argc)
      delay_us = atol(argv[++i]);
    else
      k = atol(argv[i]);
  if (mbit < 0 || delay_us < 0 || (delay_us && !mbit) || k < 1) {
    fprintf(stderr, "usage: compress_cost [K] [--port P] [--link-mbit N "
                    "[--link-delay-us D]]\n");
    return 2;
  }
  size_t len = make_json();
  target t;
  if (target_local_or_start(&t, port) != 0)
    return 1;
  t.entry_format = XF_ENTRY_STRING;
  /* With a link, every connection below goes through it: the raw GETs and
   * the library's hits share one path. */
  target via = t;
  link_proxy *link = mbit > 0 ? link_proxy_start(t.port, mbit, delay_us) : NULL;
  if (link)
    via.port = link_proxy_port(link);
  xf_options o = target_options(&via);
  xf_client *c = NULL;
  redisContext *r = (mbit > 0 && !link) ? NULL : target_connect(&via, 2000);
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
  int bad = time_hits(c, "cc:zstd", &on, 100, us) ||
            time_hits(c, "cc:plain", &off, 100, us) ||
            time_gets(r, "cc:raw", len, 100, us) /* warm-up */;
  double raw50 = 0, raw99 = 0, raw_min = 0;
  if (!bad && !(bad = time_gets(r, "cc:raw", len, k, us)))
    raw50 = pct(us, k, 0.5), raw99 = pct(us, k, 0.99), raw_min = (double)us[0];
  /* What the compressed bytes cost on the wire alone: a raw GET of a value
   * as long as the compressed entry (the rest of a compressed hit decodes). */
  redisReply *sl = redisCommand(r, "STRLEN cc:zstd");
  size_t zlen = sl && sl->type == REDIS_REPLY_INTEGER ? (size_t)sl->integer : 0;
  freeReplyObject(sl);
  freeReplyObject(redisCommand(r, "SET cc:small %b", json, zlen));
  double small50 = 0;
  if (!bad && !(bad = time_gets(r, "cc:small", zlen, k, us)))
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
  if (!bad && link)
    bad = link_report(&t, r, mbit, delay_us, len, raw_min, raw50, k, us);
  free(us);
  redisFree(r);
  xf_client_close(c);
  link_proxy_stop(link);
  if (t.pid)
    target_stop_server(&t);
  return bad ? 1 : 0;
}
