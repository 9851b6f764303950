/* The sans-I/O call: the flow (flow.h), every kind of it, behind a public
 * API, for drivers written outside C (the Python asyncio binding): the caller
 * moves the bytes, runs the loader, sleeps and tells the time; the call
 * decides, and reads no clock. Replies are parsed by an
 * xf_reader, one per connection, so pipelined calls share it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "client_io.h"
#include "drive.h"
#include "flow_steps.h"
#include "reply.h"
#include "sink.h"

static xf_call_step advance(xf_call *call, xf__step step, int64_t now_ms);
static int call_new(xf_call **out, xf_client *c, const char *key, size_t keylen,
                    xf_call **call);

/* The call's LOAD is a detachable early refresh (policy.background_refresh):
 * the call ends with the current value and the refresh becomes a call of its
 * own at its LOAD, for the driver to take (xf_call_take_refresh); without
 * memory for it, the refresh is skipped (the lease released). */
static xf__step detach(xf_call *call) {
  xf_call *r = NULL, *unused;
  if (call_new(&unused, call->f.c, call->key, call->f.user_keylen, &r) != XF_OK)
    return xf__flow_skip(&call->f);
  r->policy = call->policy;
  xf__flow_detach(&call->f, &r->f, &r->policy, r->key, &r->out);
  r->step = XF_STEP_LOAD;
  r->renewing = xf__flow_renewal(&r->f, &r->renew);
  call->refresh = r;
  return XF_STEP_DONE;
}

/* The command's outcome is the error rc (it could not be sent, or the
 * router gave up on it): the flow decides (a get-or-compute fails open). */
static xf_call_step fed(xf_call *call, int rc, int64_t now_ms) {
  return advance(call, xf__flow_reply(&call->f, rc, NULL, now_ms), now_ms);
}

/* What call_route.c answered for the command. */
static xf_call_step routed(xf_call *call, int rc, int64_t now_ms) {
  if (rc == XF__CALL_SENDING) {
    call->step = XF_STEP_SEND;
    return XF_CALL_SEND;
  }
  if (rc == XF__CALL_BACKING_OFF) {
    call->step = XF_STEP_WAIT;
    return XF_CALL_WAIT;
  }
  return fed(call, rc, now_ms);
}

/* The step as the public enum, after the call moved on. */
static xf_call_step advance(xf_call *call, xf__step step, int64_t now_ms) {
  call->step = step;
  switch (step) {
  case XF_STEP_SEND:
    return routed(call, xf__call_route(call, &call->f.cmd, now_ms), now_ms);
  case XF_STEP_LOAD:
    if (xf__flight_joins(&call->f,
                         &call->share)) /* Redis cannot be used: the share first */
      return advance(call, xf__flight_join(&call->f, &call->share, now_ms), now_ms);
    if (xf__flow_detachable(&call->f, XF__OFF_PATH_DRIVER))
      return advance(call, detach(call), now_ms);
    xf__flow_settle(&call->f); /* the caller runs the loader: what it owes first */
    call->renewing = xf__flow_renewal(&call->f, &call->renew);
    return XF_CALL_LOAD;
  case XF_STEP_WAIT:
    return XF_CALL_WAIT;
  case XF_STEP_DONE:
  default:
    if (call->f.rc != XF_OK)
      snprintf(call->errstr, sizeof call->errstr, "%s", call->f.c->errstr);
    return XF_CALL_DONE;
  }
}

/* The checks every start makes, then a call for key (copied: the flow
 * points at the call's copy) in *call. */
static int call_new(xf_call **out, xf_client *c, const char *key, size_t keylen,
                    xf_call **call) {
  if (!out)
    return XF_EINVAL;
  *out = NULL;
  if (!c || (!key && keylen > 0))
    return XF_EINVAL;
  if (!(*call = calloc(1, sizeof **call)) || !((*call)->key = malloc(keylen + 1))) {
    free(*call);
    return XF_ENOMEM;
  }
  if (keylen)
    memcpy((*call)->key, key, keylen);
  c->errstr[0] = '\0';
  xf__client_check_fork(c); /* the flow's lease tokens: never a parent's in a child */
  return XF_OK;
}

/* The flow's events name this driver (the flow takes the client's at its
 * start): around each start. */
