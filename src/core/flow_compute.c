/* Get-or-compute's decisions in the flow (flow.h; the machine that sends and
 * takes replies is flow.c): read -> decide -> lease, with waits; the load
 * and its write are flow_load.c's.
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

int xf__flow_serve_read(xf__flow *f, xf_source source) {
  return serve_entry(f, &f->e, source);
}

static xf__step serve(xf__flow *f, xf_source source) {
  return xf__flow_done(f, serve_entry(f, &f->e, source));
}

/* Whether e's value may be served when a load fails (stale_if_error_ms). */
int xf__flow_within_stale_if_error(const xf__flow *f, const xf__entry *e) {
  return !e->negative && xf__flow_within_window(e, f->p->stale_if_error_ms);
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
  if (xf__flow_within_window(e, f->p->stale_ms))
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
    return xf__flow_load(f, XF_LOAD_GAVE_UP); /* e kept: served if this load fails */
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
  f->wake_ms = now_ms + (f->wake_on_write && f->cfg->wake_poll_ms < left_ms
                             ? f->cfg->wake_poll_ms
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
  if (f->round > 0 && !f->e.lease_live && xf__flow_within_stale_if_error(f, &f->e))
    return serve(f, XF_SOURCE_STALE);
  /* Not when the read may come from a lagging replica: the lease script runs
   * on the master and says whether the lease is live there. */
  if (f->e.lease_live && !f->cfg->read_from_replicas &&
      !(f->p->failsafe_throttle_ms > 0 && xf__flow_within_stale_if_error(f, &f->e)))
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
             ? xf__flow_release_then_done(f, rc)
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
    return is_unreachable(rc) ? xf__flow_fail_open(f, rc) : xf__flow_done(f, rc);
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
  if (won == XF_LEASE_FAILSAFE && !f->refresh && xf__flow_within_stale_if_error(f, &f->e)) {
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
  return xf__flow_load(f, XF_LOAD_LEASED);
}

/* ---- read -> decide ------------------------------------------------------------- */

xf__step xf__flow_read_decide(xf__flow *f, int rc, int64_t now_ms) {
  if (is_unreachable(rc))
    return xf__flow_fail_open(f, rc);
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
  xf__sink_own_previous(&f->sink); /* f's entry, and its value, stay f's */
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
  return xf__flow_release_then_done(f, serve_entry(f, &f->e, XF_SOURCE_CACHE));
}
