/* revalidate: what a conditional refresh answered "unchanged" costs Redis
 * against a rewrite of the same value (see bench/README.md, "Conditional
 * refresh"). Starts a throwaway redis-server (or uses --port P); for a value
 * of LEN bytes (default 1 MiB) in each entry format (2, the string entry, the
 * default; 1, the hash), N calls (default 200) of:
 *   - rewrite: xf_set of the value (write.lua);
 *   - touch: lua/touch.lua on the entry, with the expiry it holds (read
 *     before each call with a plain command: GETRANGE of the header's e in
 *     format 2, HGET e in format 1, not counted).
 * Server time per call: cmdstat_evalsha's usec_per_call over each pass (CONFIG
 * RESETSTAT before it), and touch / rewrite.
 * Then the same through xf_get_or_compute: every call elected for an early
 * refresh (XFetch, beta infinite) of the warm entry, its loader answering
 * "unchanged" (xf_sink_unchanged: read, lease, touch) or handing back the
 * same bytes (read, lease, write): server us per call of every command (the
 * plain read's GET of the value included) and of the scripts alone.
 *
 *   revalidate [N] [--len BYTES] [--port P] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "entry.h"
#include "entry_io.h"

/* cmdstat_evalsha's usec_per_call since the last CONFIG RESETSTAT; < 0 when
 * INFO does not say. */
static double evalsha_usec_per_call(redisContext *r, double *calls) {
  redisReply *rep = redisCommand(r, "INFO commandstats");
  double usec = -1, per = -1;
  *calls = 0;
  const char *at =
      rep && rep->type == REDIS_REPLY_STRING ? strstr(rep->str, "cmdstat_evalsha:") : NULL;
  if (!at || sscanf(at, "cmdstat_evalsha:calls=%lf,usec=%lf,usec_per_call=%lf", calls,
                    &usec, &per) != 3)
    per = -1;
  freeReplyObject(rep);
  return per;
}

static int reset_stats(redisContext *r) {
  redisReply *rep = redisCommand(r, "CONFIG RESETSTAT");
  int ok = rep && rep->type == REDIS_REPLY_STATUS;
  freeReplyObject(rep);
  return ok ? 0 : -1;
}

/* The expiry e the entry key holds (ms), read with a plain command. */
static int64_t entry_expiry(redisContext *r, const char *key, int format) {
  int64_t e = -1;
  if (format == XF_ENTRY_STRING) {
    redisReply *rep = redisCommand(r, "GETRANGE %s 8 13", key);
    if (rep && rep->type == REDIS_REPLY_STRING && rep->len == 6) {
      e = 0;
      for (int i = 0; i < 6; i++)
        e = e << 8 | (unsigned char)rep->str[i];
    }
    freeReplyObject(rep);
  } else {
    redisReply *rep = redisCommand(r, "HGET %s e", key);
    if (rep && rep->type == REDIS_REPLY_STRING)
      e = strtoll(rep->str, NULL, 10);
    freeReplyObject(rep);
  }
  return e;
}

/* One format: us per call of a rewrite and of a touch; non-zero on a failure. */
static int measure(const target *t, redisContext *r, int format, const char *value,
                   size_t len, int n, double *rewrite_us, double *touch_us) {
  target tf = *t;
  tf.entry_format = format;
  xf_options o = target_options(&tf);
  xf_client *c = NULL;
  if (xf_client_open(&c, &o) != XF_OK) {
    fprintf(stderr, "revalidate: no client\n");
    return 1;
  }
  char key[32];
  snprintf(key, sizeof key, "rv:%d", format);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600000;
  int rc = xf_set(c, key, strlen(key), value, len, &p); /* warm: write.lua loaded */
  double calls = 0;
  if (rc == XF_OK && reset_stats(r) == 0)
    for (int i = 0; i < n && rc == XF_OK; i++)
      rc = xf_set(c, key, strlen(key), value, len, &p);
  *rewrite_us = rc == XF_OK ? evalsha_usec_per_call(r, &calls) : -1;
  if (rc != XF_OK || *rewrite_us < 0 || calls != n) {
    fprintf(stderr, "revalidate: format %d rewrite: %s\n", format, xf_errmsg(c));
    xf_client_close(c);
    return 1;
  }
  int touched = 0;
  xf__touch tc = {.token = "", .ttl_ms = p.ttl_ms, .keep_ms = 0, .start_ms = -1};
  tc.seen_e_ms = entry_expiry(r, key, format);
  rc = xft_entry_touch(c, key, strlen(key), &tc, &touched); /* touch.lua loaded */
  if (rc == XF_OK && touched == 1 && reset_stats(r) == 0)
    for (int i = 0; i < n && rc == XF_OK && touched == 1; i++) {
      tc.seen_e_ms = entry_expiry(r, key, format);
      rc = xft_entry_touch(c, key, strlen(key), &tc, &touched);
    }
  *touch_us = rc == XF_OK && touched == 1 ? evalsha_usec_per_call(r, &calls) : -1;
  if (*touch_us < 0 || calls != n) {
    fprintf(stderr, "revalidate: format %d touch: %s (touched %d)\n", format,
            rc == XF_OK ? "refused" : xf_errmsg(c), touched);
    xf_client_close(c);
    return 1;
  }
  redisReply *size = redisCommand(r, "STRLEN %s", key);
  freeReplyObject(size);
  xf_client_close(c);
  return 0;
}

