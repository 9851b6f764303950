/* get-or-compute: read -> decide -> lease -> loader -> write.
 *
 * One read tells us the value, its delta and its remaining lifetime. A fresh
 * value is served unless XFetch elects this caller to refresh it early; then,
 * and on a miss or an expired value, the caller that wins the key's lease runs
 * the loader and writes, while the others serve what they have or wait. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "decide.h"
#include "entry.h"
#include "sink.h"

#define MAX_TIME_MS ((int64_t)1 << 40) /* ~34 years: far inside Lua's doubles */
/* A waiter re-reads after a quarter of the time it has waited so far: the
 * value is seen at most ~25% after it lands, whatever the loader's speed,
 * at ~15 reads per waiter for a 100 ms load. */
#define WAIT_POLL_MIN_MS 2
#define WAIT_POLL_MAX_MS 50
#define WAIT_POLL_DIVISOR 4

/* One get-or-compute call. */
typedef struct call {
  xf_client *c;
  const char *key; /* prefixed, for Redis */
  size_t keylen;
  const char *user_key; /* as given, for the loader */
  size_t user_keylen;
  const xf_policy *p;
  xf_loader_fn loader;
  void *ud;
  xf_value *out;
} call;

void xf_value_free(xf_value *v) {
  if (!v)
    return;
  free(v->data);
  memset(v, 0, sizeof *v);
}

/* ---- validation ------------------------------------------------------------ */

static int check_time(xf_client *c, const char *name, int64_t v, int64_t min) {
  if (v < min || v > MAX_TIME_MS)
    return xf__fail(c, XF_EINVAL, "policy %s is %lld, must be in [%lld, 2^40]", name,
                    (long long)v, (long long)min);
  return XF_OK;
}

static int check_policy(xf_client *c, const xf_policy *p) {
  if (!p)
    return xf__fail(c, XF_EINVAL, "policy is NULL");
  if (isnan(p->beta) || p->beta < 0)
    return xf__fail(c, XF_EINVAL, "policy beta must be >= 0 (INFINITY allowed), not NaN");
  if (isnan(p->jitter) || p->jitter < 0 || p->jitter >= 1)
    return xf__fail(c, XF_EINVAL, "policy jitter must be in [0, 1)");
  if (p->on_wait_timeout != XF_WAIT_LOAD && p->on_wait_timeout != XF_WAIT_FAIL)
    return xf__fail(c, XF_EINVAL, "policy on_wait_timeout is not an xf_on_wait_timeout");
  int rc = check_time(c, "ttl_ms", p->ttl_ms, 1);
  if (rc == XF_OK)
    rc = check_time(c, "lease_ms", p->lease_ms, 1);
  if (rc == XF_OK)
    rc = check_time(c, "wait_ms", p->wait_ms, 0);
  if (rc == XF_OK)
    rc = check_time(c, "stale_ms", p->stale_ms, 0);
  if (rc == XF_OK)
    rc = check_time(c, "stale_if_error_ms", p->stale_if_error_ms, 0);
  if (rc == XF_OK)
    rc = check_time(c, "negative_ttl_ms", p->negative_ttl_ms, 0);
  return rc;
}

/* ---- results ----------------------------------------------------------------- */

static int serve_bytes(call *k, const char *data, size_t len, xf_source source) {
  char *copy = malloc(len + 1);
  if (!copy)
    return xf__fail(k->c, XF_ENOMEM, "out of memory for a %zu-byte value", len);
  if (len)
    memcpy(copy, data, len);
  copy[len] = '\0';
  k->out->data = copy;
  k->out->len = len;
  k->out->source = source;
  return XF_OK;
}

/* Serves an entry's value (or its cached "not found") and frees the entry. */
static int serve_entry(call *k, xf__entry *e, xf_source source) {
  int rc = e->negative ? xf__fail(k->c, XF_ENOTFOUND, "cached not-found")
                       : serve_bytes(k, e->value, e->len, source);
  if (source == XF_SOURCE_STALE)
    k->c->stats.stale++;
  xf__entry_free(e);
  return rc;
}