#define AS_CALL(c, expr)                                                                   \
  ({                                                                                       \
    xf_driver driver_ = (c)->driver;                                                       \
    (c)->driver = XF_DRIVER_CALL;                                                          \
    xf__step step_ = (expr);                                                               \
    (c)->driver = driver_;                                                                 \
    step_;                                                                                 \
  })

int xf_call_start(xf_call **out, xf_client *c, const char *key, size_t keylen,
                  const xf_policy *policy, int64_t now_ms) {
  xf_call *call;
  int rc = policy ? call_new(out, c, key, keylen, &call) : XF_EINVAL;
  if (rc != XF_OK) {
    if (out)
      *out = NULL;
    return rc;
  }
  call->policy = *policy;
  advance(call,
          AS_CALL(c, xf__flow_start(&call->f, c, call->key, keylen, &call->policy,
                                    &call->out, now_ms)),
          now_ms);
  *out = call;
  return XF_OK;
}

int xf_call_start_get(xf_call **out, xf_client *c, const char *key, size_t keylen,
                      int64_t now_ms) {
  xf_call *call;
  int rc = call_new(out, c, key, keylen, &call);
  if (rc != XF_OK)
    return rc;
  advance(
      call,
      AS_CALL(c, xf__flow_start_get(&call->f, c, call->key, keylen, &call->out, now_ms)),
      now_ms);
  *out = call;
  return XF_OK;
}

/* A set's or delete's call, once its flow started: refused arguments are
 * the start's error (no call), anything else the call's. */
static int started(xf_call **out, xf_call *call, xf__step step, int64_t now_ms) {
  if (step == XF_STEP_DONE) {
    int rc = call->f.rc;
    xf_call_free(call);
    return rc;
  }
  advance(call, step, now_ms);
  *out = call;
  return XF_OK;
}

int xf_call_start_set(xf_call **out, xf_client *c, const char *key, size_t keylen,
                      const void *data, size_t len, const xf_policy *policy,
                      int64_t now_ms) {
  xf_call *call;
  int rc = call_new(out, c, key, keylen, &call);
  if (rc != XF_OK)
    return rc;
  if (policy)
    call->policy = *policy;
  /* A copy the flow keeps, unless the flow will refuse data anyway (NULL,
   * or above max_value_len: not worth copying). */
  const void *kept = data;
  if (data && len <= c->max_value_len) {
    if (!(call->data = malloc(len + 1))) {
      xf_call_free(call);
      return XF_ENOMEM;
    }
    kept = len ? memcpy(call->data, data, len) : call->data;
  }
  return started(out, call,
                 AS_CALL(c, xf__flow_start_set(&call->f, c, call->key, keylen, kept, len,
                                               policy ? &call->policy : NULL, now_ms)),
                 now_ms);
}

int xf_call_start_delete(xf_call **out, xf_client *c, const char *key, size_t keylen,
                         int64_t now_ms) {
  xf_call *call;
  int rc = call_new(out, c, key, keylen, &call);
  if (rc != XF_OK)
    return rc;
  return started(out, call,
                 AS_CALL(c, xf__flow_start_delete(&call->f, c, call->key, keylen, now_ms)),
                 now_ms);
}

int64_t xf_call_load_deadline(const xf_call *call) {
  return call && call->step == XF_STEP_LOAD ? xf__flow_load_deadline(&call->f) : INT64_MAX;
}

xf_call_step xf_call_load_timeout(xf_call *call, int64_t now_ms) {
  if (!call || call->step != XF_STEP_LOAD || call->refresh)
    return xf_call_next(call);
  xf_call *r = NULL, *unused;
  if (call_new(&unused, call->f.c, call->key, call->f.user_keylen, &r) != XF_OK)
    return XF_CALL_LOAD; /* no memory to move it: the call waits for its loader */
  r->policy = call->policy;
  xf__flow_time_out(&call->f, &r->f, &r->policy, r->key, &r->out, now_ms);
  r->step = XF_STEP_LOAD;
  r->renew = call->renew; /* the renewals' schedule goes with the lease */
  r->renewing = call->renewing;
  call->renewing = 0;
  call->refresh = r;
  return advance(call, XF_STEP_DONE, now_ms);
}

int64_t xf_call_renew_at(const xf_call *call) {
  return call && call->step == XF_STEP_LOAD && call->renewing ? call->renew.next_ms
                                                              : INT64_MAX;
}

