/* Get-or-compute's decisions in the flow (flow.h; the machine that sends and
 * takes replies is flow.c): read -> decide -> lease -> load -> write, with
 * waits.
 *
 * One read tells us the value, its delta and its remaining lifetime. A fresh
 * value is served unless XFetch elects this caller to refresh it early; then,
 * and on a miss or an expired value, the caller that wins the key's lease runs
 * the loader and writes, while the others serve what they have or wait. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "decide.h"
#include "event.h"
#include "flow_steps.h"
#include "policy.h"

/* A waiter re-reads after a quarter of the time it has waited so far: the
 * value is seen at most ~25% after it lands, whatever the loader's speed,
 * at ~15 reads per waiter for a 100 ms load. */
#define WAIT_POLL_MIN_MS 2
#define WAIT_POLL_MAX_MS 50
#define WAIT_POLL_DIVISOR 4
/* With wake-on-write (a near cache), the fallback poll: a write wakes the
 * waiter, a lost connection too (its node's drop); this only bounds how
 * late a lease that expired without a write (its holder died) is seen. */
#define WAIT_POLL_NEAR_MS 200

/* Redis cannot be used for this step (down, cut off, or busy, loading,
 * read-only, out of memory...): every step fails open the same way. */
static int is_unreachable(int rc) {
  return rc == XF_EIO || rc == XF_ECONNECT || rc == XF_EUNAVAILABLE;
}

/* ---- events owed ------------------------------------------------------------- */

/* f->pending: a miss's result is told once the call neither serves stale nor
 * fails open (each call reports one result); a wait's end once it is over.
 * A fail-open with a share is told once the share answered (the result with
 * source XF_SOURCE_LOCAL, and no load_start) or the loader is about to run
 * (the driver settles: the result, then load_start). */

void xf__flow_settle(xf__flow *f) {
  int pending = f->pending;
  f->pending = 0;
  if (pending & XF__PENDING_WAIT)
    xf__emit(f, XF_EV_WAIT, -1, (f->woke_ms - f->waited_from_ms) * 1000, 0);
  if (pending & XF__PENDING_MISS)
    xf__emit(f, XF_EV_MISS, -1, 0, 0);
  if (pending & XF__PENDING_FAIL_OPEN)
    xf__emit(f, XF_EV_FAIL_OPEN, -1, 0, f->fail_open_rc);
  if (pending & XF__PENDING_LOAD_START)
    xf__emit(f, XF_EV_LOAD_START, -1, 0, 0);
}

/* The call's result is other than a miss (stale, fail-open). */
static void result_instead_of_miss(xf__flow *f, xf_event_type type, int source, int rc) {
  f->pending &= ~XF__PENDING_MISS;
  xf__emit(f, type, source, 0, rc);
}

/* ---- the lease ----------------------------------------------------------------- */

/* The lease a caller asks for: policy.lease_ms, or twice the entry's delta
 * (its last loader's time) when that is longer, so a loader slower than the
 * policy's lease keeps the key's protection from its second run on instead
 * of letting every caller load once its lease runs out. */
int64_t xf__flow_lease_ms(const xf__flow *f) {
  int64_t twice_delta_ms = f->e.delta_us > 0 ? (f->e.delta_us + 499) / 500 : 0;
  if (twice_delta_ms > XF_MAX_TIME_MS)
    twice_delta_ms = XF_MAX_TIME_MS;
  return twice_delta_ms > f->p->lease_ms ? twice_delta_ms : f->p->lease_ms;
}

/* ---- serving ------------------------------------------------------------------- */

/* Hands the entry's value (or its cached "not found") to the caller. */
static int serve_entry(xf__flow *f, const xf__entry *e, xf_source source) {
  if (source == XF_SOURCE_STALE) {
    f->rt->stats.stale++;
    result_instead_of_miss(f, XF_EV_STALE, XF_SOURCE_STALE, 0);
  }
  return e->negative ? xf__rt_fail(f->rt, XF_ENOTFOUND, "cached not-found")
                     : xf__flow_serve_entry(f, source); /* e is f->e: taken, not copied */
}

