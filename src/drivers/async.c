/* The event-loop driver: each call (get-or-compute, get, set, delete) is a
 * flow (flow.h) of its kind, stepped from the loop's events: its replies
 * (async_conn.c), its loader's completion, and the handle's one loop timer,
 * which serves every call's WAIT, the SENDs that could not go out, and the
 * connection's watchdog. User code (loaders, callbacks) runs only from those
 * events, never from inside the function that started the call. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "async_start.h"
#include "client_io.h"
#include "flight.h"

/* ---- the calls ------------------------------------------------------------------ */

static void link_call(xf_async *ac, xf__acall *k) {
  k->prev = NULL;
  k->next = ac->calls;
  if (ac->calls)
    ac->calls->prev = k;
  ac->calls = k;
}

static void unlink_call(xf_async *ac, xf__acall *k) {
  if (k->prev)
    k->prev->next = k->next;
  else
    ac->calls = k->next;
  if (k->next)
    k->next->prev = k->prev;
  k->prev = k->next = NULL;
}

void xf__acall_release(xf__acall *k) {
  if (!k->finished || k->sent || k->loading)
    return;
  if (k->ud_kept) /* a refresh off the request path: its loader_ud's end */
    xf__policy_drop_ud(&k->p, k->ud);
  free(k->key);
  free(k);
}

/* ---- stepping a call --------------------------------------------------------- */

/* A SEND that could not go out is fed its error from the timer, so that a
 * loader or callback never runs inside xf_async_get_or_compute. */
void xf__async_defer(xf_async *ac, xf__acall *k, int rc) {
  k->deferred_rc = rc;
  k->attempts = 0;
  k->trip.act = XF_ROUTE_DONE;
  k->next_deferred = NULL;
  if (ac->deferred_tail)
    ac->deferred_tail->next_deferred = k;
  else
    ac->deferred = k;
  ac->deferred_tail = k;
}

static void finish(xf_async *ac, xf__acall *k) {
  unlink_call(ac, k);
  ac->ncalls--;
  k->finished = 1;
  int rc = k->f.rc;
  if (rc == XF_OK)
    ac->core->errstr[0] = '\0';
  ac->core->loader_rc = rc == XF_ELOADER ? k->loader_rc : 0;
  k->cb(rc, rc == XF_OK ? &k->out : NULL, k->privdata);
  xf_value_free(&k->out);
  xf__acall_release(k);
}

/* ---- background refresh ------------------------------------------------------- */

static void refresh_done(int rc, const xf_value *v, void *privdata) {
  (void)rc, (void)v, (void)privdata; /* a refresh has no caller: the flow counted it */
}

/* k's LOAD is a detachable early refresh (policy.background_refresh): it
 * becomes a call of its own on the loop, with no callback of the user's
 * (closing the handle cancels it as any call), and k ends with the current
 * value. NULL: no memory for it. */
xf__acall *xf__async_spawn(xf_async *ac, const xf__acall *k) {
  xf__acall *r = calloc(1, sizeof *r);
  char *key = malloc(k->keylen ? k->keylen : 1);
  if (!r || !key || xf__aheap_reserve(ac, ac->ncalls + 1) != 0) {
    free(r);
    free(key);
    return NULL;
  }
  memcpy(key, k->key, k->keylen);
  r->p = k->p;
  r->key = key;
  r->keylen = k->keylen;
  r->ac = ac;
  r->loader = k->loader;
  r->ud = k->ud;
  r->cb = refresh_done;
  r->heap_at = SIZE_MAX;
  r->load_deadline = INT64_MAX;
  link_call(ac, r);
  ac->ncalls++;
  return r;
}

static xf__acall *detach(xf_async *ac, xf__acall *k) {
  void *kept;
  if (!xf__policy_keep_ud(&k->p, k->ud, &kept))
    return NULL;
  xf__acall *r = xf__async_spawn(ac, k);
  if (!r) {
    xf__policy_drop_ud(&k->p, kept);
    return NULL;
  }
  r->ud = kept;
  r->ud_kept = 1;
  xf__flow_detach(&k->f, &r->f, &r->p, r->key, &r->out);
  return r;
}

