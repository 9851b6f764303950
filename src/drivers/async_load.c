/* The event-loop driver's loads (async.c steps the calls): a call's LOAD
 * runs the user's loader, which completes now or later through
 * xf_async_load_done / _not_found / _fail; while Redis cannot be used, a
 * load goes through the handle's share (flight.h: a kept value, another
 * caller's flight in this process), or without one, a call whose fail-open
 * load matches one already running waits for that one's result instead of
 * running the loader again. */
#include <string.h>

#include "async.h"
#include "client_io.h"
#include "flight.h"
#include "flow_steps.h"
#include "nesting.h"

/* Runs the loader; returns whether it completed before returning. */
static int run_loader(xf__acall *k) {
  xf__flow_settle(&k->f); /* the loader runs: a fail-open's result and load_start */
  k->loading = 1;
  k->loaded = 0;
  k->in_loader = 1;
  k->load.call = k;
  k->load_t0_us = xf__now_us();
  /* A call for the same key started from inside the loader would wait on
   * this call's own lease: it fails at once (nest.h). */
  xf__nest_push(&k->f.nest, k->f.c, k->f.key.data, k->f.key.len);
  k->loader(k->ud, k->key, k->keylen, &k->load);
  xf__nest_pop(&k->f.nest);
  k->in_loader = 0;
  return k->loaded;
}

static xf__step loaded(xf__acall *k) {
  int64_t t1 = xf__now_us();
  xf__flight_end(&k->f, &k->share, k->loader_rc, t1 / 1000); /* its followers' outcome */
  return xf__flow_loaded(&k->f, k->loader_rc, t1 - k->load_t0_us, t1 / 1000);
}

/* ---- shared fail-open loads ------------------------------------------------- */

/* While Redis cannot be used, every call on a hot key would run its loader:
 * a call whose fail-open load matches one already running (same key, same
 * loader) waits for that one's result instead. */
static int same_load(const xf__acall *a, const xf__acall *b) {
  return a->loader == b->loader && a->ud == b->ud && a->f.key.len == b->f.key.len &&
         memcmp(a->f.key.data, b->f.key.data, a->f.key.len) == 0;
}

static int follow(xf_async *ac, xf__acall *k) {
  for (xf__acall *lead = ac->leaders; lead; lead = lead->next_leader)
    if (same_load(lead, k)) {
      k->next_follower = lead->followers;
      lead->followers = k;
      ac->core->stats.loads--; /* the flow counted a loader call not made */
      return 1;
    }
  return 0;
}

static void lead(xf_async *ac, xf__acall *k) {
  k->followers = NULL;
  k->next_leader = ac->leaders;
  ac->leaders = k;
}

/* Takes the leader off the list and hands each follower a copy of its result
 * (before the leader's flow takes it): its value only, as a fail-open load
 * writes nothing and its ttl (xf_async_load_ttl) or validator would go
 * nowhere. */
static xf__acall *share_result(xf_async *ac, xf__acall *k) {
  xf__acall **at = &ac->leaders;
  while (*at && *at != k)
    at = &(*at)->next_leader;
  if (!*at)
    return NULL; /* not a leader */
  *at = k->next_leader;
  const struct xf_sink *from = &k->f.sink;
  for (xf__acall *f = k->followers; f; f = f->next_follower) {
    f->load_t0_us = k->load_t0_us;
    f->loader_rc = k->loader_rc;
    if (f->loader_rc == 0 && from->not_found)
      xf_sink_not_found(&f->f.sink);
    else if (f->loader_rc == 0)
      f->loader_rc = xf_sink_set(&f->f.sink, from->data, from->len);
  }
  return k->followers;
}

/* k's LOAD: 1 with *step the next one when the loader completed before
 * returning; 0 when k resumes later (its loader's completion, or its
 * leader's). */
int xf__async_load(xf_async *ac, xf__acall *k, xf__step *step) {
  if (xf__flight_joins(&k->f, &k->share)) { /* Redis cannot be used: the share first */
    *step = xf__flight_join(&k->f, &k->share, xf__now_ms());
    if (*step != XF_STEP_LOAD)
      return 1; /* served, or a flight to poll */
  }
  if (k->f.load == XF_LOAD_UNCACHED && !k->f.c->share && follow(ac, k))
    return 0;
  if (!run_loader(k)) {
    if (k->f.load == XF_LOAD_UNCACHED)
      lead(ac, k);
    else
      xf__async_load_bounds(ac, k); /* its renewals, its timeout */
    return 0;
  }
  *step = loaded(k);
  return 1;
}