static xf__step serve(xf__flow *f, xf_source source) {
  return xf__flow_done(f, serve_entry(f, &f->e, source));
}

/* Hands the loader's result to the caller. */
static int serve_sink(xf__flow *f, xf_source source) {
  if (f->sink.not_found)
    return xf__rt_fail(f->rt, XF_ENOTFOUND, "the loader found nothing");
  f->out->data = xf__sink_take(&f->sink, &f->out->len);
  f->out->source = source;
  if (source == XF_SOURCE_UNCACHED && f->load != XF_LOAD_BYPASS)
    f->rt->stats.uncached++;
  return XF_OK;
}

/* The outcome is decided (f->rc, *out); drop the lease first, keeping the
 * message the outcome left on the client. */
static xf__step release_then_done(xf__flow *f, int rc) {
  f->rc = rc;
  memcpy(f->msg, f->rt->errstr, sizeof f->msg);
  return xf__flow_send(f, XF__RELEASE);
}

xf__step xf__flow_released(xf__flow *f, xf__reply *r) {
  if (r)
    xf__reply_free(r);
  memcpy(f->rt->errstr, f->msg, sizeof f->msg);
  return xf__flow_done(f, f->rc);
}

/* ---- load ---------------------------------------------------------------------- */

/* A load that refreshes a value the entry holds (an early or background
 * refresh, a value past its ttl that Redis keeps) gives its loader that
 * value (xf_sink_previous): a copy the sink owns, since the load may leave
 * the call (a background refresh, a timeout) while the call serves the
 * entry's. Without memory for it, the loader sees none. */
static void give_previous(xf__flow *f) {
  const xf__entry *e = &f->e;
  if (!e->value || e->negative)
    return;
  struct xf_sink *s = &f->sink;
  s->has_prev = 1;
  s->prev = e->value;
  s->prev_len = e->len;
  s->prev_expiry_ms = e->expiry_ms;
  s->prev_validator_len = e->validator_len <= XF_MAX_VALIDATOR ? e->validator_len : 0;
  if (s->prev_validator_len)
    memcpy(s->prev_validator, e->validator, s->prev_validator_len);
  s->prev_age_ms = e->start_ms > 0 ? e->now_late_ms - e->start_ms : -1;
  if (s->prev_age_ms < -1)
    s->prev_age_ms = 0; /* dated a little ahead by another clock */
  xf__sink_own_previous(s);
}

static xf__step load(xf__flow *f, xf__load_kind kind) {
  if (kind == XF_LOAD_UNCACHED)
    xf__entry_free(&f->e);
  f->load = kind;
  f->state = XF__LOAD;
  f->load_start_ms = f->input_ms;
  xf__sink_init(&f->sink, f->cfg->max_value_len);
  if (kind == XF_LOAD_LEASED || kind == XF_LOAD_GAVE_UP)
    give_previous(f);
  f->rt->stats.loads++;
  if (f->pending)
    xf__flow_settle(f);
  if (kind == XF_LOAD_UNCACHED && f->rt->ports.share) { /* the share may answer instead */
    f->pending |= XF__PENDING_FAIL_OPEN | XF__PENDING_LOAD_START;
    return XF_STEP_LOAD;
  }
  xf__emit(f, XF_EV_LOAD_START, -1, 0, 0);
  return XF_STEP_LOAD;
}

/* Redis cannot be used (rc): the loader runs, nothing is cached (or the
 * share answers: the result is told then, xf__flow_local). */
static xf__step fail_open(xf__flow *f, int rc) {
  f->pending &= ~XF__PENDING_MISS;
  f->fail_open_rc = rc;
  if (!f->rt->ports.share)
    xf__emit(f, XF_EV_FAIL_OPEN, -1, 0, rc);
  return load(f, XF_LOAD_UNCACHED);
}

