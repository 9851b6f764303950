/* Get-or-compute's load and its outcome (flow_compute.c decides when a call
 * loads): the loader gets the value it refreshes, its result is written,
 * served uncached, or its failure served as the policy says (stale, the
 * value an early refresh had, or the error); "unchanged" touches the entry.
 * The lease is released when nothing is written. */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "event.h"
#include "flow_steps.h"
#include "policy.h"

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
xf__step xf__flow_release_then_done(xf__flow *f, int rc) {
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
 * value (xf_sink_previous): the entry's own bytes, not copied while the load
 * stays in the call. A load that leaves it (a background refresh, a timeout:
 * the call serves the entry's value meanwhile) takes a copy then
 * (xf__sink_own_previous); without memory for it, the loader sees none. */
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
}

xf__step xf__flow_load(xf__flow *f, xf__load_kind kind) {
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
xf__step xf__flow_fail_open(xf__flow *f, int rc) {
  f->pending &= ~XF__PENDING_MISS;
  f->fail_open_rc = rc;
  if (!f->rt->ports.share)
    xf__emit(f, XF_EV_FAIL_OPEN, -1, 0, rc);
  return xf__flow_load(f, XF_LOAD_UNCACHED);
}

xf__step xf__flow_bypass(xf__flow *f) {
  f->rt->stats.bypassed++;
  return xf__flow_load(f, XF_LOAD_BYPASS);
}

/* What the loader's result does to the entry. A value, or a not-found to
 * cache, is written. A not-found that is not cached removes a value the entry
 * held when read (the loader, the source of truth, says it is gone: serving
 * it on would be a wrong value); with none, there is nothing to write
 * (ttl_ms 0). */
xf__write xf__flow_what_to_write(xf__flow *f) {
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
    rc = xf__flow_serve_read(f, XF_SOURCE_CACHE);
  else if (xf__flow_within_stale_if_error(f, e))
    rc = xf__flow_serve_read(f, XF_SOURCE_STALE);
  if (f->load == XF_LOAD_GAVE_UP) /* no lease of its own to release or mark */
    return xf__flow_done(f, rc);
  /* The entry's value stands in for the loader's: the fleet keeps serving it
   * for the throttle instead of loading again (lua/release.lua). */
  if (f->detached || f->refresh || rc == XF_OK)
    f->failsafe_hold_ms = f->p->failsafe_throttle_ms;
  return xf__flow_release_then_done(f, rc);
}

/* The loader answered "unchanged": its previous value becomes its result,
 * and the entry it came from is touched (lua/touch.lua: its life extended as
 * a write's, under the same lease and newer-wins guards; its value and delta
 * kept), unless the value is not to be cached (xf_sink_ttl 0). */
static xf__step revalidate(xf__flow *f) {
  struct xf_sink *s = &f->sink;
  if (xf__sink_own_previous(s) != XF_OK) {
    xf__rt_fail(f->rt, XF_ENOMEM, "no memory for the previous value");
    return f->token[0] ? xf__flow_release_then_done(f, XF_ENOMEM)
                       : xf__flow_done(f, XF_ENOMEM);
  }
  s->data = s->prev_own;
  s->len = s->prev_len;
  s->prev_own = NULL;
  s->prev = s->data;
  s->is_set = 1;
  f->w = xf__flow_what_to_write(f);
  if (f->w.ttl_ms > 0)
    return xf__flow_send(f, XF__TOUCH);
  int rc = serve_sink(f, XF_SOURCE_UNCACHED);
  return f->token[0] ? xf__flow_release_then_done(f, rc) : xf__flow_done(f, rc);
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
  f->w = xf__flow_what_to_write(f);
  if (f->w.ttl_ms > 0) {
    xf__flow_pack(f);
    return xf__flow_send(f, XF__WRITE);
  }
  /* A not-found not to cache (the release tells the callers that waited on
   * this lease), or a value the loader said not to cache. */
  f->found_nothing = f->sink.not_found;
  int rc = serve_sink(f, f->sink.not_found ? XF_SOURCE_LOADER : XF_SOURCE_UNCACHED);
  return f->token[0] ? xf__flow_release_then_done(f, rc) : xf__flow_done(f, rc);
}

xf__step xf__flow_local(xf__flow *f, int rc, char *data, size_t len) {
  f->rt->stats.loads--; /* xf__flow_load counted a loader run the share made unneeded */
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