int xf_call_start_renew(xf_call **out, xf_call *loading, int64_t now_ms) {
  if (out)
    *out = NULL;
  if (!out || !loading || loading->step != XF_STEP_LOAD)
    return XF_EINVAL;
  if (!loading->renewing || now_ms < loading->renew.next_ms)
    return XF_OK;
  int64_t len = xf__renewal_take(&loading->renew, now_ms);
  if (len <= 0)
    return XF_OK;
  xf_client *c = loading->f.c;
  size_t keylen = loading->f.user_keylen;
  xf_call *call;
  int rc = call_new(out, c, loading->key, keylen, &call);
  if (rc != XF_OK)
    return rc;
  return started(out, call,
                 AS_CALL(c, xf__flow_start_renew(&call->f, c, call->key, keylen,
                                                 loading->renew.token, len, now_ms)),
                 now_ms);
}

int xf_call_start_invalidate_tags(xf_call **out, xf_client *c, const char *const *tags,
                                  size_t ntags, int64_t now_ms) {
  xf_call *call;
  int rc = call_new(out, c, "", 0, &call);
  if (rc != XF_OK)
    return rc;
  return started(out, call,
                 AS_CALL(c, xf__flow_start_invalidate(&call->f, c, tags, ntags, 0, now_ms)),
                 now_ms);
}

int xf_call_start_clear_namespace(xf_call **out, xf_client *c, int64_t now_ms) {
  xf_call *call;
  int rc = call_new(out, c, "", 0, &call);
  if (rc != XF_OK)
    return rc;
  return started(out, call,
                 AS_CALL(c, xf__flow_start_invalidate(&call->f, c, NULL, 0, 1, now_ms)),
                 now_ms);
}

xf_call_step xf_call_next(const xf_call *call) {
  if (!call)
    return XF_CALL_DONE;
  switch (call->step) {
  case XF_STEP_SEND:
    return XF_CALL_SEND;
  case XF_STEP_LOAD:
    return XF_CALL_LOAD;
  case XF_STEP_WAIT:
    return XF_CALL_WAIT;
  default:
    return XF_CALL_DONE;
  }
}

const char *xf_call_request(const xf_call *call, size_t *len) {
  if (!call || call->step != XF_STEP_SEND) {
    if (len)
      *len = 0;
    return NULL;
  }
  if (len)
    *len = call->request.len;
  return call->request.data;
}

xf_call_step xf_call_reply(xf_call *call, xf_reply *reply, int64_t now_ms) {
  xf__reply *r = (xf__reply *)reply;
  if (!call || call->step != XF_STEP_SEND) {
    if (r)
      xf__reply_free(r);
    return xf_call_next(call);
  }
  if (!r)
    xf__fail(call->f.c, XF_EIO, "the connection failed");
  int rc = xf__call_route_reply(call, &call->f.cmd, &r, r ? XF_OK : XF_EIO, now_ms);
  if (rc != XF__CALL_REPLY)
    return routed(call, rc, now_ms);
  return advance(call, xf__flow_reply(&call->f, r ? XF_OK : XF_EIO, r, now_ms), now_ms);
}

xf_call_step xf__call_on_reply(xf_call *call, xf__reply *r, int rc, int64_t now_ms) {
  if (r)
    return xf_call_reply(call, (xf_reply *)r, now_ms);
  xf__reply *none = NULL;
  return routed(call, xf__call_route_reply(call, &call->f.cmd, &none, rc, now_ms), now_ms);
}

xf_call_step xf_call_io_failed(xf_call *call, int rc, int64_t now_ms) {
  if (!call || call->step != XF_STEP_SEND)
    return xf_call_next(call);
  if (rc != XF_ECONNECT && rc != XF_ENOMEM)
    rc = XF_EIO;
  xf__fail(call->f.c, rc, "the connection failed");
  xf__reply *none = NULL;
  return routed(
      call,
      rc == XF_ENOMEM ? rc : xf__call_route_reply(call, &call->f.cmd, &none, rc, now_ms),
      now_ms);
}

/* A LOAD's outcome: rc 0 with the sink filled, or the loader's failure; its
 * duration (the XFetch delta) is the driver's measure. */
