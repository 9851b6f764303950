/* hit_loop: K cache hits, for counting the instructions of one hit with
 * callgrind (see bench/README.md). Starts a throwaway redis-server (or uses
 * --port P), writes the key(s), warms up, then runs the K hits inside
 * run_hits(), the function to give callgrind's --toggle-collect.
 *
 *   hit_loop [K]          K xf_get_or_compute hits on one key (default 10000)
 *   hit_loop [K] many     K xf_get_or_compute_many batches of 100 warm keys
 *   hit_loop [K] --port P against the redis-server on 127.0.0.1:P
 *   hit_loop [K] --port P --tls CA
 *                         over TLS to that port (a TLS port), verified with CA
 *   hit_loop [K] hook     with a no-op event hook (options.on_event): its
 *                         cost against the same run without it */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "xfetch.h"

#define MANY 100

static char keybuf[MANY][32];
static const char *keys[MANY];
static size_t lens[MANY];

static int loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)ud, (void)key, (void)keylen;
  return xf_sink_set(sink, "v", 1);
}

static unsigned long events_seen;

static void noop_hook(const xf_event *ev, void *ud) {
  (void)ev, (void)ud;
  events_seen++;
}

static int hits(xf_client *c, const xf_policy *p, long k, int many) {
  int bad = 0;
  xf_value v[MANY];
  int rcs[MANY];
  for (long i = 0; i < k; i++) {
    if (many) {
      bad |= xf_get_or_compute_many(c, MANY, keys, lens, p, loader, NULL, v, rcs);
      for (int j = 0; j < MANY; j++) {
        bad |= rcs[j] != XF_OK || v[j].source != XF_SOURCE_CACHE;
        xf_value_free(&v[j]);
      }
    } else {
      bad |= xf_get_or_compute(c, keys[0], lens[0], p, loader, NULL, &v[0]) != XF_OK ||
             v[0].source != XF_SOURCE_CACHE;
      xf_value_free(&v[0]);
    }
  }
  return bad;
}

/* The measured part: callgrind --toggle-collect=run_hits counts only this. */
__attribute__((noinline)) int run_hits(xf_client *c, const xf_policy *p, long k, int many) {
  return hits(c, p, k, many);
}

int main(int argc, char **argv) {
  long k = 10000;
  int many = 0, port = 0, hook = 0, format = XF_ENTRY_STRING;
  const char *ca = NULL;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "many"))
      many = 1;
    else if (!strcmp(argv[i], "hook"))
      hook = 1;
    else if (!strcmp(argv[i], "format1"))
      format = XF_ENTRY_HASH;
    else if (!strcmp(argv[i], "--port") && i + 1 < argc)
      port = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--tls") && i + 1 < argc)
      ca = argv[++i];
    else
      k = atol(argv[i]);
  target t = {0};
  if (port) {
    snprintf(t.host, sizeof t.host, "127.0.0.1");
    t.port = port;
    if (ca)
      snprintf(t.tls_ca, sizeof t.tls_ca, "%s", ca);
  } else if (target_start_server(&t) != 0) {
    return 1;
  }
  t.entry_format = format;
  xf_options o = target_options(&t);
  if (hook)
    o.on_event = noop_hook;
  xf_client *c = NULL;
  int rc = xf_client_open(&c, &o);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600000;
  for (int i = 0; rc == XF_OK && i < MANY; i++) {
    snprintf(keybuf[i], sizeof keybuf[i], "hit_loop:%d", i);
    keys[i] = keybuf[i];
    lens[i] = strlen(keybuf[i]);
    rc = xf_set(c, keys[i], lens[i], "v", 1, &p);
  }
  if (rc == XF_OK && hits(c, &p, 100, many) != 0) /* warm-up: scripts loaded */
    rc = XF_EREDIS;
  int64_t t0 = now_us();
  if (rc == XF_OK && run_hits(c, &p, k, many) != 0)
    rc = XF_EREDIS;
  double s = (double)(now_us() - t0) / 1e6;
  if (rc == XF_OK)
    printf("hit_loop: %ld %s in %.3f s (%.1f us each)%s\n", k,
           many ? "batches of 100 hits" : "hits", s, s * 1e6 / (double)k,
           hook ? ", no-op event hook" : "");
  else
    fprintf(stderr, "hit_loop: %s: %s\n", xf_strerror(rc), c ? xf_errmsg(c) : "");
  xf_client_close(c);
  if (t.pid)
    target_stop_server(&t);
  return rc == XF_OK ? 0 : 1;
}
