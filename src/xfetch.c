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
#include "key.h"
#include "policy.h"
#include "sink.h"

/* A waiter re-reads after a quarter of the time it has waited so far: the
 * value is seen at most ~25% after it lands, whatever the loader's speed,
 * at ~15 reads per waiter for a 100 ms load. */
#define WAIT_POLL_MIN_MS 2
#define WAIT_POLL_MAX_MS 50
#define WAIT_POLL_DIVISOR 4

/* One get-or-compute call. Everything a call needs lives here, never on the
 * client, so a loader may call back into its own client. */
typedef struct call {
  xf_client *c;
  xf__key key;          /* prefixed, for Redis */
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

/* Releases the lease after a failed load, keeping the loader's message. */
static void release_lease(call *k, const char *token) {
  char msg[sizeof k->c->errstr];
  memcpy(msg, k->c->errstr, sizeof msg);
  xf__entry_release(k->c, k->key.data, k->key.len, token);
  memcpy(k->c->errstr, msg, sizeof msg);
}

/* What the loader's result does to the entry. A value, or a not-found to
 * cache, is written. A not-found that is not cached removes a value the entry
 * still holds (the loader, the source of truth, says it is gone: serving it
 * on would be a wrong value), or just drops the lease when there is none. */
static xf__write what_to_write(call *k, const struct xf_sink *sink, int had_value) {
  const xf_policy *p = k->p;
  xf__write w = {.data = sink->data, .len = sink->len, .kind = XF_WRITE_VALUE};
  if (!sink->not_found) {
    w.ttl_ms = xf__policy_ttl(k->c, p);
    w.keep_ms = xf__policy_keep_ms(p);
  } else if (p->negative_ttl_ms > 0) {
    w.kind = XF_WRITE_NOT_FOUND;
    w.ttl_ms = p->negative_ttl_ms;
  } else if (had_value) {
    w.kind = XF_WRITE_GONE;
    w.ttl_ms = k->c->tombstone_ms;
  } else {
    w.ttl_ms = 0; /* nothing to write */
  }
  return w;
}

/* Loads and writes. token is the lease held ("" for none); start_ms the
 * server time the computation started (it dates the value: newer wins);
 * had_value whether the entry held a value when this call read it. The
 * caller gets the loaded value: as XF_SOURCE_LOADER when it was cached, as
 * XF_SOURCE_UNCACHED when Redis refused it (a newer value or a delete won,
 * or the write failed). */
static int load_and_store(call *k, const char *token, int64_t start_ms, int had_value) {
  struct xf_sink sink;
  int64_t delta_us;
  int rc = run_loader(k, &sink, &delta_us);
  if (rc != XF_OK) {
    if (token[0])
      release_lease(k, token);
    return rc;
  }
  xf__write w = what_to_write(k, &sink, had_value);
  if (w.ttl_ms == 0) {
    if (token[0])
      xf__entry_release(k->c, k->key.data, k->key.len, token);
    return serve_sink(k, &sink, XF_SOURCE_LOADER);
  }
  w.token = token;
  w.delta_us = delta_us;
  w.start_ms = start_ms;
  int written = 0;
  rc = xf__entry_write(k->c, k->key.data, k->key.len, &w, &written);
  if (rc == XF_OK && !written)
    k->c->stats.superseded++;
  return serve_sink(k, &sink,
                    rc == XF_OK && written ? XF_SOURCE_LOADER : XF_SOURCE_UNCACHED);
}

/* ---- the flow ----------------------------------------------------------------- */

static int is_unreachable(int rc) { return rc == XF_EIO || rc == XF_ECONNECT; }

/* A fresh value was elected for early recompute. Whatever happens, the caller
 * gets a valid value: the refreshed one, or the current one; unless the
 * loader says the value is gone (see what_to_write). */
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
  int rc = xf__entry_lease(k->c, k->key.data, k->key.len, k->p->lease_ms, e->expiry_ms,
                           token, &now_ms, &won, &newer);
  if (rc != XF_OK || won == XF_LEASE_LOST) {
    k->c->stats.lease_lost += rc == XF_OK;
    return serve_entry(k, e, XF_SOURCE_CACHE);
  }
  if (won == XF_LEASE_NEWER) {
    xf__entry_free(e);
    return serve_entry(k, &newer, XF_SOURCE_CACHE);
  }
  rc = load_and_store(k, token, now_ms, 1);
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
  *rc = xf__entry_lease(k->c, k->key.data, k->key.len, k->p->lease_ms, e->expiry_ms, token,
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
  *rc = load_and_store(k, token, now_ms, e->value != NULL);
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
    /* A computation that starts after this read is dated by it, no later:
     * a value written since (an xf_set, a delete) is newer and must win. */
    int64_t read_ms = e->now_ms;
    int had_value = e->value != NULL;
    xf__entry_free(e);
    int64_t now_ms = xf__now_ms();
    int64_t left_ms = give_up_ms - now_ms;
    if (left_ms <= 0) {
      if (k->p->on_wait_timeout == XF_WAIT_FAIL)
        return xf__fail(c, XF_ETIMEDOUT, "waited %lld ms for another caller's loader",
                        (long long)k->p->wait_ms);
      return load_and_store(k, "", read_ms, had_value);
    }
    if (round == 0)
      c->stats.waits++;
    sleep_ms(poll_interval_ms(now_ms - started_ms, left_ms));
    rc = xf__entry_read(c, k->key.data, k->key.len, e);
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
  return xf__policy_check(c, p);
}

/* read -> decide: hit, early refresh, or miss. */
static int get_or_compute(call *k) {
  xf__entry e;
  int rc = xf__entry_read(k->c, k->key.data, k->key.len, &e);
  if (is_unreachable(rc))
    return load_uncached(k);
  if (rc != XF_OK)
    return rc;
  if (!e.value || e.remaining_ms <= 0)
    return load_or_wait(k, &e);
  if (xf__recompute_early(&k->c->rng, e.remaining_ms, e.delta_us, k->p->beta))
    return refresh_early(k, &e);
  k->c->stats.hits++;
  return serve_entry(k, &e, XF_SOURCE_CACHE);
}

int xf_get_or_compute(xf_client *c, const char *key, size_t keylen, const xf_policy *p,
                      xf_loader_fn loader, void *ud, xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  c->loader_rc = 0;
  call k = {.c = c,
            .user_key = key,
            .user_keylen = keylen,
            .p = p,
            .loader = loader,
            .ud = ud,
            .out = out};
  int rc = check_call(c, p, loader, out);
  if (rc == XF_OK)
    rc = xf__key_build(c, key, keylen, &k.key);
  if (rc != XF_OK)
    return rc;
  rc = get_or_compute(&k);
  xf__key_free(&k.key);
  return rc;
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
  xf__key full;
  int rc = xf__policy_check(c, p);
  if (rc == XF_OK)
    rc = xf__key_build(c, key, keylen, &full);
  if (rc != XF_OK)
    return rc;
  xf__write w = {.token = "",
                 .data = data,
                 .len = len,
                 .delta_us = -1,
                 .ttl_ms = xf__policy_ttl(c, p),
                 .keep_ms = xf__policy_keep_ms(p),
                 .start_ms = -1,
                 .kind = XF_WRITE_VALUE};
  int written = 0;
  rc = xf__entry_write(c, full.data, full.len, &w, &written);
  xf__key_free(&full);
  if (rc == XF_OK && !written) {
    c->stats.superseded++;
    rc = xf__fail(c, XF_ESUPERSEDED, "not written: the entry holds a newer value");
  }
  return rc;
}

int xf_delete(xf_client *c, const char *key, size_t keylen) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  xf__key full;
  int rc = xf__key_build(c, key, keylen, &full);
  if (rc != XF_OK)
    return rc;
  rc = xf__entry_delete(c, full.data, full.len, c->tombstone_ms);
  xf__key_free(&full);
  return rc;
}