static int64_t jittered_ttl(xf_client *c, const xf_policy *p) {
  if (p->jitter <= 0)
    return p->ttl_ms;
  int64_t cut = (int64_t)((double)p->ttl_ms * p->jitter * xf__pcg32_unit(&c->rng));
  return p->ttl_ms - cut > 0 ? p->ttl_ms - cut : 1;
}

/* ---- the loader ------------------------------------------------------------ */

/* Runs the loader; on XF_OK the sink holds a value or a not-found. */
static int run_loader(call *k, struct xf_sink *sink, int64_t *delta_us) {
  xf_client *c = k->c;
  xf__sink_init(sink, c->max_value_len);
  c->stats.loads++;
  int64_t t0 = xf__now_us();
  int lrc = k->loader(k->ud, k->user_key, k->user_keylen, sink);
  *delta_us = xf__now_us() - t0;
  if (lrc == 0 && !sink->is_set && !sink->not_found)
    lrc = -1, xf__fail(c, XF_ELOADER, "loader returned 0 without xf_sink_set");
  else if (lrc != 0)
    xf__fail(c, XF_ELOADER, "loader returned %d", lrc);
  if (lrc == 0)
    return XF_OK;
  c->loader_rc = lrc;
  c->stats.load_errors++;
  xf__sink_clear(sink);
  return XF_ELOADER;
}

/* Hands the sink's result to the caller. */
static int serve_sink(call *k, struct xf_sink *sink, xf_source source) {
  if (sink->not_found) {
    xf__sink_clear(sink);
    return xf__fail(k->c, XF_ENOTFOUND, "the loader found nothing");
  }
  k->out->data = xf__sink_take(sink, &k->out->len);
  k->out->source = source;
  if (source == XF_SOURCE_UNCACHED)
    k->c->stats.uncached++;
  return XF_OK;
}

/* Fail open: Redis cannot be used, so load and return without caching. */
static int load_uncached(call *k) {
  struct xf_sink sink;
  int64_t delta_us;
  int rc = run_loader(k, &sink, &delta_us);
  return rc == XF_OK ? serve_sink(k, &sink, XF_SOURCE_UNCACHED) : rc;
}

/* Loads and writes. token is the lease held ("" for none); start_ms the
 * server time the computation started. */
static int load_and_store(call *k, const char *token, int64_t start_ms) {
  struct xf_sink sink;
  int64_t delta_us;
  int rc = run_loader(k, &sink, &delta_us);
  if (rc != XF_OK) {
    if (token[0]) {
      char msg[sizeof k->c->errstr];
      memcpy(msg, k->c->errstr, sizeof msg); /* keep the loader's message */
      xf__entry_release(k->c, k->key, k->keylen, token);
      memcpy(k->c->errstr, msg, sizeof msg);
    }
    return rc;
  }
  if (sink.not_found && k->p->negative_ttl_ms == 0) {
    if (token[0])
      xf__entry_release(k->c, k->key, k->keylen, token);
    return serve_sink(k, &sink, XF_SOURCE_LOADER);
  }
  xf__write w = {token,
                 sink.data,
                 sink.len,
                 delta_us,
                 sink.not_found ? k->p->negative_ttl_ms : jittered_ttl(k->c, k->p),
                 sink.not_found ? 0 : k->p->stale_ms,
                 start_ms,
                 sink.not_found};
  int written;
  rc = xf__entry_write(k->c, k->key, k->keylen, &w, &written);
  return serve_sink(k, &sink, rc == XF_OK ? XF_SOURCE_LOADER : XF_SOURCE_UNCACHED);
}

/* ---- the flow ----------------------------------------------------------------- */

static int is_unreachable(int rc) { return rc == XF_EIO || rc == XF_ECONNECT; }

/* A fresh value was elected for early recompute. Whatever happens, the caller
 * gets a valid value: the refreshed one, or the current one. */