typedef struct flow_loader {
  const char *value;
  size_t len;
  int unchanged;
} flow_loader;

static int same_or_unchanged(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  const flow_loader *l = ud;
  if (l->unchanged && xf_sink_previous(sink, NULL, NULL, NULL))
    return xf_sink_unchanged(sink);
  return xf_sink_set(sink, l->value, l->len);
}

/* Through the library: N calls of xf_get_or_compute elected for an early
 * refresh every time (XFetch, beta infinite) on a warm entry, the loader
 * answering "unchanged" or handing back the same bytes (lease + touch, or
 * lease + write). Server us per call: every command's (the plain reads'
 * GETs too) and the scripts' alone. */
static int measure_flow(const target *t, redisContext *r, int format, const char *value,
                        size_t len, int n, int unchanged, double *all_us,
                        double *scripts_us) {
  target tf = *t;
  tf.entry_format = format;
  xf_options o = target_options(&tf);
  xf_client *c = NULL;
  if (xf_client_open(&c, &o) != XF_OK)
    return 1;
  char key[32];
  snprintf(key, sizeof key, "rvf:%d", format);
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 3600000;
  p.refresh_ahead = -1;
  p.beta = INFINITY;
  p.background_refresh = XF_BACKGROUND_OFF;
  flow_loader l = {value, len, unchanged};
  int rc = xf_set(c, key, strlen(key), value, len, &p);
  xf_value v;
  for (int i = 0; i < 3 && rc == XF_OK; i++) { /* scripts loaded, the clock known */
    rc = xf_get_or_compute(c, key, strlen(key), &p, same_or_unchanged, &l, &v);
    xf_value_free(&v);
  }
  xf_stats before, after;
  xf_client_stats(c, &before);
  if (rc == XF_OK && reset_stats(r) == 0)
    for (int i = 0; i < n && rc == XF_OK; i++) {
      rc = xf_get_or_compute(c, key, strlen(key), &p, same_or_unchanged, &l, &v);
      if (rc == XF_OK && (v.source != XF_SOURCE_LOADER || v.len != len))
        rc = XF_EPROTO;
      xf_value_free(&v);
    }
  xf_client_stats(c, &after);
  double calls = 0, usec = 0, all_calls = 0;
  *scripts_us = rc == XF_OK ? evalsha_usec_per_call(r, &calls) * calls / n : -1;
  if (rc == XF_OK && target_commandstats(r, &usec, &all_calls) == 0)
    *all_us = usec / n;
  else
    rc = XF_EPROTO;
  if (rc == XF_OK && unchanged && after.revalidated - before.revalidated != (uint64_t)n)
    rc = XF_EPROTO;
  if (rc != XF_OK)
    fprintf(stderr, "revalidate: format %d flow (%s): %s\n", format,
            unchanged ? "unchanged" : "rewrite", xf_errmsg(c));
  xf_client_close(c);
  return rc != XF_OK;
}

int main(int argc, char **argv) {
  int n = 200, port = 0;
  size_t len = 1 << 20;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--port") && i + 1 < argc)
      port = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--len") && i + 1 < argc)
      len = (size_t)atol(argv[++i]);
    else
      n = atoi(argv[i]);
  target t;
  if (target_local_or_start(&t, port) != 0)
    return 1;
  char *value = malloc(len);
  redisContext *r = target_connect(&t, 2000);
  int bad = !value || !r;
  for (size_t i = 0; i < len && value; i++)
    value[i] = (char)(i * 7 + 1);
  printf("revalidate: a %zu-byte value, %d calls each; server us per call "
         "(cmdstat_evalsha usec_per_call)\n",
         len, n);
  printf("%-18s %10s %10s %10s\n", "format", "rewrite", "touch", "touch/rw");
  static const struct {
    int format;
    const char *name;
  } FORMATS[] = {{XF_ENTRY_STRING, "2 (string)"}, {XF_ENTRY_HASH, "1 (hash)"}};
  for (int f = 0; f < 2 && !bad; f++) {
    double rw, tu;
    bad = measure(&t, r, FORMATS[f].format, value, len, n, &rw, &tu);
    if (!bad)
      printf("%-18s %10.2f %10.2f %10.4f\n", FORMATS[f].name, rw, tu, tu / rw);
  }
  printf("\nthrough xf_get_or_compute (an early refresh every call: read, lease, then "
         "touch or write), server us per call: all commands / the scripts alone\n");
  printf("%-18s %19s %19s %10s\n", "format", "lease+write", "lease+touch", "all ratio");
  for (int f = 0; f < 2 && !bad; f++) {
    double rw_all, rw_scripts, tu_all, tu_scripts;
    bad = measure_flow(&t, r, FORMATS[f].format, value, len, n, 0, &rw_all, &rw_scripts) ||
          measure_flow(&t, r, FORMATS[f].format, value, len, n, 1, &tu_all, &tu_scripts);
    if (!bad)
      printf("%-18s %9.2f / %7.2f %9.2f / %7.2f %10.4f\n", FORMATS[f].name, rw_all,
             rw_scripts, tu_all, tu_scripts, tu_all / rw_all);
  }
  free(value);
  if (r)
    redisFree(r);
  if (t.pid)
    target_stop_server(&t);
  return bad ? 1 : 0;
}
