/* The drivers' side of a LOAD and a WAIT (drive.h): the clock, the
 * loader's thread, the share. */
#include <string.h>
#include <time.h>

#include "client_io.h"
#include "drive.h"
#include "flow_steps.h"
#include "lease_keeper.h"
#include "nesting.h"
#include "reply.h"

/* The calls into the share (single-flight and fallback while Redis cannot be
 * used) that may block, for every driver; sc's share (none: ALONE). */
xf__share_role xf__flow_share_begin(xf__flow *f, const xf_client *sc, char **data,
                                    size_t *len, int *rc) {
  int64_t now = xf__now_ms();
  return xf__share_begin(sc, f->key.data, f->key.len, now, now + f->p->wait_ms, data, len,
                         rc);
}

void xf__flow_call_loader(xf__flow *f, const xf_client *sc, xf_loader_fn loader, void *ud,
                          xf__loaded *out) {
  memset(out, 0, sizeof *out);
  xf__share_role role = XF_SHARE_ALONE;
  if (sc && f->load == XF_LOAD_UNCACHED) {
    role = xf__flow_share_begin(f, sc, &out->data, &out->len, &out->rc);
    if ((out->served = role == XF_SHARE_SERVED))
      return;
  }
  xf__flow_settle(f); /* the loader runs: a fail-open's result and load_start */
  int64_t t0 = xf__now_us();
  const xf_client *like = sc ? sc : f->c; /* its lease, renewed while it runs */
  xf__keeper *keeper = xf__keeper_start(f, like->opened_with, like->share);
  xf__nest_push(&f->nest, sc ? sc : f->c, f->key.data, f->key.len);
  out->loader_rc = loader(ud, f->user_key, f->user_keylen, &f->sink);
  xf__nest_pop(&f->nest);
  int64_t t1 = xf__now_us();
  xf__keeper_stop(keeper);
  if (role == XF_SHARE_LEAD)
    xf__flow_share_end(f, sc, out->loader_rc, t1 / 1000);
  out->delta_us = t1 - t0;
  out->end_ms = t1 / 1000;
}

xf__step xf__flow_feed_loaded(xf__flow *f, const xf__loaded *l) {
  if (l->served)
    return xf__flow_local(f, l->rc, l->data, l->len);
  return xf__flow_loaded(f, l->loader_rc, l->delta_us, l->end_ms);
}

xf__step xf__flow_run_loader(xf__flow *f, xf_loader_fn loader, void *ud) {
  xf__loaded l;
  xf__flow_call_loader(f, f->c, loader, ud, &l);
  return xf__flow_feed_loaded(f, &l);
}

#define INTERRUPT_SLICE_MS 50 /* how often a sleeping call asks options.interrupt */

/* With a near cache, a wait for another caller's load ends as soon as the
 * key is invalidated (its value written, anywhere) after the read that saw
 * the lease was sent: wake-on-write; the poll stays the fallback. */
int xf__drive_sleep(const xf__flow *f, int64_t wake_ms) {
  const xf__ports *ports = &f->rt->ports;
  for (;;) {
    int64_t slice_ms = xf__now_ms() + INTERRUPT_SLICE_MS;
    int64_t until_ms = slice_ms < wake_ms ? slice_ms : wake_ms;
    if (ports->near && f->state == XF__WAIT && f->wake_on_write) {
      if (ports->near->wait(ports->self, f->key.data, f->key.len, f->near_token, until_ms))
        return 0; /* invalidated: read now */
    } else {
      xf__sleep_until_ms(until_ms);
    }
    if (xf__flow_interrupted(f))
      return 1;
    if (xf__now_ms() >= wake_ms)
      return 0;
  }
}