static int refresh_early(call *k, xf__entry *e) {
  char token[40];
  int64_t now_ms;
  xf__lease_result won;
  xf__entry newer;
  k->c->stats.early++;
  if (e->lease_live) { /* someone is refreshing already */
    k->c->stats.lease_lost++;
    return serve_entry(k, e, XF_SOURCE_CACHE);
  }
  int rc = xf__entry_lease(k->c, k->key, k->keylen, k->p->lease_ms, e->expiry_ms, token,
                           &now_ms, &won, &newer);
  if (rc != XF_OK || won == XF_LEASE_LOST) {
    k->c->stats.lease_lost += rc == XF_OK;
    return serve_entry(k, e, XF_SOURCE_CACHE);
  }
  if (won == XF_LEASE_NEWER) {
    xf__entry_free(e);
    return serve_entry(k, &newer, XF_SOURCE_CACHE);
  }
  rc = load_and_store(k, token, now_ms);
  if (rc == XF_ELOADER) /* the current value is still valid: serve it */
    return serve_entry(k, e, XF_SOURCE_CACHE);
  xf__entry_free(e);
  return rc;
}

/* The loader failed on a miss or an expired value: stale-if-error. */
static int after_load_error(call *k, xf__entry *e) {
  if (e->value && !e->negative && -e->remaining_ms <= k->p->stale_if_error_ms)
    return serve_entry(k, e, XF_SOURCE_STALE);
  xf__entry_free(e);
  return XF_ELOADER;
}

