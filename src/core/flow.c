/* get-or-compute as a sans-I/O machine: read -> decide -> lease -> load ->
 * write, with waits (see flow.h for how a driver runs it).
 *
 * One read tells us the value, its delta and its remaining lifetime. A fresh
 * value is served unless XFetch elects this caller to refresh it early; then,
 * and on a miss or an expired value, the caller that wins the key's lease runs
 * the loader and writes, while the others serve what they have or wait. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "decide.h"
#include "flow.h"
#include "policy.h"
#include "reply.h"
#include "script.h"
#include "share.h"

/* A waiter re-reads after a quarter of the time it has waited so far: the
 * value is seen at most ~25% after it lands, whatever the loader's speed,
 * at ~15 reads per waiter for a 100 ms load. */
#define WAIT_POLL_MIN_MS 2
#define WAIT_POLL_MAX_MS 50
#define WAIT_POLL_DIVISOR 4

/* The steps of the flow; the ones that send name the script they run. */
enum { READ, LEASE, WRITE, RELEASE, LOAD, WAIT, DONE };
static const int script_of[] = {XF_SCRIPT_READ, XF_SCRIPT_LEASE, XF_SCRIPT_WRITE,
                                XF_SCRIPT_RELEASE};

/* Redis cannot be used for this step (down, cut off, or busy, loading,
 * read-only, out of memory...): every step fails open the same way. */
static int is_unreachable(int rc) {
  return rc == XF_EIO || rc == XF_ECONNECT || rc == XF_EUNAVAILABLE;
}

/* ---- sending ------------------------------------------------------------------- */

/* The lease a caller asks for: policy.lease_ms, or twice the entry's delta
 * (its last loader's time) when that is longer, so a loader slower than the
 * policy's lease keeps the key's protection from its second run on instead
 * of letting every caller load once its lease runs out. */
static int64_t lease_ms_for(const xf__flow *f) {
  int64_t twice_delta_ms = f->e.delta_us > 0 ? (f->e.delta_us + 499) / 500 : 0;
  if (twice_delta_ms > XF_MAX_TIME_MS)
    twice_delta_ms = XF_MAX_TIME_MS;
  return twice_delta_ms > f->p->lease_ms ? twice_delta_ms : f->p->lease_ms;
}

/* Encodes the command of the current step (again, after a SCRIPT LOAD). */
static xf__step encode(xf__flow *f) {
  const char *key = f->key.data;
  size_t len = f->key.len;
  switch (f->state) {
  case READ:
    xf__entry_read_cmd(&f->cmd, key, len);
    break;
  case LEASE:
    xf__entry_lease_cmd(&f->cmd, key, len, f->token, lease_ms_for(f), f->e.expiry_ms,
                        f->first_read_ms);
    break;
  case WRITE:
    xf__entry_write_cmd(&f->cmd, key, len, &f->w);
    break;
  default:
    xf__entry_release_cmd(&f->cmd, key, len, f->token,
                          f->found_nothing ? f->p->wait_ms : 0);
  }
  /* A waiter re-reads to see the value the lease holder wrote: a replica
   * may not have it yet. */
  f->cmd.on_master = f->state == READ && f->round > 0;
  return XF_STEP_SEND;
}

static xf__step send(xf__flow *f, int state) {
  f->state = state;
  f->script_retried = 0;
  return encode(f);
}

/* ---- ending -------------------------------------------------------------------- */

static xf__step done(xf__flow *f, int rc) {
  f->rc = rc;
  f->state = DONE;
  xf__entry_free(&f->e);
  xf__sink_clear(&f->sink);
  xf__key_free(&f->key);
  return XF_STEP_DONE;
}

static int serve_bytes(xf__flow *f, const char *data, size_t len, xf_source source) {
  char *copy = malloc(len + 1);
  if (!copy)
    return xf__fail(f->c, XF_ENOMEM, "out of memory for a %zu-byte value", len);
  if (len)
    memcpy(copy, data, len);
  copy[len] = '\0';
  f->out->data = copy;
  f->out->len = len;
  f->out->source = source;
  return XF_OK;
}