xf__step xf__flow_bypass(xf__flow *f) {
  f->rt->stats.bypassed++;
  return load(f, XF_LOAD_BYPASS);
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
                 .start_ms = f->start_ms,
                 .tags = f->tag_rec_len ? f->tag_rec : NULL,
                 .tags_len = f->tag_rec_len,
                 .validator = f->sink.validator_len ? f->sink.validator : NULL,
                 .validator_len = f->sink.validator_len};
  if (!f->sink.not_found && f->sink.ttl_set && f->sink.ttl_ms == 0) {
    w.ttl_ms = 0; /* xf_sink_ttl(sink, 0): returned, not cached */
  } else if (!f->sink.not_found) {
    xf_policy q = *p; /* xf_sink_ttl's ttl, with the policy's jitter */
    if (f->sink.ttl_set)
      q.ttl_ms = f->sink.ttl_ms;
    w.kind = XF_WRITE_VALUE;
    w.ttl_ms = xf__policy_ttl(f->rt, &q);
    w.keep_ms = xf__policy_keep_ms(p);
  } else if (p->negative_ttl_ms > 0) {
    w.kind = XF_WRITE_NOT_FOUND;
    w.ttl_ms = p->negative_ttl_ms;
  } else if (f->had_value) {
    w.kind = XF_WRITE_GONE;
    w.ttl_ms = f->cfg->tombstone_ms;
  }
  return w;
}

/* Whether e's value may be served when a load fails (stale_if_error_ms). */
static int within_stale_if_error(const xf__flow *f, const xf__entry *e) {
  return e->value && !e->negative && -e->remaining_ms <= f->p->stale_if_error_ms;
}

/* The loader failed: nothing is cached. An early refresh still serves the
 * valid value; a miss serves stale if stale-if-error allows, whether it
 * held the lease or gave up waiting for it. */
static xf__step load_failed(xf__flow *f) {
  if (f->load != XF_LOAD_LEASED && f->load != XF_LOAD_GAVE_UP)
    return xf__flow_done(f, XF_ELOADER);
  const xf__entry *e = &f->e;
  int rc = XF_ELOADER;
  if (f->detached) /* a background refresh: the value stays, no one to serve */
    rc = XF_ELOADER;
  else if (f->refresh)
    rc = serve_entry(f, e, XF_SOURCE_CACHE);
  else if (within_stale_if_error(f, e))
    rc = serve_entry(f, e, XF_SOURCE_STALE);
  if (f->load == XF_LOAD_GAVE_UP) /* no lease of its own to release or mark */
    return xf__flow_done(f, rc);
  /* The entry's value stands in for the loader's: the fleet keeps serving it
   * for the throttle instead of loading again (lua/release.lua). */
  if (f->detached || f->refresh || rc == XF_OK)
    f->failsafe_hold_ms = f->p->failsafe_throttle_ms;
  return release_then_done(f, rc);
}

/* The loader answered "unchanged": its previous value becomes its result,
 * and the entry it came from is touched (lua/touch.lua: its life extended as
 * a write's, under the same lease and newer-wins guards; its value and delta
 * kept), unless the value is not to be cached (xf_sink_ttl 0). */
static xf__step revalidate(xf__flow *f) {
  struct xf_sink *s = &f->sink;
  if (xf__sink_own_previous(s) != XF_OK) {
    xf__rt_fail(f->rt, XF_ENOMEM, "no memory for the previous value");
    return f->token[0] ? release_then_done(f, XF_ENOMEM) : xf__flow_done(f, XF_ENOMEM);
  }
  s->data = s->prev_own;
  s->len = s->prev_len;
  s->prev_own = NULL;
  s->prev = s->data;
  s->is_set = 1;
  f->w = what_to_write(f);
  if (f->w.ttl_ms > 0)
    return xf__flow_send(f, XF__TOUCH);
  int rc = serve_sink(f, XF_SOURCE_UNCACHED);
  return f->token[0] ? release_then_done(f, rc) : xf__flow_done(f, rc);
}

