/* A detached background refresh as a refresh workers' job (refresh.h): the
 * part every driver shares. The driver only says which client the write
 * goes through (a pooled one, or one opened like the caller's). */
#include <stdlib.h>
#include <string.h>

#include "client_io.h"
#include "drive.h"
#include "lease_keeper.h"
#include "nesting.h"
#include "refresh.h"

/* What every end of d frees, the kept loader_ud dropped first. */
static void free_detached(xf__detached *d) {
  xf__policy_drop_ud(&d->policy, d->kept_ud);
  xf__gate_release(d->gate);
  free(d->renew_with);
  free(d->key);
  free(d);
}

int xf__detached_abandon(xf__detached *d) {
  xf__flow_abandon(&d->f);
  free_detached(d);
  return XF_REFRESH_ABANDONED;
}

static void drop(xf__refresh_job *j) { xf__detached_abandon((xf__detached *)j); }

xf__detached *xf__detached_new(xf__flow *f, size_t size, xf__refresh_gate *gate,
                               int (*run)(xf__refresh_job *), xf_loader_fn loader,
                               void *ud) {
  const xf_client *c = f->c;
  xf__detached *d = calloc(1, size);
  char *key = malloc(f->user_keylen + c->ns_len + 1);
  void *kept = NULL;
  if (!d || !key || !xf__policy_keep_ud(f->p, ud, &kept)) {
    free(d);
    free(key);
    return NULL;
  }
  d->due_us = xf__now_us();
  d->job.run = run;
  d->job.drop = drop;
  d->gate = gate;
  d->loader = loader;
  d->ud = kept;
  d->kept_ud = kept;
  /* Without the share: it may be closed while the loader runs (a refresh
   * left running past the close's drain time). */
  if (c->opened_with && (d->renew_with = xf__options_helper(c->opened_with)))
    d->renew_with->share = NULL;
  d->policy = *f->p;
  d->policy.tags = NULL; /* the caller's: read by then (the flow's tag record) */
  d->policy.ntags = 0;
  d->key = key;
  d->keylen = f->user_keylen;
  memcpy(key, f->user_key, f->user_keylen);
  d->ns = key + f->user_keylen;
  d->ns_len = c->ns_len;
  memcpy(d->ns, c->ns, c->ns_len);
  d->ns[c->ns_len] = '\0';
  xf__flow_detach(f, &d->f, &d->policy, d->key, &d->out);
  d->f.interrupt = NULL; /* nobody to ask on a worker */
  xf__gate_hold(gate);
  return d;
}

void xf__detached_submit(xf__detached *d, xf_share *s, xf_client *c) {
  if (xf__refresh_submit(s, &d->job) != XF_OK)
    xf__detached_skip(d, c);
}

void xf__detached_skip(xf__detached *d, xf_client *c) {
  xf__flow_rebind(&d->f, c); /* its lease goes back now, on the caller's client */
  xf__step step = xf__flow_skip(&d->f);
  while (step == XF_STEP_SEND)
    step = xf__drive_send(&d->f);
  xf_value_free(&d->out);
  free_detached(d);
}

int xf__detached_load(xf__detached *d) {
  if (!xf__gate_enter(d->gate, 1)) /* the owner is closing: not started */
    return xf__detached_abandon(d), 0;
  xf__gate_leave(d->gate);
  xf__flow *f = &d->f;
  int64_t t0 = xf__now_us();
  /* The wait for a worker, counted in delta up to a quarter of the ttl: an
   * executor that ran it much later must not make every hit due. */
  int64_t waited_us = t0 - d->due_us, most_us = d->policy.ttl_ms * 250;
  waited_us = waited_us < 0 ? 0 : waited_us > most_us ? most_us : waited_us;
  d->keeper = xf__keeper_start(f, d->renew_with, NULL);
  xf__nest_push_ns(&f->nest, d->ns, d->ns_len, f->key.data, f->key.len);
  int lrc = d->loader(d->ud, d->key, d->keylen, &f->sink);
  xf__nest_pop(&f->nest);
  int64_t t1 = xf__now_us();
  xf__keeper_stop(d->keeper);
  d->keeper = NULL;
  if (!xf__gate_enter(d->gate, 0)) /* closed past its drain time: drop it */
    return xf__detached_abandon(d), 0;
  d->loader_rc = lrc;
  d->delta_us = waited_us + (t1 - t0);
  d->end_ms = t1 / 1000;
  return 1;
}

int xf__detached_finish(xf__detached *d) {
  xf__flow *f = &d->f;
  xf__step step = xf__flow_loaded(f, d->loader_rc, d->delta_us, d->end_ms);
  while (step == XF_STEP_SEND) /* the write, or the release: no load, no wait */
    step = xf__drive_send(f);
  xf_value_free(&d->out);
  return f->rc == XF_ELOADER ? XF_REFRESH_FAILED : XF_REFRESH_DONE;
}

void xf__detached_end(xf__detached *d) {
  xf__gate_leave(d->gate);
  free_detached(d);
}