/* Hands the entry's value (or its cached "not found") to the caller. */
static int serve_entry(xf__flow *f, const xf__entry *e, xf_source source) {
  if (source == XF_SOURCE_STALE)
    f->c->stats.stale++;
  return e->negative ? xf__fail(f->c, XF_ENOTFOUND, "cached not-found")
                     : serve_bytes(f, e->value, e->len, source);
}

static xf__step serve(xf__flow *f, xf_source source) {
  return done(f, serve_entry(f, &f->e, source));
}

/* Hands the loader's result to the caller. */
static int serve_sink(xf__flow *f, xf_source source) {
  if (f->sink.not_found)
    return xf__fail(f->c, XF_ENOTFOUND, "the loader found nothing");
  f->out->data = xf__sink_take(&f->sink, &f->out->len);
  f->out->source = source;
  if (source == XF_SOURCE_UNCACHED)
    f->c->stats.uncached++;
  return XF_OK;
}

/* The outcome is decided (f->rc, *out); drop the lease first, keeping the
 * message the outcome left on the client. */
static xf__step release_then_done(xf__flow *f, int rc) {
  f->rc = rc;
  memcpy(f->msg, f->c->errstr, sizeof f->msg);
  return send(f, RELEASE);
}

static xf__step release_done(xf__flow *f, xf__reply *r) {
  if (r)
    xf__reply_free(r);
  memcpy(f->c->errstr, f->msg, sizeof f->msg);
  return done(f, f->rc);
}

/* ---- load ---------------------------------------------------------------------- */

static xf__step load(xf__flow *f, xf__load_kind kind) {
  if (kind == XF_LOAD_UNCACHED)
    xf__entry_free(&f->e);
  f->load = kind;
  f->state = LOAD;
  xf__sink_init(&f->sink, f->c->max_value_len);
  f->c->stats.loads++;
  return XF_STEP_LOAD;
}

/* What the loader's result does to the entry. A value, or a not-found to
 * cache, is written. A not-found that is not cached removes a value the entry
 * held when read (the loader, the source of truth, says it is gone: serving
 * it on would be a wrong value); with none, there is nothing to write
 * (ttl_ms 0). */
static xf__write what_to_write(xf__flow *f) {
  const xf_policy *p = f->p;
  xf__write w = {.token = f->token,
                 .data = f->sink.data,
                 .len = f->sink.len,
                 .delta_us = f->delta_us,
                 .start_ms = f->start_ms};
  if (!f->sink.not_found && f->sink.ttl_set && f->sink.ttl_ms == 0) {
    w.ttl_ms = 0; /* xf_sink_ttl(sink, 0): returned, not cached */
  } else if (!f->sink.not_found) {
    xf_policy q = *p; /* xf_sink_ttl's ttl, with the policy's jitter */
    if (f->sink.ttl_set)
      q.ttl_ms = f->sink.ttl_ms;
    w.kind = XF_WRITE_VALUE;
    w.ttl_ms = xf__policy_ttl(f->c, &q);
    w.keep_ms = xf__policy_keep_ms(p);
  } else if (p->negative_ttl_ms > 0) {
    w.kind = XF_WRITE_NOT_FOUND;
    w.ttl_ms = p->negative_ttl_ms;
  } else if (f->had_value) {
    w.kind = XF_WRITE_GONE;
    w.ttl_ms = f->c->tombstone_ms;
  }
  return w;
}

/* The loader failed: nothing is cached. An early refresh still serves the
 * valid value; a miss serves stale if stale-if-error allows. */
static xf__step load_failed(xf__flow *f) {
  if (f->load != XF_LOAD_LEASED)
    return done(f, XF_ELOADER);
  const xf__entry *e = &f->e;
  int rc = XF_ELOADER;
  if (f->refresh)
    rc = serve_entry(f, e, XF_SOURCE_CACHE);
  else if (e->value && !e->negative && -e->remaining_ms <= f->p->stale_if_error_ms)
    rc = serve_entry(f, e, XF_SOURCE_STALE);
  return release_then_done(f, rc);
}