xf__step xf__flow_loaded(xf__flow *f, int lrc, int64_t delta_us, int64_t now_ms) {
  f->input_ms = now_ms;
  xf__runtime *rt = f->rt;
  if (lrc == 0 && !f->sink.is_set && !f->sink.not_found && !f->sink.unchanged)
    lrc = -1, xf__rt_fail(rt, XF_ELOADER, "loader returned 0 without xf_sink_set");
  else if (lrc != 0)
    xf__rt_fail(rt, XF_ELOADER, "loader returned %d", lrc);
  if (f->pending) /* a driver that did not settle before its loader ran */
    xf__flow_settle(f);
  xf__emit(f, XF_EV_LOAD_DONE, -1, delta_us, lrc);
  if (lrc != 0) {
    rt->loader_rc = lrc;
    rt->stats.load_errors++;
    xf__sink_clear(&f->sink);
    return load_failed(f);
  }
  if (f->load == XF_LOAD_UNCACHED || f->load == XF_LOAD_BYPASS)
    return xf__flow_done(f, serve_sink(f, XF_SOURCE_UNCACHED));
  f->delta_us = delta_us;
  if (f->sink.unchanged) /* the previous value is the result */
    return revalidate(f);
  f->w = what_to_write(f);
  if (f->w.ttl_ms > 0) {
    xf__flow_pack(f);
    return xf__flow_send(f, XF__WRITE);
  }
  /* A not-found not to cache (the release tells the callers that waited on
   * this lease), or a value the loader said not to cache. */
  f->found_nothing = f->sink.not_found;
  int rc = serve_sink(f, f->sink.not_found ? XF_SOURCE_LOADER : XF_SOURCE_UNCACHED);
  return f->token[0] ? release_then_done(f, rc) : xf__flow_done(f, rc);
}

xf__step xf__flow_local(xf__flow *f, int rc, char *data, size_t len) {
  f->rt->stats.loads--; /* load() counted a loader run the share made unneeded */
  if (f->pending &
      XF__PENDING_FAIL_OPEN) { /* the result: failed open, the share answered */
    f->pending &= ~(XF__PENDING_FAIL_OPEN | XF__PENDING_LOAD_START);
    xf__emit(f, XF_EV_FAIL_OPEN, rc == XF_ECANCELED ? -1 : XF_SOURCE_LOCAL, 0,
             f->fail_open_rc);
  }
  if (rc == XF_ECANCELED) /* interrupted while waiting for the share's flight */
    return xf__flow_done(f, xf__rt_fail(f->rt, rc, "interrupted (options.interrupt)"));
  f->rt->stats.local++;
  xf__emit(f, XF_EV_LOCAL, XF_SOURCE_LOCAL, 0, rc);
  if (rc != XF_OK) {
    free(data);
    if (rc == XF_ELOADER)
      xf__rt_fail(f->rt, rc, "the loader failed in another thread's load of this key");
    else if (rc == XF_ENOTFOUND)
      xf__rt_fail(f->rt, rc, "another thread's loader found nothing");
    return xf__flow_done(f, rc);
  }
  f->out->data = data;
  f->out->len = len;
  f->out->source = XF_SOURCE_LOCAL;
  return xf__flow_done(f, XF_OK);
}

xf__step xf__flow_written(xf__flow *f, int ok) {
  return xf__flow_done(f, serve_sink(f, ok ? XF_SOURCE_LOADER : XF_SOURCE_UNCACHED));
}

/* ---- miss: lease, stale, or wait ---------------------------------------------- */

/* A load that found nothing (not cached) ended after this call's first read
 * (the entry's marker, lua/release.lua): the call came while it ran, and
 * shares its answer instead of loading again. */
