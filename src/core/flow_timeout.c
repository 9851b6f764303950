/* Load timeouts (flow.h, policy.soft_timeout_ms and hard_timeout_ms): when
 * a caller stops waiting for a load, and what it gets then. The load itself
 * goes on off the call (xf__flow_time_out moves it, as a background refresh
 * is moved) and writes as usual. */
#include <stdint.h>

#include "client.h"
#include "event.h"
#include "flow_steps.h"

/* The source under which f may give its entry's value in place of its
 * load: an early refresh's current value, or one past its ttl by at most
 * window_ms; -1: none. */
static int value_to_give(const xf__flow *f, int64_t window_ms) {
  const xf__entry *e = &f->e;
  if (!e->value || e->negative)
    return -1;
  if (f->refresh)
    return XF_SOURCE_CACHE;
  return xf__flow_within_window(e, window_ms) ? XF_SOURCE_STALE : -1;
}

static int64_t larger(int64_t a, int64_t b) { return a > b ? a : b; }

/* Whether the soft timeout bounds f's load (a value to give), rather than
 * the hard one. */
static int soft(const xf__flow *f) {
  return f->p->soft_timeout_ms > 0 && value_to_give(f, f->p->stale_ms) >= 0;
}

int64_t xf__flow_load_deadline(const xf__flow *f) {
  if (f->state != XF__LOAD || f->detached ||
      (f->load != XF_LOAD_LEASED && f->load != XF_LOAD_GAVE_UP))
    return INT64_MAX;
  if (soft(f))
    return f->began_ms + f->p->soft_timeout_ms;
  return f->p->hard_timeout_ms > 0 ? f->began_ms + f->p->hard_timeout_ms : INT64_MAX;
}

/* f ends with the value it may give (source), or XF_ETIMEDOUT. */
static xf__step give(xf__flow *f, int source, xf_event_type type) {
  int rc;
  if (source >= 0) {
    if (source == XF_SOURCE_STALE)
      f->rt->stats.stale++;
    rc = xf__flow_serve_entry(f, source);
  } else {
    rc = xf__rt_fail(f->rt, XF_ETIMEDOUT, "the load ran past hard_timeout_ms (%lld ms)",
                     (long long)f->p->hard_timeout_ms);
  }
  xf__emit(f, type, source, 0, rc);
  return xf__flow_done(f, rc);
}

xf__step xf__flow_hard_timeout(xf__flow *f) {
  int source = value_to_give(f, larger(f->p->stale_ms, f->p->stale_if_error_ms));
  return give(f, source, XF_EV_HARD_TIMEOUT);
}

xf__step xf__flow_time_out(xf__flow *f, xf__flow *bg, const xf_policy *p,
                           const char *user_key, xf_value *out, int64_t now_ms) {
  f->input_ms = now_ms;
  int is_soft = soft(f);
  int source = is_soft ? value_to_give(f, f->p->stale_ms)
                       : value_to_give(f, larger(f->p->stale_ms, f->p->stale_if_error_ms));
  xf__flow_move_load(f, bg, p, user_key, out); /* f keeps the value it may give */
  return (void)give(f, source, is_soft ? XF_EV_SOFT_TIMEOUT : XF_EV_HARD_TIMEOUT),
         XF_STEP_LOAD;
}