xf__step xf__flow_loaded(xf__flow *f, int lrc, int64_t delta_us, int64_t now_ms) {
  (void)now_ms;
  xf_client *c = f->c;
  if (lrc == 0 && !f->sink.is_set && !f->sink.not_found)
    lrc = -1, xf__fail(c, XF_ELOADER, "loader returned 0 without xf_sink_set");
  else if (lrc != 0)
    xf__fail(c, XF_ELOADER, "loader returned %d", lrc);
  if (lrc != 0) {
    c->loader_rc = lrc;
    c->stats.load_errors++;
    xf__sink_clear(&f->sink);
    return load_failed(f);
  }
  if (f->load == XF_LOAD_UNCACHED)
    return done(f, serve_sink(f, XF_SOURCE_UNCACHED));
  f->delta_us = delta_us;
  f->w = what_to_write(f);
  if (f->w.ttl_ms > 0)
    return send(f, WRITE);
  /* A not-found not to cache (the release tells the callers that waited on
   * this lease), or a value the loader said not to cache. */
  f->found_nothing = f->sink.not_found;
  int rc = serve_sink(f, f->sink.not_found ? XF_SOURCE_LOADER : XF_SOURCE_UNCACHED);
  return f->token[0] ? release_then_done(f, rc) : done(f, rc);
}

xf__step xf__flow_local(xf__flow *f, int rc, char *data, size_t len) {
  f->c->stats.loads--;    /* load() counted a loader run the share made unneeded */
  if (rc == XF_ECANCELED) /* interrupted while waiting for the share's flight */
    return done(f, xf__fail(f->c, rc, "interrupted (options.interrupt)"));
  f->c->stats.local++;
  if (rc != XF_OK) {
    free(data);
    if (rc == XF_ELOADER)
      xf__fail(f->c, rc, "the loader failed in another thread's load of this key");
    else if (rc == XF_ENOTFOUND)
      xf__fail(f->c, rc, "another thread's loader found nothing");
    return done(f, rc);
  }
  f->out->data = data;
  f->out->len = len;
  f->out->source = XF_SOURCE_LOCAL;
  return done(f, XF_OK);
}

/* Written: the caller gets its value, as cached or (refused, failed) not. */
static xf__step write_done(xf__flow *f, int rc, xf__reply *r) {
  int written = 0;
  /* Whatever came of it, a fallback copy in the share is older than the
   * value (or not-found) just written: never serve it again. */
  xf__share_drop(f->c, f->key.data, f->key.len);
  if (rc == XF_OK)
    rc = xf__entry_parse_int(f->c, r, "write", &written);
  if (rc == XF_OK && !written)
    f->c->stats.superseded++;
  return done(
      f, serve_sink(f, rc == XF_OK && written ? XF_SOURCE_LOADER : XF_SOURCE_UNCACHED));
}

/* ---- miss: lease, stale, or wait ---------------------------------------------- */

static int64_t poll_interval_ms(int64_t waited_ms, int64_t left_ms) {
  int64_t ms = waited_ms / WAIT_POLL_DIVISOR;
  ms = ms < WAIT_POLL_MIN_MS   ? WAIT_POLL_MIN_MS
       : ms > WAIT_POLL_MAX_MS ? WAIT_POLL_MAX_MS
                               : ms;
  return ms < left_ms ? ms : left_ms;
}

/* Another caller holds the lease of a missing or expired value: serve stale,
 * wait for its value, or after wait_ms load (or fail) anyway. */
static xf__step lease_held_elsewhere(xf__flow *f, int64_t now_ms) {
  xf__entry *e = &f->e;
  if (f->round == 0) {
    f->c->stats.lease_lost++;
    /* The wait budget starts here, not at the read: a batch may hold a
     * miss's lease request back while its earlier keys load (batch.c). */
    f->waited_from_ms = now_ms;
    f->give_up_ms = now_ms + f->p->wait_ms;
  }
  if (e->value && -e->remaining_ms <= f->p->stale_ms)
    return serve(f, XF_SOURCE_STALE);
  /* A computation that starts after this read is dated by it, no later: a
   * value written since (an xf_set, a delete) is newer and must win. */
  f->start_ms = e->now_ms;
  f->had_value = e->value != NULL || e->malformed;
  xf__entry_free(e);
  int64_t left_ms = f->give_up_ms - now_ms;
  if (left_ms <= 0) {
    if (f->p->on_wait_timeout == XF_WAIT_FAIL)
      return done(f,
                  xf__fail(f->c, XF_ETIMEDOUT, "waited %lld ms for another caller's loader",
                           (long long)f->p->wait_ms));
    return load(f, XF_LOAD_GAVE_UP);
  }
  if (f->round == 0)
    f->c->stats.waits++;
  f->wake_ms = now_ms + poll_interval_ms(now_ms - f->waited_from_ms, left_ms);
  f->state = WAIT;
  return XF_STEP_WAIT;
}