/* ---- completion ------------------------------------------------------------- */

static void complete_load(xf_async_load *load, int loader_rc) {
  xf__acall *k = load ? load->call : NULL;
  if (!k || !k->loading)
    return;
  if (k->moved) { /* timed out: its load went on as k->moved */
    xf__acall *left = k;
    k = k->moved;
    left->loading = 0;
    xf__acall_release(left); /* load (in it) is not used after this */
    if (!k->loading)
      return;
  }
  k->loading = 0;
  k->loader_rc = loader_rc;
  xf_async *ac = k->ac;
  if (!ac) { /* canceled: the result goes nowhere */
    xf__acall_release(k);
    return;
  }
  xf__async_load_unbound(ac, k);
  if (k->in_loader) { /* xf__async_advance carries on */
    k->loaded = 1;
    return;
  }
  xf__async_enter(ac);
  xf__acall *f = share_result(ac, k);
  if (!ac->closing)
    xf__async_advance(k, loaded(k));
  while (f && !ac->closing) { /* a callback may close: the rest are canceled */
    xf__acall *next = f->next_follower;
    xf__async_advance(f, loaded(f));
    f = next;
  }
  xf__async_leave(ac);
}

int xf_async_load_done(xf_async_load *load, const void *data, size_t len) {
  xf__acall *k = load ? load->call : NULL;
  if (!k || !k->loading)
    return XF_EINVAL;
  k = xf__async_load_owner(k);
  int rc = k->ac ? xf_sink_set(&k->f.sink, data, len) : XF_OK;
  complete_load(load, rc);
  return rc;
}

int xf_async_load_previous(const xf_async_load *load, const void **data, size_t *len,
                           int64_t *age_ms) {
  xf__acall *k = load ? load->call : NULL;
  if (k && k->loading)
    k = xf__async_load_owner(k);
  return xf_sink_previous(k && k->loading && k->ac ? &k->f.sink : NULL, data, len, age_ms);
}

/* The sink of load's call while it loads, else NULL. */
static xf_sink *load_sink(const xf_async_load *load) {
  xf__acall *k = load ? load->call : NULL;
  if (!k || !k->loading)
    return NULL;
  k = xf__async_load_owner(k);
  return k->loading && k->ac ? &k->f.sink : NULL;
}

int xf_async_load_previous_validator(const xf_async_load *load, const void **data,
                                     size_t *len) {
  return xf_sink_previous_validator(load_sink(load), data, len);
}

int xf_async_load_validator(xf_async_load *load, const void *data, size_t len) {
  return xf_sink_validator(load_sink(load), data, len);
}

/* The sink moves with a load that leaves its call (a background refresh, a
 * timeout: xf__flow_move_load), a ttl set before included. */
int xf_async_load_ttl(xf_async_load *load, int64_t ttl_ms) {
  return xf_sink_ttl(load_sink(load), ttl_ms);
}

int xf_async_load_unchanged(xf_async_load *load) {
  xf__acall *k = load ? load->call : NULL;
  if (!k || !k->loading)
    return XF_EINVAL;
  k = xf__async_load_owner(k);
  if (k->ac && xf_sink_unchanged(&k->f.sink) != XF_OK)
    return XF_EINVAL;
  complete_load(load, 0);
  return XF_OK;
}

void xf_async_load_not_found(xf_async_load *load) {
  xf__acall *k = load ? load->call : NULL;
  if (!k || !k->loading)
    return;
  k = xf__async_load_owner(k);
  if (k->ac)
    xf_sink_not_found(&k->f.sink);
  complete_load(load, 0);
}

xf_sink *xf_async_load_sink(xf_async_load *load) { return load_sink(load); }

void xf_async_load_complete(xf_async_load *load, int rc) { complete_load(load, rc); }

void xf_async_load_fail(xf_async_load *load, int code) {
  complete_load(load, code ? code : XF_ELOADER);
}
