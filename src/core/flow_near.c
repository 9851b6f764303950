/* The flow's side of the near cache (near.h, through the client's port:
 * ports.h): a get-or-compute or get asks
 * it before Redis, and a read's value is offered to it. The own writes'
 * drop is flow.c's (with the share's). */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "decide.h"
#include "event.h"
#include "flow_steps.h"
#include "near.h"

/* A near hit's result event: to the hook, or counted where the fast path's
 * caller asked (xf__flow_start_near). */
static void near_event(xf__flow *f) {
  if (f->near_count)
    __atomic_add_fetch(f->near_count, 1, __ATOMIC_RELAXED);
  else
    xf__emit(f, XF_EV_NEAR, XF_SOURCE_CACHE, 0, 0);
}

/* A get-or-compute or get asks the near cache first: a kept entry within its
 * life is served without Redis, unless the XFetch draw (the same as on a
 * Redis hit) elects this call to refresh it: then it reads Redis and, if
 * Redis still holds that entry, fresh, refreshes it (no second draw); an
 * entry written since is decided on afresh (xf__flow_read_decide). 1 when
 * served (*step DONE). */
int xf__flow_near_first(xf__flow *f, int64_t now_ms, xf__step *step) {
  xf__runtime *rt = f->rt;
  const xf__port_near *near = rt->ports.near;
  xf__port_hit h;
  int got = near->get(rt->ports.self, f->key.data, f->key.len, now_ms, &h);
  if (f->tag_fast && (!got || h.stamp_names != f->tag_names64)) {
    if (got) /* not stamped for these tags: the call reads its versions */
      free(h.data);
    return 0;
  }
  if (__builtin_expect(f->cfg->on_event != NULL, 0))
    near->report(rt->ports.self, f->driver);
  int elected = 0; /* a mark left by the fast path's draw: taken by this call */
  if (__builtin_expect(rt->near_elect, 0)) {
    rt->near_elect = 0;
    elected = rt->near_elect_len == f->key.len &&
              rt->near_elect_hash == xf__key_hash(f->key.data, f->key.len);
    f->near_expiry_ms = rt->near_elect_expiry_ms;
    f->near_delta_us = rt->near_elect_delta_us;
  }
  if (!got)
    return 0;
  if (f->tag_rec_len &&
      (h.tags_len != f->tag_rec_len || memcmp(h.tags, f->tag_rec, f->tag_rec_len) != 0)) {
    free(h.data); /* loaded under other versions: Redis judges (and counts) it */
    return 0;
  }
  if (f->kind == XF_KIND_GET_OR_COMPUTE && !elected &&
      xf__refresh_early(&rt->rng, f->p, h.remaining_ms, h.delta_us)) {
    elected = 1;
    f->near_expiry_ms = h.redis_expiry_ms;
    f->near_delta_us = h.delta_us;
  }
  if (f->kind == XF_KIND_GET_OR_COMPUTE && elected) {
    free(h.data);
    f->near_elected = 1;
    return 0;
  }
  rt->stats.near_hits++;
  int rc = XF_OK;
  if (h.negative) {
    free(h.data);
    if (f->kind == XF_KIND_GET) {
      rt->stats.misses++; /* a cached not-found is a get's miss */
      xf__emit(f, XF_EV_MISS, -1, 0, 0);
    } else {
      rt->stats.hits++;
      near_event(f);
    }
    rc = xf__rt_fail(rt, XF_ENOTFOUND, "cached not-found");
  } else {
    rt->stats.hits++;
    near_event(f);
    f->out->data = h.data;
    f->out->len = h.len;
    f->out->source = XF_SOURCE_CACHE;
  }
  if (f->tag_kept_all) /* every version kept: the next hit needs none (flow_tags.c) */
    near->stamp(rt->ports.self, f->key.data, f->key.len, f->tag_rec, f->tag_rec_len,
                &f->tag_stamp);
  f->near_served = 1;
  *step = xf__flow_done(f, rc);
  return 1;
}

void xf__flow_near_elect(xf__flow *f) {
  f->rt->near_elect = 1;
  f->rt->near_elect_len = f->key.len;
  f->rt->near_elect_hash = xf__key_hash(f->key.data, f->key.len);
  f->rt->near_elect_expiry_ms = f->near_expiry_ms;
  f->rt->near_elect_delta_us = f->near_delta_us;
}

/* What a read saw, kept in the near cache when it is a fresh value (or a
 * cached not-found) read over a tracked connection, and no invalidation of
 * its key overtook it (near.h). Its life counts from when the read was sent
 * (the server read it no earlier), less the clocks' drift allowance. */
void xf__flow_near_keep(xf__flow *f) {
  const xf__entry *e = &f->e;
  if (!f->track.node || !e->value || e->malformed || e->remaining_ms <= 0)
    return;
  int64_t drift_ms = e->remaining_ms / 1000 + 1;
  if (e->remaining_ms <= drift_ms)
    return;
  const xf__ports *ports = &f->rt->ports;
  f->rt->stats.near_evictions +=
      ports->near->put(ports->self, &f->track, f->near_token, f->key.data, f->key.len,
                       e->value, e->len, e->tags, e->tags_len, e->delta_us, e->expiry_ms,
                       f->sent_ms + e->remaining_ms - drift_ms, e->negative);
}