void xf__async_advance(xf__acall *k, xf__step step) {
  xf_async *ac = k->ac;
  while (!ac->closing) {
    switch (step) {
    case XF_STEP_SEND: {
      int rc = xf__aroute_send(k);
      if (rc != XF_OK)
        xf__async_defer(ac, k, rc);
      return;
    }
    case XF_STEP_WAIT:
      k->wake_ms = xf__awake_missed(ac, k) ? xf__now_ms() : k->f.wake_ms;
      xf__aheap_push(ac, k);
      return;
    case XF_STEP_DONE:
      finish(ac, k);
      return;
    case XF_STEP_LOAD:
      if (xf__flow_detachable(&k->f, XF__OFF_PATH_READY)) {
        xf__acall *r = detach(ac, k);
        if (!r) {
          step = xf__flow_skip(&k->f);
          break;
        }
        finish(ac, k); /* the caller's value now; then the refresh, on the loop */
        k = r;
        break;
      }
      if (!xf__async_load(ac, k, &step))
        return; /* resumed by xf_async_load_*, or with its leader */
      break;
    }
  }
}

/* ---- frames, the timer, closing ---------------------------------------------- */

static void rearm(xf_async *ac) {
  int64_t due = ac->deferred || ac->auto_corked ? 0 : INT64_MAX;
  if (ac->heap_len && ac->heap[0]->wake_ms < due)
    due = ac->heap[0]->wake_ms;
  int64_t watchdog = xf__aconn_deadline(ac);
  if (watchdog < due)
    due = watchdog;
  if (due == ac->armed_ms)
    return;
  ac->armed_ms = due == INT64_MAX ? -1 : due;
  if (due == INT64_MAX) {
    ac->loop.timer_stop(ac->loop.data);
    return;
  }
  int64_t now = xf__now_ms();
  ac->loop.timer_start(ac->loop.data, due > now ? due - now : 0);
}

static void finish_close(xf_async *ac) {
  ac->depth++; /* for good: callbacks below cannot re-enter the close */
  xf__acork_drop(ac);
  while (ac->calls) {
    xf__acall *k = ac->calls;
    unlink_call(ac, k);
    k->finished = 1;
    k->ac = NULL; /* orphaned: its connection or a late loader may still hold it */
    xf__flight_end(&k->f, &k->share, -1, 0); /* a flight it leads ends, failed */
    xf__flow_abandon(&k->f);
    xf__fail(ac->core, XF_ECANCELED, "the async handle was closed");
    k->cb(XF_ECANCELED, NULL, k->privdata);
    xf_value_free(&k->out);
    xf__acall_release(k);
  }
  xf__aroute_free(ac); /* first: its command's callback must find it orphaned */
  xf__aconn_close(ac);
  xf__awake_close(ac);
  ac->loop.timer_stop(ac->loop.data);
  ac->loop.cleanup(ac->loop.data);
  xf_client_close(ac->core);
  free(ac->heap);
  free(ac);
}

void xf__async_enter(xf_async *ac) {
  if (ac->depth++ == 0)
    xf__afork_check(ac);
}

void xf__async_leave(xf_async *ac) {
  if (--ac->depth > 0)
    return;
  if (ac->closing) {
    finish_close(ac);
    return;
  }
  if (ac->write_soon)
    xf__awire_write_soon(ac);
  rearm(ac);
}

void xf_async_set_eager(xf_async *ac, int eager) {
  if (ac)
    ac->eager = eager != 0;
}

static void run_deferred(xf_async *ac, int64_t now_ms) {
  xf__acall *k = ac->deferred;
  ac->deferred = ac->deferred_tail = NULL;
  while (k && !ac->closing) {
    xf__acall *next = k->next_deferred;
    if (k->deferred_start) /* the callback, or a bypass's loader, now on the loop */
      xf__async_advance(k, k->start_step);
    else
      xf__async_advance(k, xf__flow_reply(&k->f, k->deferred_rc, NULL, now_ms));
    k = next;
  }
}

static void wake_due(xf_async *ac, int64_t now_ms) {
  while (!ac->closing && ac->heap_len && ac->heap[0]->wake_ms <= now_ms) {
    xf__acall *k = xf__aheap_pop(ac);
    if (k->loading) /* a renewal or a timeout of its load (async_bound.c) */
      xf__async_load_woke(ac, k, now_ms);
    else if (k->resend) /* a cluster retry's backoff is over */
      k->resend = 0, xf__async_advance(k, XF_STEP_SEND);
    else if (k->share.polling) /* another caller's fail-open load: landed yet? */
      xf__async_advance(k, xf__flight_join(&k->f, &k->share, now_ms));
    else
      xf__async_advance(k, xf__flow_woke(&k->f, now_ms));
  }
}

