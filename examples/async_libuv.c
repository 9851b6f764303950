/* xfetch on a libuv loop: a one-thread "server" whose requests arrive from a
 * timer (50 per millisecond for 20 ms, over 5 hot keys) and are answered
 * through xf_async_get_or_compute, while the loader is a 50 ms "database
 * query" that completes later, from another timer. One loader call per key
 * serves all 1,000 requests; the loop never blocks.
 * Usage: async_libuv [port] (default 6379). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xfetch_libuv.h>

#define TICKS 20
#define PER_TICK 50
#define KEYS 5

typedef struct server {
  uv_loop_t *loop;
  uv_timer_t arrivals;
  xf_async *cache;
  xf_policy policy;
  int ticks, answered, failed, queries;
  int by_source[4];
} server;

/* ---- the "database": answers 50 ms later ------------------------------------- */

typedef struct query {
  uv_timer_t timer;
  xf_async_load *load;
  char key[32];
} query;

static void query_closed(uv_handle_t *h) { free(h->data); }

static void query_answered(uv_timer_t *t) {
  query *q = t->data;
  char row[96];
  int n = snprintf(row, sizeof row, "{\"id\": \"%s\", \"name\": \"Ada\"}", q->key);
  xf_async_load_done(q->load, row, (size_t)n);
  uv_close((uv_handle_t *)t, query_closed);
}

/* The async loader: starts the query and returns at once. */
static void load_profile(void *ud, const char *key, size_t keylen, xf_async_load *load) {
  server *s = ud;
  query *q = calloc(1, sizeof *q);
  if (!q) {
    xf_async_load_fail(load, XF_ENOMEM);
    return;
  }
  s->queries++;
  snprintf(q->key, sizeof q->key, "%.*s", (int)keylen, key);
  q->load = load;
  uv_timer_init(s->loop, &q->timer);
  q->timer.data = q;
  uv_timer_start(&q->timer, query_answered, 50, 0);
}

/* ---- requests ------------------------------------------------------------------- */

static void count(server *s) {
  if (++s->answered == TICKS * PER_TICK)
    xf_async_close(s->cache); /* the last answer: the loop winds down */
}

static void answered(int rc, const xf_value *v, void *privdata) {
  server *s = privdata;
  if (rc == XF_OK)
    s->by_source[v->source]++; /* a real server would write v->data to its client */
  else
    s->failed++;
  count(s);
}

static void requests_arrive(uv_timer_t *t) {
  server *s = t->data;
  for (int i = 0; i < PER_TICK; i++) {
    char key[32];
    int n = snprintf(key, sizeof key, "user:%d", i % KEYS);
    int rc = xf_async_get_or_compute(s->cache, key, (size_t)n, &s->policy, load_profile, s,
                                     answered, s);
    if (rc != XF_OK) { /* the callback will not fire for this one */
      s->failed++;
      count(s);
    }
  }
  if (++s->ticks == TICKS)
    uv_close((uv_handle_t *)t, NULL);
}

int main(int argc, char **argv) {
  server s = {.loop = uv_default_loop(), .policy = XF_POLICY_INIT};
  s.policy.ttl_ms = 2000;
  xf_options opts = XF_OPTIONS_INIT;
  opts.port = argc > 1 ? atoi(argv[1]) : 6379;
  int rc = xf_async_open_libuv(&s.cache, &opts, s.loop);
  if (rc != XF_OK) {
    fprintf(stderr, "xf_async_open_libuv: %s: %s\n", xf_strerror(rc),
            xf_async_errmsg(NULL));
    return 1;
  }
  uv_timer_init(s.loop, &s.arrivals);
  s.arrivals.data = &s;
  uv_timer_start(&s.arrivals, requests_arrive, 0, 1);
  uv_run(s.loop, UV_RUN_DEFAULT);
  printf("%d requests answered on one thread: %d from the loader, %d from the cache, "
         "%d uncached, %d failed; %d database queries\n",
         s.answered, s.by_source[XF_SOURCE_LOADER], s.by_source[XF_SOURCE_CACHE],
         s.by_source[XF_SOURCE_UNCACHED], s.failed, s.queries);
  uv_loop_close(s.loop);
  return s.failed == 0 ? 0 : 1;
}