static xf__step found_nothing_meanwhile(xf__flow *f) {
  return xf__flow_done(
      f, xf__rt_fail(f->rt, XF_ENOTFOUND, "another caller's loader found nothing"));
}

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
    f->rt->stats.lease_lost++;
    xf__emit(f, XF_EV_LEASE_LOST, -1, 0, 0);
    /* The wait budget starts here, not at the read: a batch may hold a
     * miss's lease request back while its earlier keys load (batch.c). */
    f->waited_from_ms = now_ms;
    f->give_up_ms = now_ms + f->p->wait_ms;
    int64_t hard_ms = f->p->hard_timeout_ms;
    f->hard_wait = hard_ms > 0 && f->began_ms + hard_ms < f->give_up_ms;
    if (f->hard_wait) /* no caller waits past its hard timeout */
      f->give_up_ms = f->began_ms + hard_ms;
  }
  if (e->value && -e->remaining_ms <= f->p->stale_ms)
    return serve(f, XF_SOURCE_STALE);
  if (f->hard_wait && now_ms >= f->give_up_ms)
    return xf__flow_hard_timeout(f);
  /* A computation that starts after this read is dated by it, no later: a
   * value written since (an xf_set, a delete) is newer and must win. */
  f->start_ms = e->now_ms;
  f->had_value = e->value != NULL || e->malformed || e->invalidated;
  int64_t left_ms = f->give_up_ms - now_ms;
  if (left_ms <= 0) {
    if (f->p->on_wait_timeout == XF_WAIT_FAIL)
      return xf__flow_done(f, xf__rt_fail(f->rt, XF_ETIMEDOUT,
                                          "waited %lld ms for another caller's loader",
                                          (long long)f->p->wait_ms));
    return load(f, XF_LOAD_GAVE_UP); /* e kept: served if this load fails */
  }
  xf__entry_free(e); /* read again when the wait ends */
  if (f->round == 0) {
    f->rt->stats.waits++;
    f->pending |= XF__PENDING_WAIT;
    f->woke_ms = now_ms;
  }
  /* With a near cache, the blocking, pool and batch drivers end the wait
   * when the key is invalidated (its value written: drive.c, batch_wait.c),
   * and so does a sans-I/O driver with a wake pipe (xf_call_wake_open, or
   * its links' own: xf_link_wake_fd), and
   * xf_async, whose loop watches that pipe (async_wake.c); the poll is the
   * fallback. */
  f->wake_on_write = f->rt->ports.near &&
                     (f->driver == XF_DRIVER_BLOCKING || f->driver == XF_DRIVER_POOL ||
                      f->driver == XF_DRIVER_BATCH ||
                      ((f->driver == XF_DRIVER_CALL || f->driver == XF_DRIVER_ASYNC) &&
                       (f->rt->near_wake_fd > 0 || f->rt->link_wakes > 0)));
  f->wake_ms = now_ms + (f->wake_on_write && WAIT_POLL_NEAR_MS < left_ms
                             ? WAIT_POLL_NEAR_MS
                             : poll_interval_ms(now_ms - f->waited_from_ms, left_ms));
  f->state = XF__WAIT;
  return XF_STEP_WAIT;
}

/* The value is missing or expired. A lease the read already saw live is not
 * asked for: that round trip could only lose. */
static xf__step miss(xf__flow *f, int64_t now_ms) {
  /* This call waited on another caller's load, and the lease ended without
   * a value (that loader failed, or its holder died): the last good value,
   * as that caller was served, rather than a load of its own; callers that
   * waited on a failing load do not retry it one after another. */
  if (f->round > 0 && !f->e.lease_live && within_stale_if_error(f, &f->e))
    return serve(f, XF_SOURCE_STALE);
  /* Not when the read may come from a lagging replica: the lease script runs
   * on the master and says whether the lease is live there. */
  if (f->e.lease_live && !f->cfg->read_from_replicas &&
      !(f->p->failsafe_throttle_ms > 0 && within_stale_if_error(f, &f->e)))
    return lease_held_elsewhere(f, now_ms); /* (the fail-safe mark: the lease says) */
  xf__entry_token(f->cfg, f->rt, f->token);
  f->refresh = 0;
  return xf__flow_send(f, XF__LEASE);
}

xf__step xf__flow_woke(xf__flow *f, int64_t now_ms) {
  f->input_ms = now_ms;
  f->woke_ms = now_ms;
  f->round++;
  return xf__flow_send(f, XF__READ);
}