void xf_async_timer_fired(xf_async *ac) {
  if (!ac || ac->closing)
    return;
  ac->armed_ms = -1;
  xf__async_enter(ac);
  if (ac->auto_corked) /* the loop's next turn: the calls started together go */
    xf_async_uncork(ac);
  int64_t now_ms = xf__now_ms();
  xf__aconn_check(ac, now_ms);
  run_deferred(ac, now_ms);
  wake_due(ac, now_ms);
  xf__async_leave(ac);
}

/* ---- opening, closing ---------------------------------------------------------- */

static int check_loop(const xf_async_loop *l) {
  return l && l->watch && l->unwatch && l->timer_start && l->timer_stop && l->cleanup
             ? XF_OK
             : XF_EINVAL;
}

int xf_async_open(xf_async **out, const xf_options *opts, const xf_async_loop *loop) {
  if (out)
    *out = NULL;
  if (check_loop(loop) != XF_OK)
    return XF_EINVAL; /* no cleanup hook to call */
  xf_options o = XF_OPTIONS_INIT;
  if (opts)
    o = *opts;
  int connect_now = !o.lazy_connect && !o.disabled;
  o.lazy_connect = 1; /* the core never connects: the flow's state only */
  xf_async *ac = calloc(1, sizeof *ac);
  int rc = !out ? XF_EINVAL : !ac ? XF_ENOMEM : xf_client_open(&ac->core, &o);
  if (rc != XF_OK) {
    free(ac);
    loop->cleanup(loop->data);
    return rc;
  }
  ac->core->driver = XF_DRIVER_ASYNC;
  ac->loop = *loop;
  ac->armed_ms = -1;
  ac->wake_rd = -1;
  ac->fork_gen = xf__fork_generation();
  xf__awake_open(ac);
  if ((rc = xf__aroute_open(ac, connect_now)) != XF_OK) {
    xf__open_failed(ac->core->errstr); /* xf_async_errmsg(NULL) says why */
    finish_close(ac);
    return rc;
  }
  *out = ac;
  return XF_OK;
}

/* The core client's switch: each call's flow reads it as it starts, and a
 * handle opened disabled connects on its first call once enabled. */
void xf_async_set_enabled(xf_async *ac, int enabled) {
  if (ac)
    xf_client_set_enabled(ac->core, enabled);
}

void xf_async_close(xf_async *ac) {
  if (!ac || ac->closing)
    return;
  ac->closing = 1;
  if (ac->depth == 0)
    finish_close(ac);
}

/* ---- accepting a call (async_start.c starts them) ------------------------------ */

/* (async_start.h) */
int xf__async_accept(xf_async *ac, xf__acall *k, xf__step step) {
  int rc = k->f.rc;
  if (step == XF_STEP_DONE && !k->f.near_served && (rc == XF_EINVAL || rc == XF_ENOMEM)) {
    free(k->key);
    free(k);
    return rc;
  }
  xf__acork_auto(ac);
  link_call(ac, k);
  ac->ncalls++;
  xf__async_enter(ac);
  /* Decided at start (a near hit: DONE; a bypass: LOAD): its callback or its
   * loader on the next tick, never here. */
  if (step == XF_STEP_DONE || step == XF_STEP_LOAD) {
    k->deferred_start = 1;
    k->start_step = step;
    xf__async_defer(ac, k, rc);
  } else {
    xf__async_advance(k, step); /* a SEND: queued or deferred, no user code */
  }
  xf__async_leave(ac);
  return XF_OK;
}

const char *xf_async_errmsg(const xf_async *ac) {
  return ac ? ac->core->errstr : xf_errmsg(NULL); /* why this thread's open failed */
}

int xf_async_loader_error(const xf_async *ac) { return ac ? ac->core->loader_rc : 0; }

void xf_async_stats(const xf_async *ac, xf_stats *out) {
  xf_client_stats(ac ? ac->core : NULL, out);
  if (ac && out)
    out->connections = (uint64_t)xf__aconn_count(ac);
}

int xf_async_near_serve(xf_async *ac, const char *key, size_t keylen,
                        const xf_policy *policy, uint64_t *near_hits, xf_value *out) {
  if (ac && ac->closing) {
    if (out)
      memset(out, 0, sizeof *out);
    return XF_NEAR_NOT_SERVED; /* the call says why */
  }
  return xf_near_serve(ac ? ac->core : NULL, key, keylen, policy, XF_DRIVER_ASYNC,
                       near_hits, out);
}