static xf_call_step loaded(xf_call *call, int loader_rc, int64_t duration_us,
                           int64_t now_ms) {
  xf__flight_end(&call->f, &call->share, loader_rc, now_ms); /* its followers' outcome */
  return advance(
      call, xf__flow_loaded(&call->f, loader_rc, duration_us > 0 ? duration_us : 0, now_ms),
      now_ms);
}

xf_call_step xf_call_loaded(xf_call *call, const void *data, size_t len,
                            int64_t duration_us, int64_t now_ms) {
  if (!call || call->step != XF_STEP_LOAD)
    return xf_call_next(call);
  int rc = xf_sink_set(&call->f.sink, data, len);
  return loaded(call, rc == XF_OK ? 0 : rc, duration_us, now_ms);
}

xf_call_step xf_call_not_found(xf_call *call, int64_t duration_us, int64_t now_ms) {
  if (!call || call->step != XF_STEP_LOAD)
    return xf_call_next(call);
  xf_sink_not_found(&call->f.sink);
  return loaded(call, 0, duration_us, now_ms);
}

xf_sink *xf_call_sink(xf_call *call) {
  return call && call->f.kind == XF_KIND_GET_OR_COMPUTE && call->step == XF_STEP_LOAD
             ? &call->f.sink
             : NULL;
}

xf_call_step xf_call_load_done(xf_call *call, int loader_rc, int64_t duration_us,
                               int64_t now_ms) {
  if (!call || call->step != XF_STEP_LOAD)
    return xf_call_next(call);
  return loaded(call, loader_rc, duration_us, now_ms);
}

xf_call_step xf_call_load_failed(xf_call *call, int loader_rc, int64_t now_ms) {
  if (!call || call->step != XF_STEP_LOAD)
    return xf_call_next(call);
  return loaded(call, loader_rc ? loader_rc : -1, 0, now_ms);
}

int64_t xf_call_wait_ms(const xf_call *call, int64_t now_ms) {
  if (!call || call->step != XF_STEP_WAIT)
    return 0;
  int64_t ms = (call->backoff ? call->wake_ms : call->f.wake_ms) - now_ms;
  return ms > 0 ? ms : 0;
}

xf_call_step xf_call_woke(xf_call *call, int64_t now_ms) {
  if (!call || call->step != XF_STEP_WAIT)
    return xf_call_next(call);
  if (call->backoff) /* the router's: the command again */
    return routed(call, xf__call_route(call, &call->f.cmd, now_ms), now_ms);
  if (call->share.polling) /* another caller's load of the key: landed yet? */
    return advance(call, xf__flight_join(&call->f, &call->share, now_ms), now_ms);
  return advance(call, xf__flow_woke(&call->f, now_ms), now_ms);
}

int xf_call_result(xf_call *call, xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!call || call->step != XF_STEP_DONE)
    return XF_EINVAL;
  if (call->taken) { /* else XF_OK with no data: a cached empty value's look */
    snprintf(call->errstr, sizeof call->errstr, "the call's result was already taken");
    return XF_EINVAL;
  }
  if (out && call->f.out && call->f.rc == XF_OK) { /* a kind with a value */
    *out = call->out;
    memset(&call->out, 0, sizeof call->out);
    call->taken = 1;
  }
  return call->f.rc;
}

int xf_call_target(const xf_call *call, const char **host, int *port) {
  if (host)
    *host = NULL;
  if (port)
    *port = 0;
  if (!call || call->step != XF_STEP_SEND)
    return XF_EINVAL;
  if (host)
    *host = call->host;
  if (port)
    *port = call->port;
  return call->replies;
}

const char *xf_call_errmsg(const xf_call *call) { return call ? call->errstr : ""; }

xf_call *xf_call_take_refresh(xf_call *call) {
  if (!call || call->step != XF_STEP_DONE)
    return NULL;
  xf_call *r = call->refresh;
  call->refresh = NULL;
  return r;
}

void xf_call_free(xf_call *call) {
  if (!call)
    return;
  xf__call_link_forget(call);
  if (call->got)
    xf__reply_free(call->got);
  xf__flight_end(&call->f, &call->share, -1, 0); /* abandoned in its load: failed */
  if (call->step != XF_STEP_DONE) /* abandoned mid-way: what the flow holds */
    xf__flow_abandon(&call->f);
  xf_call_free(call->refresh); /* never taken: its lease expires */
  free(call->data);
  xf_value_free(&call->out);
  xf__buf_free(&call->request);
  free(call->key);
  free(call);
}