xf__step xf__flow_cancel(xf__flow *f) {
  if (f->state == XF__FENCE) /* the write was acknowledged: its outcome stands */
    return xf__flow_fence_cut(f);
  xf_value_free(f->out);    /* a value decided before a release: not returned */
  if (xf__flow_canceled(f)) /* that release failed too: the lease expires */
    return xf__flow_done(f, XF_ECANCELED);
  int rc = xf__rt_fail(f->rt, XF_ECANCELED, "interrupted (options.interrupt)");
  return f->token[0] && f->state != XF__DONE && f->kind != XF_KIND_RENEW
             ? release_then_done(f, rc)
             : xf__flow_done(f, rc);
}

/* ---- early refresh ------------------------------------------------------------- */

/* A fresh value was elected for early recompute. Whatever happens, the caller
 * gets a valid value: the refreshed one, or the current one; unless the
 * loader says the value is gone (see what_to_write). */
static xf__step refresh_early(xf__flow *f) {
  f->rt->stats.early++;
  xf__emit(f, XF_EV_EARLY, XF_SOURCE_CACHE, 0, 0);
  if (f->e.lease_live) { /* someone is refreshing already */
    f->rt->stats.lease_lost++;
    xf__emit(f, XF_EV_LEASE_LOST, -1, 0, 0);
    return serve(f, XF_SOURCE_CACHE);
  }
  xf__entry_token(f->cfg, f->rt, f->token);
  f->refresh = 1;
  return xf__flow_send(f, XF__LEASE);
}

xf__step xf__flow_lease_done(xf__flow *f, int rc, xf__reply *r, int64_t now_ms) {
  int64_t lease_ms = 0;
  xf__lease_result won = XF_LEASE_LOST;
  xf__entry newer;
  if (rc == XF_OK)
    rc = xf__entry_parse_lease(f->rt, r, &lease_ms, &won, &newer);
  if (rc == XF_OK && won == XF_LEASE_NEWER && newer.zstd) {
    rc = xf__entry_decode(f->rt, &newer, f->cfg->max_value_len);
    if (rc == XF_OK && !newer.value) /* a corrupt frame written since the read */
      rc = XF_EPROTO;
    if (rc != XF_OK)
      xf__entry_free(&newer);
  }
  if (rc == XF_OK)
    xf__flow_learn_clock(f, lease_ms, now_ms);
  if (rc != XF_OK) { /* the lease cannot be taken: degrade, never block */
    f->token[0] = '\0';
    if (f->refresh)
      return serve(f, XF_SOURCE_CACHE);
    return is_unreachable(rc) ? fail_open(f, rc) : xf__flow_done(f, rc);
  }
  if (won == XF_LEASE_NOTHING) { /* this caller came during a load that found nothing */
    f->token[0] = '\0';
    return found_nothing_meanwhile(f);
  }
  if (won == XF_LEASE_NEWER) {
    xf__entry_free(&f->e);
    f->e = newer;
    /* A newer value written with tag versions other than the call's: a
     * miss again; the lease is asked for again, on what was just seen. */
    if (f->tag_rec_len && !xf__flow_tags_judge(f, &f->e))
      return xf__flow_send(f, XF__LEASE);
    return serve(f, XF_SOURCE_CACHE);
  }
  if (won == XF_LEASE_FAILSAFE && !f->refresh && within_stale_if_error(f, &f->e)) {
    f->token[0] = '\0'; /* a load failed lately: its last good value, no load */
    f->rt->stats.failsafe++;
    xf__emit(f, XF_EV_FAILSAFE, XF_SOURCE_STALE, 0, 0);
    return serve(f, XF_SOURCE_STALE);
  }
  if (won == XF_LEASE_LOST || won == XF_LEASE_FAILSAFE) {
    f->token[0] = '\0';
    if (!f->refresh)
      return lease_held_elsewhere(f, now_ms);
    f->rt->stats.lease_lost++;
    xf__emit(f, XF_EV_LEASE_LOST, -1, 0, 0);
    return serve(f, XF_SOURCE_CACHE);
  }
  f->start_ms = lease_ms;
  f->lease_len_ms = xf__flow_lease_ms(f);
  f->had_value = f->refresh || f->e.value != NULL || f->e.malformed || f->e.invalidated;
  if (f->pending) /* the miss (and a wait) before the lease, in order */
    xf__flow_settle(f);
  xf__emit(f, XF_EV_LEASE_WON, -1, 0, 0);
  return load(f, XF_LOAD_LEASED);
}