static int64_t poll_interval_ms(int64_t waited_ms, int64_t left_ms) {
  int64_t ms = waited_ms / WAIT_POLL_DIVISOR;
  ms = ms < WAIT_POLL_MIN_MS   ? WAIT_POLL_MIN_MS
       : ms > WAIT_POLL_MAX_MS ? WAIT_POLL_MAX_MS
                               : ms;
  return ms < left_ms ? ms : left_ms;
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

/* Outcome of trying the lease on the miss path. */
enum { LEASE_DONE, LEASE_HELD_ELSEWHERE };

/* Tries the lease for a missing or expired value. LEASE_DONE: *rc is the
 * call's result (loaded, or a newer value served, or degraded); the entry has
 * been consumed. LEASE_HELD_ELSEWHERE: another caller holds it. */
static int take_lease_and_load(call *k, xf__entry *e, int *rc) {
  char token[40];
  int64_t now_ms;
  xf__lease_result won;
  xf__entry newer;
  *rc = xf__entry_lease(k->c, k->key, k->keylen, k->p->lease_ms, e->expiry_ms, token,
                        &now_ms, &won, &newer);
  if (*rc != XF_OK) { /* the lease cannot be taken: degrade, never block */
    xf__entry_free(e);
    *rc = is_unreachable(*rc) || *rc == XF_EREDIS ? load_uncached(k) : *rc;
    return LEASE_DONE;
  }
  if (won == XF_LEASE_LOST)
    return LEASE_HELD_ELSEWHERE;
  if (won == XF_LEASE_NEWER) {
    xf__entry_free(e);
    *rc = serve_entry(k, &newer, XF_SOURCE_CACHE);
    return LEASE_DONE;
  }
  *rc = load_and_store(k, token, now_ms);
  if (*rc == XF_ELOADER)
    *rc = after_load_error(k, e);
  else
    xf__entry_free(e);
  return LEASE_DONE;
}

/* The value is missing or expired: take the lease and load, serve stale, or
 * wait (polling, see poll_interval_ms) for the lease holder's value. A lease the
 * read already saw live is not asked for: that round trip could only lose. */
static int load_or_wait(call *k, xf__entry *e) {
  xf_client *c = k->c;
  int64_t started_ms = xf__now_ms();
  int64_t give_up_ms = started_ms + k->p->wait_ms;
  int rc;
  c->stats.misses++;
  for (int round = 0;; round++) {
    if (!e->lease_live && take_lease_and_load(k, e, &rc) == LEASE_DONE)
      return rc;
    if (round == 0)
      c->stats.lease_lost++;
    if (e->value && -e->remaining_ms <= k->p->stale_ms)
      return serve_entry(k, e, XF_SOURCE_STALE);
    xf__entry_free(e);
    int64_t now_ms = xf__now_ms();
    int64_t left_ms = give_up_ms - now_ms;
    if (left_ms <= 0) {
      if (k->p->on_wait_timeout == XF_WAIT_FAIL)
        return xf__fail(c, XF_ETIMEDOUT, "waited %lld ms for another caller's loader",
                        (long long)k->p->wait_ms);
      return load_and_store(k, "", -1); /* written as of its write time */
    }
    if (round == 0)
      c->stats.waits++;
    sleep_ms(poll_interval_ms(now_ms - started_ms, left_ms));
    rc = xf__entry_read(c, k->key, k->keylen, e);
    if (rc != XF_OK)
      return is_unreachable(rc) ? load_uncached(k) : rc;
    if (e->value && e->remaining_ms > 0) {
      c->stats.hits++;
      return serve_entry(k, e, XF_SOURCE_CACHE);
    }
  }
}

static int check_call(xf_client *c, const xf_policy *p, xf_loader_fn loader,
                      xf_value *out) {
  if (!out)
    return xf__fail(c, XF_EINVAL, "out is NULL");
  if (!loader)
    return xf__fail(c, XF_EINVAL, "loader is NULL");
  return check_policy(c, p);
}

int xf_get_or_compute(xf_client *c, const char *key, size_t keylen, const xf_policy *p,
                      xf_loader_fn loader, void *ud, xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  c->loader_rc = 0;
  call k = {c, NULL, 0, key, keylen, p, loader, ud, out};
  int rc = check_call(c, p, loader, out);
  if (rc == XF_OK)
    rc = xf__full_key(c, key, keylen, &k.key, &k.keylen);
  if (rc != XF_OK)
    return rc;

  xf__entry e;
  rc = xf__entry_read(c, k.key, k.keylen, &e);
  if (is_unreachable(rc))
    return load_uncached(&k);
  if (rc != XF_OK)
    return rc;
  if (!e.value || e.remaining_ms <= 0)
    return load_or_wait(&k, &e);
  if (xf__recompute_early(&c->rng, e.remaining_ms, e.delta_us, p->beta))
    return refresh_early(&k, &e);
  c->stats.hits++;
  return serve_entry(&k, &e, XF_SOURCE_CACHE);
}

int xf_set(xf_client *c, const char *key, size_t keylen, const void *data, size_t len,
           const xf_policy *p) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  if (!data && len > 0)
    return xf__fail(c, XF_EINVAL, "data is NULL");
  if (len > c->max_value_len)
    return xf__fail(c, XF_EINVAL, "value is %zu bytes, above max_value_len %zu", len,
                    c->max_value_len);
  const char *full;
  size_t fulllen;
  int rc = check_policy(c, p);
  if (rc == XF_OK)
    rc = xf__full_key(c, key, keylen, &full, &fulllen);
  if (rc != XF_OK)
    return rc;
  xf__write w = {"", data, len, -1, jittered_ttl(c, p), p->stale_ms, -1, 0};
  int written;
  return xf__entry_write(c, full, fulllen, &w, &written);
}

int xf_delete(xf_client *c, const char *key, size_t keylen) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  const char *full;
  size_t fulllen;
  int rc = xf__full_key(c, key, keylen, &full, &fulllen);
  if (rc != XF_OK)
    return rc;
  const char *argv[] = {"DEL", full};
  size_t lens[] = {3, fulllen};
  redisReply *r;
  rc = xf__command(c, 2, argv, lens, &r);
  if (rc != XF_OK)
    return rc;
  if (r->type == REDIS_REPLY_ERROR)
    rc = xf__fail(c, XF_EREDIS, "DEL: %s", r->str);
  freeReplyObject(r);
  return rc;
}
