/* The sans-I/O call: the flow (flow.h) behind a public API, for drivers
 * written outside C (the Python asyncio binding): the caller moves the bytes,
 * runs the loader and sleeps; the call decides. Replies are parsed by an
 * xf_reader, one per connection, so pipelined calls share it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "client.h"
#include "client_io.h"
#include "policy.h"
#include "reply.h"
#include "script.h"
#include "share.h"
#include "sink.h"

static int call_rc(const xf_call *call) {
  return call->kind == CALL_GET ? call->f.rc : call->one.rc;
}

static xf_call_step one_done(xf_call *call, int rc);
static xf_call_step advance(xf_call *call, xf__step step);

static const xf__cmd *cmd_of(const xf_call *call) {
  return call->kind == CALL_GET ? &call->f.cmd : &call->one.cmd;
}

/* The command's outcome is the error rc (it could not be sent, or the
 * router gave up on it). */
static xf_call_step fed(xf_call *call, int rc) {
  if (call->kind != CALL_GET) /* no loader to fail open to: the error */
    return one_done(call, rc);
  return advance(call, xf__flow_reply(&call->f, rc, NULL, xf__now_ms()));
}

/* What call_route.c answered for the command. */
static xf_call_step routed(xf_call *call, int rc) {
  if (rc == XF__CALL_SENDING) {
    call->step = XF_STEP_SEND;
    return XF_CALL_SEND;
  }
  if (rc == XF__CALL_BACKING_OFF) {
    call->step = XF_STEP_WAIT;
    return XF_CALL_WAIT;
  }
  return fed(call, rc);
}

/* The step as the public enum, after the call moved on. */
static xf_call_step advance(xf_call *call, xf__step step) {
  call->step = step;
  switch (step) {
  case XF_STEP_SEND:
    return routed(call, xf__call_route(call, cmd_of(call)));
  case XF_STEP_LOAD:
    call->load_t0_us = xf__now_us();
    return XF_CALL_LOAD;
  case XF_STEP_WAIT:
    return XF_CALL_WAIT;
  case XF_STEP_DONE:
  default:
    if (call_rc(call) != XF_OK)
      snprintf(call->errstr, sizeof call->errstr, "%s", call->f.c->errstr);
    return XF_CALL_DONE;
  }
}

static xf_call_step one_done(xf_call *call, int rc) {
  call->one.rc = rc;
  if (call->one.key.data) /* the share's copy is older than the set or delete */
    xf__share_drop(call->f.c, call->one.key.data, call->one.key.len);
  return advance(call, XF_STEP_DONE);
}

int xf_call_start(xf_call **out, xf_client *c, const char *key, size_t keylen,
                  const xf_policy *policy) {
  if (!out)
    return XF_EINVAL;
  *out = NULL;
  if (!c || !policy || (!key && keylen > 0))
    return XF_EINVAL;
  xf_call *call = calloc(1, sizeof *call);
  if (!call || !(call->key = malloc(keylen + 1))) {
    free(call);
    return XF_ENOMEM;
  }
  if (keylen)
    memcpy(call->key, key, keylen);
  call->policy = *policy;
  c->errstr[0] = '\0';
  xf__client_check_fork(c); /* the flow's lease tokens: never a parent's in a child */
  advance(call, xf__flow_start(&call->f, c, call->key, keylen, &call->policy, &call->out,
                               xf__now_ms()));
  *out = call;
  return XF_OK;
}

/* A set's or delete's call: key built, script chosen, first SEND ready. */
static int start_one(xf_call **out, xf_client *c, int kind, const char *key,
                     size_t keylen) {
  *out = NULL;
  xf_call *call = calloc(1, sizeof *call);
  if (!call)
    return XF_ENOMEM;
  call->kind = kind;
  call->f.c = c; /* configuration and messages; never I/O */
  call->one.script = kind == CALL_SET ? XF_SCRIPT_WRITE : XF_SCRIPT_DELETE;
  c->errstr[0] = '\0';
  int rc = xf__key_build(c, key, keylen, &call->one.key);
  if (rc != XF_OK) {
    free(call);
    return rc;
  }
  *out = call;
  return XF_OK;
}

int xf_call_start_set(xf_call **out, xf_client *c, const char *key, size_t keylen,
                      const void *data, size_t len, const xf_policy *policy) {
  if (!out || !c || !policy || (!data && len > 0))
    return XF_EINVAL;
  *out = NULL;
  if (len > c->max_value_len)
    return xf__fail(c, XF_EINVAL, "value is %zu bytes, above max_value_len %zu", len,
                    c->max_value_len);
  int rc = xf__policy_check(c, policy);
  xf_call *call = NULL;
  if (rc == XF_OK)
    rc = start_one(&call, c, CALL_SET, key, keylen);
  if (rc != XF_OK)
    return rc;
  if (!(call->one.data = malloc(len + 1))) {
    xf_call_free(call);
    return XF_ENOMEM;
  }
  if (len)
    memcpy(call->one.data, data, len);
  call->one.w = (xf__write){.token = "",
                            .data = call->one.data,
                            .len = len,
                            .delta_us = -1,
                            .ttl_ms = xf__policy_ttl(c, policy),
                            .keep_ms = xf__policy_keep_ms(policy),
                            .start_ms = -1,
                            .kind = XF_WRITE_VALUE};
  xf__entry_write_cmd(&call->one.cmd, call->one.key.data, call->one.key.len, &call->one.w);
  advance(call, XF_STEP_SEND);
  *out = call;
  return XF_OK;
}