/* ---- read -> decide ------------------------------------------------------------- */

xf__step xf__flow_read_decide(xf__flow *f, int rc, int64_t now_ms) {
  if (is_unreachable(rc))
    return fail_open(f, rc);
  if (rc != XF_OK)
    return xf__flow_done(f, rc);
  xf__entry *e = &f->e;
  int fresh = e->value && e->remaining_ms > 0;
  if (f->round == 0)
    f->first_read_ms = e->now_late_ms; /* see lease.lua's answer 3 */
  if (f->round > 0) {                  /* a waiter's re-read */
    /* The load it waited on found nothing (not cached): that is its answer,
     * whoever holds the key's lease by now (on a hot key, the next caller's). */
    if (!fresh && e->nothing_ms > f->first_read_ms)
      return found_nothing_meanwhile(f);
    if (!fresh)
      return miss(f, now_ms);
    f->rt->stats.hits++;
    return serve(f, XF_SOURCE_CACHE);
  }
  if (!fresh) {
    f->rt->stats.misses++;
    f->pending |= XF__PENDING_MISS;
    return miss(f, now_ms);
  }
  /* A near hit's draw elected the entry it saw: that stands while Redis
   * holds the same entry (no second draw). An entry written since (another
   * client's newer value) is decided on afresh, as without the near cache. */
  int elected = f->near_elected && e->expiry_ms == f->near_expiry_ms &&
                e->delta_us == f->near_delta_us;
  if (elected || xf__refresh_early(&f->rt->rng, f->p, e->remaining_ms, e->delta_us))
    return refresh_early(f);
  f->rt->stats.hits++;
  xf__emit(f, XF_EV_HIT, XF_SOURCE_CACHE, 0, 0);
  return serve(f, XF_SOURCE_CACHE);
}

/* ---- background refresh --------------------------------------------------------- */

int xf__flow_detachable(const xf__flow *f, xf__off_path driver) {
  return f->state == XF__LOAD && f->load == XF_LOAD_LEASED && f->refresh && !f->detached &&
         xf__policy_background(f->p, driver);
}

/* Moves f's LOAD (its lease, key, dates, sink) to bg, whose result goes to
 * out; f keeps only the entry it read (freed when it is DONE). */
void xf__flow_move_load(xf__flow *f, xf__flow *bg, const xf_policy *p, const char *user_key,
                        xf_value *out) {
  *bg = *f; /* the lease, the key, the dates: the load's own from here on */
  bg->p = p;
  bg->user_key = user_key;
  bg->out = out;
  memset(out, 0, sizeof *out);
  if (f->key.data == f->key.inline_buf)
    bg->key.data = bg->key.inline_buf;
  bg->detached = 1;
  bg->pending = 0;
  memset(&bg->e, 0, sizeof bg->e); /* the entry read stays f's; had_value is kept */
  f->key.data = NULL;              /* moved to bg */
  f->key.len = 0;
  memset(&f->sink, 0, sizeof f->sink);
  f->token[0] = '\0';
}

xf__step xf__flow_detach(xf__flow *f, xf__flow *bg, const xf_policy *p,
                         const char *user_key, xf_value *out) {
  int rc = serve_entry(f, &f->e, XF_SOURCE_CACHE);
  xf__flow_move_load(f, bg, p, user_key, out);
  xf__flow_done(f, rc);
  return XF_STEP_LOAD;
}

xf__step xf__flow_skip(xf__flow *f) {
  f->rt->stats.loads--; /* load() counted a loader run that will not happen */
  xf__sink_clear(&f->sink);
  return release_then_done(f, serve_entry(f, &f->e, XF_SOURCE_CACHE));
}
