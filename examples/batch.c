/* A request that needs 100 keys: one xf_get_or_compute_many instead of 100
 * calls. The first run loads them (one batch-loader call: think one SQL
 * "WHERE id IN (...)"), the second finds them all in Redis.
 * Usage: batch [port] (default 6379). */
#include <stdio.h>
#include <stdlib.h>
#include <xfetch.h>

#define N 100

static int queries;

/* Loads every key asked in one go. */
static int load_rows(void *db, size_t n, const char *const *keys, const size_t *keylens,
                     xf_sink *const *sinks) {
  (void)db;
  queries++;
  for (size_t i = 0; i < n; i++) {
    char row[64];
    int len = snprintf(row, sizeof row, "row for %.*s", (int)keylens[i], keys[i]);
    xf_sink_set(sinks[i], row, (size_t)len);
  }
  return 0;
}

int main(int argc, char **argv) {
  xf_options opts = XF_OPTIONS_INIT;
  opts.port = argc > 1 ? atoi(argv[1]) : 6379;
  xf_client *c;
  int rc = xf_client_open(&c, &opts);
  if (rc != XF_OK) {
    fprintf(stderr, "connect: %s: %s\n", xf_strerror(rc), xf_errmsg(c)); /* c is NULL */
    return 1;
  }
  char buf[N][16];
  const char *keys[N];
  size_t lens[N];
  for (int i = 0; i < N; i++) {
    lens[i] = (size_t)snprintf(buf[i], sizeof buf[i], "item:%d", i);
    keys[i] = buf[i];
  }
  xf_policy policy = XF_POLICY_INIT;
  xf_value values[N];
  int rcs[N];
  for (int run = 1; run <= 2; run++) {
    int rc = xf_get_or_compute_many_batch(c, N, keys, lens, &policy, load_rows, NULL,
                                          values, rcs);
    int cached = 0, failed = 0;
    for (int i = 0; i < N; i++) {
      failed += rcs[i] != XF_OK;
      cached += rcs[i] == XF_OK && values[i].source == XF_SOURCE_CACHE;
      xf_value_free(&values[i]);
    }
    printf("run %d: %s, %d of %d keys from the cache, %d failed, %d loader calls so far\n",
           run, xf_strerror(rc), cached, N, failed, queries);
  }
  xf_client_close(c);
  return 0;
}