/* The value is missing or expired. A lease the read already saw live is not
 * asked for: that round trip could only lose. */
static xf__step miss(xf__flow *f, int64_t now_ms) {
  /* Not when the read may come from a lagging replica: the lease script runs
   * on the master and says whether the lease is live there. */
  if (f->e.lease_live && !f->c->read_from_replicas)
    return lease_held_elsewhere(f, now_ms);
  xf__entry_token(f->c, f->token);
  f->refresh = 0;
  return send(f, LEASE);
}

xf__step xf__flow_woke(xf__flow *f, int64_t now_ms) {
  (void)now_ms;
  f->round++;
  return send(f, READ);
}

int xf__flow_interrupted(const xf__flow *f) {
  return f->interrupt && f->interrupt(f->interrupt_ud) != 0;
}

xf__step xf__flow_cancel(xf__flow *f) {
  xf_value_free(f->out);    /* a value decided before a release: not returned */
  if (xf__flow_canceled(f)) /* that release failed too: the lease expires */
    return done(f, XF_ECANCELED);
  int rc = xf__fail(f->c, XF_ECANCELED, "interrupted (options.interrupt)");
  return f->token[0] && f->state != DONE ? release_then_done(f, rc) : done(f, rc);
}

/* ---- early refresh ------------------------------------------------------------- */

/* A fresh value was elected for early recompute. Whatever happens, the caller
 * gets a valid value: the refreshed one, or the current one; unless the
 * loader says the value is gone (see what_to_write). */
static xf__step refresh_early(xf__flow *f) {
  f->c->stats.early++;
  if (f->e.lease_live) { /* someone is refreshing already */
    f->c->stats.lease_lost++;
    return serve(f, XF_SOURCE_CACHE);
  }
  xf__entry_token(f->c, f->token);
  f->refresh = 1;
  return send(f, LEASE);
}

static xf__step lease_done(xf__flow *f, int rc, xf__reply *r, int64_t now_ms) {
  int64_t lease_ms = 0;
  xf__lease_result won = XF_LEASE_LOST;
  xf__entry newer;
  if (rc == XF_OK)
    rc = xf__entry_parse_lease(f->c, r, &lease_ms, &won, &newer);
  if (rc != XF_OK) { /* the lease cannot be taken: degrade, never block */
    f->token[0] = '\0';
    if (f->refresh)
      return serve(f, XF_SOURCE_CACHE);
    return is_unreachable(rc) ? load(f, XF_LOAD_UNCACHED) : done(f, rc);
  }
  if (won == XF_LEASE_NOTHING) { /* this caller came during a load that found nothing */
    f->token[0] = '\0';
    return done(f, xf__fail(f->c, XF_ENOTFOUND, "another caller's loader found nothing"));
  }
  if (won == XF_LEASE_NEWER) {
    xf__entry_free(&f->e);
    f->e = newer;
    return serve(f, XF_SOURCE_CACHE);
  }
  if (won == XF_LEASE_LOST) {
    f->token[0] = '\0';
    if (!f->refresh)
      return lease_held_elsewhere(f, now_ms);
    f->c->stats.lease_lost++;
    return serve(f, XF_SOURCE_CACHE);
  }
  f->start_ms = lease_ms;
  f->had_value = f->refresh || f->e.value != NULL || f->e.malformed;
  return load(f, XF_LOAD_LEASED);
}

/* ---- read -> decide ------------------------------------------------------------- */