int xf_call_start_delete(xf_call **out, xf_client *c, const char *key, size_t keylen) {
  if (!out || !c)
    return XF_EINVAL;
  xf_call *call;
  int rc = start_one(&call, c, CALL_DELETE, key, keylen);
  if (rc != XF_OK)
    return rc;
  xf__entry_delete_cmd(&call->one.cmd, call->one.key.data, call->one.key.len,
                       c->tombstone_ms);
  advance(call, XF_STEP_SEND);
  *out = call;
  return XF_OK;
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

/* The reply to a set's or delete's script (or to its SCRIPT LOAD). */
static xf_call_step one_reply(xf_call *call, xf__reply *r) {
  xf_client *c = call->f.c;
  if (call->one.loading) { /* SCRIPT LOAD answered: the script again */
    call->one.loading = 0;
    int rc = xf__script_loaded(c, call->one.script, r);
    if (rc != XF_OK)
      return one_done(call, rc);
    if (call->kind == CALL_SET)
      xf__entry_write_cmd(&call->one.cmd, call->one.key.data, call->one.key.len,
                          &call->one.w);
    else
      xf__entry_delete_cmd(&call->one.cmd, call->one.key.data, call->one.key.len,
                           c->tombstone_ms);
    return advance(call, XF_STEP_SEND);
  }
  if (r->type == XF_REPLY_ERROR && xf__script_missing(r) && !call->one.retried) {
    xf__reply_free(r);
    call->one.retried = call->one.loading = 1;
    xf__script_load_cmd(&call->one.cmd, call->one.script, call->one.key.data,
                        call->one.key.len);
    return advance(call, XF_STEP_SEND);
  }
  if (r->type == XF_REPLY_ERROR)
    return one_done(call, xf__script_error(c, call->one.script, r));
  int done = 0;
  int rc = xf__entry_parse_int(c, r, call->kind == CALL_SET ? "write" : "delete", &done);
  if (rc == XF_OK && call->kind == CALL_SET && !done) {
    c->stats.superseded++;
    rc = xf__fail(c, XF_ESUPERSEDED, "not written: the entry holds a newer value");
  }
  return one_done(call, rc);
}

xf_call_step xf_call_reply(xf_call *call, xf_reply *reply) {
  xf__reply *r = (xf__reply *)reply;
  if (!call || call->step != XF_STEP_SEND) {
    if (r)
      xf__reply_free(r);
    return xf_call_next(call);
  }
  if (!r)
    xf__fail(call->f.c, XF_EIO, "the connection failed");
  int rc = xf__call_route_reply(call, cmd_of(call), &r, r ? XF_OK : XF_EIO);
  if (rc != XF__CALL_REPLY)
    return routed(call, rc);
  if (call->kind != CALL_GET)
    return r ? one_reply(call, r)
             : one_done(call, xf__fail(call->f.c, XF_EIO, "the connection failed"));
  return advance(call, xf__flow_reply(&call->f, r ? XF_OK : XF_EIO, r, xf__now_ms()));
}

xf_call_step xf_call_io_failed(xf_call *call, int rc) {
  if (!call || call->step != XF_STEP_SEND)
    return xf_call_next(call);
  if (rc != XF_ECONNECT && rc != XF_ENOMEM)
    rc = XF_EIO;
  xf__fail(call->f.c, rc, "the connection failed");
  xf__reply *none = NULL;
  return routed(call,
                rc == XF_ENOMEM ? rc : xf__call_route_reply(call, cmd_of(call), &none, rc));
}

/* A LOAD's outcome: rc 0 with the sink filled, or the loader's failure. */
static xf_call_step loaded(xf_call *call, int loader_rc) {
  int64_t t1 = xf__now_us();
  return advance(call,
                 xf__flow_loaded(&call->f, loader_rc, t1 - call->load_t0_us, t1 / 1000));
}

xf_call_step xf_call_loaded(xf_call *call, const void *data, size_t len) {
  if (!call || call->step != XF_STEP_LOAD)
    return xf_call_next(call);
  int rc = xf_sink_set(&call->f.sink, data, len);
  return loaded(call, rc == XF_OK ? 0 : rc);
}

xf_call_step xf_call_not_found(xf_call *call) {
  if (!call || call->step != XF_STEP_LOAD)
    return xf_call_next(call);
  xf_sink_not_found(&call->f.sink);
  return loaded(call, 0);
}

xf_call_step xf_call_load_failed(xf_call *call, int loader_rc) {
  if (!call || call->step != XF_STEP_LOAD)
    return xf_call_next(call);
  return loaded(call, loader_rc ? loader_rc : -1);
}

int64_t xf_call_wait_ms(const xf_call *call) {
  if (!call || call->step != XF_STEP_WAIT)
    return 0;
  int64_t ms = (call->backoff ? call->wake_ms : call->f.wake_ms) - xf__now_ms();
  return ms > 0 ? ms : 0;
}

xf_call_step xf_call_woke(xf_call *call) {
  if (!call || call->step != XF_STEP_WAIT)
    return xf_call_next(call);
  if (call->backoff) /* the router's: the command again */
    return routed(call, xf__call_route(call, cmd_of(call)));
  return advance(call, xf__flow_woke(&call->f, xf__now_ms()));
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
  if (out && call->kind == CALL_GET && call->f.rc == XF_OK) {
    *out = call->out;
    memset(&call->out, 0, sizeof call->out);
    call->taken = 1;
  }
  return call_rc(call);
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

void xf_call_free(xf_call *call) {
  if (!call)
    return;
  if (call->kind != CALL_GET) {
    xf__key_free(&call->one.key);
    free(call->one.data);
  } else if (call->step != XF_STEP_DONE) { /* abandoned mid-way: what the flow holds */
    xf__entry_free(&call->f.e);
    xf__sink_clear(&call->f.sink);
    xf__key_free(&call->f.key);
  }
  xf_value_free(&call->out);
  xf__buf_free(&call->request);
  free(call->key);
  free(call);
}
