/* The blocking driver: today's API, each call a loop around the flow
 * (flow.h) on the client's one connection, sleeping through waits. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "client_io.h"
#include "entry_run.h"
#include "flow.h"
#include "policy.h"
#include "reply.h"
#include "share.h"

#define INTERRUPT_SLICE_MS 50 /* how often a sleeping call asks options.interrupt */

void xf_value_free(xf_value *v) {
  if (!v)
    return;
  free(v->data);
  memset(v, 0, sizeof *v);
}

void xf__sleep_until_ms(int64_t wake_ms) {
  int64_t ms = wake_ms - xf__now_ms();
  if (ms <= 0)
    return;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

int xf__flow_sleep(const xf__flow *f, int64_t wake_ms) {
  for (;;) {
    int64_t slice_ms = xf__now_ms() + INTERRUPT_SLICE_MS;
    xf__sleep_until_ms(slice_ms < wake_ms ? slice_ms : wake_ms);
    if (xf__flow_interrupted(f))
      return 1;
    if (xf__now_ms() >= wake_ms)
      return 0;
  }
}

/* Inlined into xf_get_or_compute: a hit pays no call for it. */
static inline xf__step send(xf__flow *f) {
  xf__reply *r;
  int canceled = xf__flow_canceled(f);
  if (canceled) /* off the hot path: a hit only pays the test */
    f->c->grace_ms = XF_CANCEL_GRACE_MS;
  int rc = xf__command(f->c, &f->cmd, &r);
  if (canceled)
    f->c->grace_ms = 0;
  return xf__flow_reply(f, rc, r, xf__now_ms());
}

xf__step xf__flow_send(xf__flow *f) { return send(f); }

/* The share's code for what the loader gave. */
static int load_outcome(const xf__flow *f, int lrc) {
  if (lrc != 0 || (!f->sink.is_set && !f->sink.not_found))
    return XF_ELOADER;
  return f->sink.not_found ? XF_ENOTFOUND : XF_OK;
}

/* The only calls into the share (single-flight and fallback while Redis
 * cannot be used), for every driver; sc's share (none: ALONE). */
xf__share_role xf__flow_share_begin(xf__flow *f, const xf_client *sc, char **data,
                                    size_t *len, int *rc) {
  int64_t now = xf__now_ms();
  return xf__share_begin(sc, f->key.data, f->key.len, now, now + f->p->wait_ms, data, len,
                         rc);
}

void xf__flow_share_end(xf__flow *f, const xf_client *sc, int loader_rc, int64_t end_ms) {
  /* kept for the loader's ttl (xf_sink_ttl), 0 = not kept */
  xf__share_end(sc, f->key.data, f->key.len, load_outcome(f, loader_rc), f->sink.data,
                f->sink.len, end_ms + (f->sink.ttl_set ? f->sink.ttl_ms : f->p->ttl_ms));
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
  int64_t t0 = xf__now_us();
  xf__nest_push(&f->nest, sc ? sc : f->c, f->key.data, f->key.len);
  out->loader_rc = loader(ud, f->user_key, f->user_keylen, &f->sink);
  xf__nest_pop(&f->nest);
  int64_t t1 = xf__now_us();
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

int xf_get_or_compute(xf_client *c, const char *key, size_t keylen, const xf_policy *p,
                      xf_loader_fn loader, void *ud, xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  c->loader_rc = 0;
  if (!out)
    return xf__fail(c, XF_EINVAL, "out is NULL");
  if (!loader)
    return xf__fail(c, XF_EINVAL, "loader is NULL");
  xf__flow f;
  xf__step step = xf__flow_start(&f, c, key, keylen, p, out, xf__now_ms());
  for (;;) {
    switch (step) {
    case XF_STEP_SEND:
      step = send(&f);
      break;
    case XF_STEP_LOAD:
      step = xf__flow_run_loader(&f, loader, ud);
      break;
    case XF_STEP_WAIT:
      step = xf__flow_sleep(&f, f.wake_ms) ? xf__flow_cancel(&f)
                                           : xf__flow_woke(&f, xf__now_ms());
      break;
    case XF_STEP_DONE:
      return f.rc;
    }
  }
}

int xf_get(xf_client *c, const char *key, size_t keylen, xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  if (!out)
    return xf__fail(c, XF_EINVAL, "out is NULL");
  xf__key full;
  int rc = xf__key_build(c, key, keylen, &full);
  if (rc != XF_OK)
    return rc;
  xf__entry e;
  rc = xf__entry_read(c, full.data, full.len, &e);
  xf__key_free(&full);
  if (rc != XF_OK)
    return rc;
  if (!e.value || e.remaining_ms <= 0 || e.negative) { /* absent, expired, not found */
    c->stats.misses++;
    xf__entry_free(&e);
    return XF_ENOTFOUND;
  }
  out->data = malloc(e.len + 1);
  if (!out->data) {
    xf__entry_free(&e);
    return xf__fail(c, XF_ENOMEM, "out of memory for a %zu-byte value", e.len);
  }
  memcpy(out->data, e.value, e.len);
  out->data[e.len] = '\0';
  out->len = e.len;
  out->source = XF_SOURCE_CACHE;
  c->stats.hits++;
  xf__entry_free(&e);
  return XF_OK;
}

int xf_set(xf_client *c, const char *key, size_t keylen, const void *data, size_t len,
           const xf_policy *p) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  if (!data && len > 0)
    return xf__fail(c, XF_EINVAL, "data is NULL");
  if (len > c->max_value_len)
    return xf__fail(c, XF_EINVAL, "value is %zu bytes, above max_value_len %zu", len,
                    c->max_value_len);
  xf__key full;
  int rc = xf__policy_check(c, p);
  if (rc == XF_OK)
    rc = xf__key_build(c, key, keylen, &full);
  if (rc != XF_OK)
    return rc;
  xf__write w = {.token = "",
                 .data = data,
                 .len = len,
                 .delta_us = -1,
                 .ttl_ms = xf__policy_ttl(c, p),
                 .keep_ms = xf__policy_keep_ms(p),
                 .start_ms = -1,
                 .kind = XF_WRITE_VALUE};
  int written = 0;
  rc = xf__entry_write(c, full.data, full.len, &w, &written);
  xf__share_drop(c, full.data, full.len); /* older than what Redis now holds */
  xf__key_free(&full);
  if (rc == XF_OK && !written) {
    c->stats.superseded++;
    rc = xf__fail(c, XF_ESUPERSEDED, "not written: the entry holds a newer value");
  }
  return rc;
}

int xf_delete(xf_client *c, const char *key, size_t keylen) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  xf__key full;
  int rc = xf__key_build(c, key, keylen, &full);
  if (rc != XF_OK)
    return rc;
  rc = xf__entry_delete(c, full.data, full.len, c->tombstone_ms);
  xf__share_drop(c, full.data, full.len); /* Redis would no longer serve it */
  xf__key_free(&full);
  return rc;
}