static xf__step read_done(xf__flow *f, int rc, xf__reply *r, int64_t now_ms) {
  if (rc == XF_OK)
    rc = xf__entry_parse_read(f->c, r, &f->e);
  if (is_unreachable(rc))
    return load(f, XF_LOAD_UNCACHED);
  if (rc != XF_OK)
    return done(f, rc);
  xf__entry *e = &f->e;
  int fresh = e->value && e->remaining_ms > 0;
  if (f->round == 0)
    f->first_read_ms = e->now_ms;
  if (f->round > 0) { /* a waiter's re-read */
    if (!fresh)
      return miss(f, now_ms);
    f->c->stats.hits++;
    return serve(f, XF_SOURCE_CACHE);
  }
  if (!fresh) {
    f->c->stats.misses++;
    return miss(f, now_ms);
  }
  if (xf__recompute_early(&f->c->rng, e->remaining_ms, e->delta_us, f->p->beta))
    return refresh_early(f);
  f->c->stats.hits++;
  return serve(f, XF_SOURCE_CACHE);
}

/* ---- inputs -------------------------------------------------------------------- */

xf__step xf__flow_start(xf__flow *f, xf_client *c, const char *key, size_t keylen,
                        const xf_policy *p, xf_value *out, int64_t now_ms) {
  (void)now_ms;
  /* Only what a step may read before writing it: the flow is ~1 KiB, and a
   * hit should not pay for clearing it. */
  f->c = c;
  f->p = p;
  f->user_key = key;
  f->user_keylen = keylen;
  f->out = out;
  f->interrupt = c->interrupt;
  f->interrupt_ud = c->interrupt_ud;
  memset(out, 0, sizeof *out);
  memset(&f->sink, 0, sizeof f->sink);
  memset(&f->e, 0, sizeof f->e);
  f->key.data = NULL;
  f->token[0] = '\0';
  f->load = XF_LOAD_LEASED;
  f->rc = XF_OK;
  f->script_loading = f->refresh = f->round = f->had_value = f->found_nothing = 0;
  f->start_ms = f->delta_us = f->first_read_ms = 0;
  int rc = xf__policy_check(c, p);
  if (rc == XF_OK)
    rc = xf__key_build(c, key, keylen, &f->key);
  if (rc == XF_OK && xf__nest_has(c, f->key.data, f->key.len)) {
    int shown = keylen > 60 ? 60 : (int)keylen; /* the message holds both */
    rc = xf__fail(c, XF_EINVAL,
                  "the loader for key %.*s asked for %.*s itself (a recursion: it would "
                  "wait on its own lease)",
                  shown, key, shown, key);
  }
  if (rc != XF_OK)
    return done(f, rc);
  return send(f, READ);
}

int xf__flow_leasing(const xf__flow *f) { return f->state == LEASE; }

xf__step xf__flow_reply(xf__flow *f, int rc, xf__reply *r, int64_t now_ms) {
  if (rc == XF_ECANCELED) { /* the interrupt cut a reply wait short */
    f->script_loading = 0;
    return xf__flow_cancel(f);
  }
  int script = script_of[f->state];
  if (f->script_loading) { /* the reply to SCRIPT LOAD: resend the command */
    f->script_loading = 0;
    if (rc == XF_OK)
      rc = xf__script_loaded(f->c, script, r);
    r = NULL;
    if (rc == XF_OK)
      return encode(f);
  } else if (rc == XF_OK && r->type == XF_REPLY_ERROR) {
    if (xf__script_missing(r) && !f->script_retried) { /* e.g. after SCRIPT FLUSH */
      xf__reply_free(r);
      f->script_retried = f->script_loading = 1;
      xf__script_load_cmd(&f->cmd, script, f->key.data, f->key.len);
      return XF_STEP_SEND;
    }
    rc = xf__script_error(f->c, script, r);
    r = NULL;
  }
  switch (f->state) {
  case READ:
    return read_done(f, rc, r, now_ms);
  case LEASE:
    return lease_done(f, rc, r, now_ms);
  case WRITE:
    return write_done(f, rc, r);
  default:
    return release_done(f, r);
  }
}
