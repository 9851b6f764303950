/* The event-loop driver's loads that outlive their loader's return
 * (async.h): the lease renewed while the loader runs (policy.max_load_ms)
 * and the soft or hard timeout (the flow decides both: flow.h), as wake-ups
 * of the loading call on the wait heap. A renewal is a call of its own; a
 * timeout ends the call with what the flow gives and the load goes on as a
 * call of its own, which the loader's completion then finds. */
#include <stdint.h>

#include "async.h"

static void arm(xf_async *ac, xf__acall *k) {
  int64_t at = k->load_deadline;
  if (k->renewing && k->renew.next_ms < at)
    at = k->renew.next_ms;
  if (at == INT64_MAX)
    return;
  k->wake_ms = at;
  xf__aheap_push(ac, k);
}

void xf__async_load_bounds(xf_async *ac, xf__acall *k) {
  k->renewing = xf__flow_renewal(&k->f, &k->renew);
  k->load_deadline = xf__flow_load_deadline(&k->f);
  arm(ac, k);
}

void xf__async_load_unbound(xf_async *ac, xf__acall *k) {
  if (k->heap_at != SIZE_MAX)
    xf__aheap_remove(ac, k);
  k->renewing = 0;
  k->load_deadline = INT64_MAX;
}

xf__acall *xf__async_load_owner(xf__acall *k) { return k->moved ? k->moved : k; }

static void renew(xf_async *ac, xf__acall *k, int64_t len, int64_t now_ms) {
  xf__acall *r = xf__async_spawn(ac, k);
  if (r) /* else this renewal is skipped: the next may go */
    xf__async_advance(r, xf__flow_start_renew(&r->f, ac->core, r->key, r->keylen,
                                              k->renew.token, len, now_ms));
}

/* Past k's deadline with its loader still running: k ends with what the
 * timeout gives, its load goes on as another call (whose renewals go on). */
static void time_out(xf_async *ac, xf__acall *k, int64_t now_ms) {
  xf__acall *r = xf__async_spawn(ac, k);
  if (!r) { /* no memory to move it: k waits for its loader */
    k->load_deadline = INT64_MAX;
    arm(ac, k);
    return;
  }
  xf__flow_time_out(&k->f, &r->f, &r->p, r->key, &r->out, now_ms);
  r->loading = 1;
  r->load_t0_us = k->load_t0_us;
  r->renew = k->renew;
  r->renewing = k->renewing;
  k->renewing = 0;
  k->moved = r; /* k stays loading: the loader completes its load handle */
  arm(ac, r);
  xf__async_advance(k, XF_STEP_DONE); /* its callback: the value it had, or XF_ETIMEDOUT */
}

void xf__async_load_woke(xf_async *ac, xf__acall *k, int64_t now_ms) {
  if (now_ms >= k->load_deadline) {
    time_out(ac, k, now_ms);
    return;
  }
  if (k->renewing && now_ms >= k->renew.next_ms) {
    int64_t len = xf__renewal_take(&k->renew, now_ms);
    if (len > 0)
      renew(ac, k, len, now_ms);
  }
  arm(ac, k);
}
