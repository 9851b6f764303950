/* The sans-I/O call: the flow (flow.h) behind a public API, for drivers
 * written outside C (the Python asyncio binding): the caller moves the bytes,
 * runs the loader and sleeps; the call decides. Replies are parsed by an
 * xf_reader, one per connection, so pipelined calls share it. */
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "flow.h"
#include "policy.h"
#include "script.h"
#include "share.h"
#include "sink.h"

/* What a call does: the get-or-compute flow, or one script (set, delete,
 * read). */
enum { CALL_GET, CALL_SET, CALL_DELETE, CALL_READ };

struct xf_call {
  int kind;
  xf__flow f; /* CALL_GET */
  struct {    /* CALL_SET, CALL_DELETE: one script, NOSCRIPT recovered once */
    xf__key key;
    xf__write w;
    char *data;
    xf__cmd cmd;
    int script, loading, retried, rc;
  } one;
  xf__step step;
  xf_policy policy; /* the flow points at it: a copy the call owns */
  char *key;        /* likewise */
  xf_value out;
  xf__buf request; /* the RESP bytes of the SEND step */
  int64_t load_t0_us;
  struct { /* a load while Redis cannot be used goes through the client's share */
    int lead, polling, alone;
    unsigned long seen; /* the flight found in progress (xf__share_try) */
    int64_t from_ms, give_up_ms;
  } share;
  int taken;        /* xf_call_result moved the value out */
  char errstr[256]; /* the client's message when the call ended in error */
};

struct xf_reader {
  redisReader *r;
};

static int call_rc(const xf_call *call) {
  return call->kind == CALL_GET ? call->f.rc : call->one.rc;
}

static xf_call_step one_done(xf_call *call, int rc);
static xf_call_step share_join(xf_call *call);

/* The step as the public enum, after the call moved on. */
static xf_call_step advance(xf_call *call, xf__step step) {
  call->step = step;
  switch (step) {
  case XF_STEP_SEND:
    call->request.len = 0;
    if (xf__resp_append_cmd(&call->request,
                            call->kind == CALL_GET ? &call->f.cmd : &call->one.cmd) != 0) {
      if (call->kind != CALL_GET)
        return one_done(call, xf__fail(call->f.c, XF_ENOMEM, "out of memory"));
      return advance(call, xf__flow_reply(&call->f, XF_ENOMEM, NULL, xf__now_ms()));
    }
    return XF_CALL_SEND;
  case XF_STEP_LOAD:
    if (call->f.load == XF_LOAD_UNCACHED && call->f.c->share && !call->share.lead &&
        !call->share.alone)
      return share_join(call);
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

/* Redis cannot be used: the load goes through the client's share, as the
 * blocking driver's does, but without blocking: the lead loads (its outcome
 * ends the flight in loaded()), a kept value or a landed flight serves
 * (source "local"), and a flight in progress is polled (XF_CALL_WAIT, as a
 * wait for a lease is) up to the policy's wait, then the call loads alone. */
static xf_call_step share_join(xf_call *call) {
  xf__flow *f = &call->f;
  int64_t now = xf__now_ms();
  if (!call->share.polling) {
    call->share.from_ms = now;
    call->share.give_up_ms = now + f->p->wait_ms;
  }
  call->share.polling = 0;
  char *data = NULL;
  size_t len = 0;
  int rc = XF_OK;
  xf__share_role role =
      xf__share_try(f->c, f->key.data, f->key.len, now, &call->share.seen, &data, &len, &rc);
  if (role == XF_SHARE_SERVED)
    return advance(call, xf__flow_local(f, rc, data, len));
  if (role == XF_SHARE_LEAD) {
    call->share.lead = 1;
  } else if (now < call->share.give_up_ms) { /* another caller's flight: poll */
    int64_t ms = (now - call->share.from_ms) / 4, left = call->share.give_up_ms - now;
    ms = ms < 2 ? 2 : ms > 50 ? 50 : ms;
    f->wake_ms = now + (ms < left ? ms : left);
    call->share.polling = 1;
    call->step = XF_STEP_WAIT;
    return XF_CALL_WAIT;
  } else {
    call->share.alone = 1;
  }
  call->load_t0_us = xf__now_us();
  return XF_CALL_LOAD;
}

static xf_call_step one_done(xf_call *call, int rc) {
  call->one.rc = rc;
  if (call->one.key.data && call->kind != CALL_READ) /* older than the set or delete */
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

int xf_call_start_get(xf_call **out, xf_client *c, const char *key, size_t keylen) {
  if (!out || !c)
    return XF_EINVAL;
  xf_call *call;
  int rc = start_one(&call, c, CALL_READ, key, keylen);
  if (rc != XF_OK)
    return rc;
  call->one.script = XF_SCRIPT_READ;
  xf__entry_read_cmd(&call->one.cmd, call->one.key.data, call->one.key.len);
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

/* xf_get's answer from the read script's reply: the value while within its
 * ttl, else XF_ENOTFOUND (absent, expired, a cached not-found). */
static int read_reply(xf_call *call, redisReply *r) {
  xf_client *c = call->f.c;
  xf__entry e;
  int rc = xf__entry_parse_read(c, r, &e);
  if (rc != XF_OK)
    return rc;
  if (!e.value || e.remaining_ms <= 0 || e.negative) {
    c->stats.misses++;
    rc = XF_ENOTFOUND;
  } else if (!(call->out.data = malloc(e.len + 1))) {
    rc = xf__fail(c, XF_ENOMEM, "out of memory for a %zu-byte value", e.len);
  } else {
    memcpy(call->out.data, e.value, e.len);
    call->out.data[e.len] = '\0';
    call->out.len = e.len;
    call->out.source = XF_SOURCE_CACHE;
    c->stats.hits++;
  }
  xf__entry_free(&e);
  return rc;
}

/* The reply to a set's, delete's or read's script (or to its SCRIPT LOAD). */
static xf_call_step one_reply(xf_call *call, redisReply *r) {
  xf_client *c = call->f.c;
  if (call->one.loading) { /* SCRIPT LOAD answered: the script again */
    call->one.loading = 0;
    int rc = xf__script_loaded(c, call->one.script, r);
    if (rc != XF_OK)
      return one_done(call, rc);
    if (call->kind == CALL_SET)
      xf__entry_write_cmd(&call->one.cmd, call->one.key.data, call->one.key.len,
                          &call->one.w);
    else if (call->kind == CALL_READ)
      xf__entry_read_cmd(&call->one.cmd, call->one.key.data, call->one.key.len);
    else
      xf__entry_delete_cmd(&call->one.cmd, call->one.key.data, call->one.key.len,
                           c->tombstone_ms);
    return advance(call, XF_STEP_SEND);
  }
  if (r->type == REDIS_REPLY_ERROR && xf__script_missing(r) && !call->one.retried) {
    freeReplyObject(r);
    call->one.retried = call->one.loading = 1;
    xf__script_load_cmd(&call->one.cmd, call->one.script, call->one.key.data,
                        call->one.key.len);
    return advance(call, XF_STEP_SEND);
  }
  if (r->type == REDIS_REPLY_ERROR)
    return one_done(call, xf__script_error(c, call->one.script, r));
  if (call->kind == CALL_READ)
    return one_done(call, read_reply(call, r));
  int done = 0;
  int rc = xf__entry_parse_int(c, r, call->kind == CALL_SET ? "write" : "delete", &done);
  if (rc == XF_OK && call->kind == CALL_SET && !done) {
    c->stats.superseded++;
    rc = xf__fail(c, XF_ESUPERSEDED, "not written: the entry holds a newer value");
  }
  return one_done(call, rc);
}

xf_call_step xf_call_reply(xf_call *call, xf_reply *reply) {
  redisReply *r = (redisReply *)reply;
  if (!call || call->step != XF_STEP_SEND) {
    if (r)
      freeReplyObject(r);
    return xf_call_next(call);
  }
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
  if (call->kind != CALL_GET) /* no loader to fail open to: the error */
    return one_done(call, xf__fail(call->f.c, rc, "the connection failed"));
  return advance(call, xf__flow_reply(&call->f, rc, NULL, xf__now_ms()));
}

/* A LOAD's outcome: rc 0 with the sink filled, or the loader's failure. */
static xf_call_step loaded(xf_call *call, int loader_rc) {
  int64_t t1 = xf__now_us();
  if (call->share.lead) { /* the flight's followers get this outcome */
    call->share.lead = 0;
    xf__flow_share_end(&call->f, call->f.c, loader_rc, t1 / 1000);
  }
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

xf_sink *xf_call_sink(xf_call *call) {
  return call && call->kind == CALL_GET && call->step == XF_STEP_LOAD ? &call->f.sink : NULL;
}

xf_call_step xf_call_load_done(xf_call *call, int loader_rc) {
  if (!call || call->step != XF_STEP_LOAD)
    return xf_call_next(call);
  return loaded(call, loader_rc);
}

xf_call_step xf_call_load_failed(xf_call *call, int loader_rc) {
  if (!call || call->step != XF_STEP_LOAD)
    return xf_call_next(call);
  return loaded(call, loader_rc ? loader_rc : -1);
}

int64_t xf_call_wait_ms(const xf_call *call) {
  if (!call || call->step != XF_STEP_WAIT)
    return 0;
  int64_t ms = call->f.wake_ms - xf__now_ms();
  return ms > 0 ? ms : 0;
}

xf_call_step xf_call_woke(xf_call *call) {
  if (!call || call->step != XF_STEP_WAIT)
    return xf_call_next(call);
  if (call->share.polling)
    return share_join(call);
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
  if (out && (call->kind == CALL_GET || call->kind == CALL_READ) && call_rc(call) == XF_OK) {
    *out = call->out;
    memset(&call->out, 0, sizeof call->out);
    call->taken = 1;
  }
  return call_rc(call);
}

const char *xf_call_errmsg(const xf_call *call) { return call ? call->errstr : ""; }

void xf_call_free(xf_call *call) {
  if (!call)
    return;
  if (call->share.lead) /* abandoned in its load: end the flight, failed */
    xf__flow_share_end(&call->f, call->f.c, -1, xf__now_ms());
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

/* ---- replies ---------------------------------------------------------------- */

int xf_reader_open(xf_reader **out) {
  if (!out)
    return XF_EINVAL;
  *out = calloc(1, sizeof **out);
  if (!*out || !((*out)->r = redisReaderCreate())) {
    free(*out);
    *out = NULL;
    return XF_ENOMEM;
  }
  return XF_OK;
}

int xf_reader_feed(xf_reader *rd, const char *data, size_t len) {
  if (!rd || (!data && len))
    return XF_EINVAL;
  if (redisReaderFeed(rd->r, data, len) == REDIS_OK)
    return XF_OK;
  /* hiredis refuses every feed once the stream was not RESP: that is still
   * the protocol error, not a lack of memory. */
  return rd->r->err == REDIS_ERR_OOM ? XF_ENOMEM : XF_EPROTO;
}

int xf_reader_next(xf_reader *rd, xf_reply **reply) {
  if (!reply)
    return XF_EINVAL;
  *reply = NULL;
  if (!rd)
    return XF_EINVAL;
  void *r = NULL;
  if (redisReaderGetReply(rd->r, &r) != REDIS_OK)
    return XF_EPROTO;
  *reply = r;
  return XF_OK;
}

int xf_reply_is_error(const xf_reply *reply, const char **msg, size_t *len) {
  const redisReply *r = (const redisReply *)reply;
  int err = r && r->type == REDIS_REPLY_ERROR;
  if (msg)
    *msg = err ? r->str : NULL;
  if (len)
    *len = err ? r->len : 0;
  return err;
}

void xf_reply_free(xf_reply *reply) {
  if (reply)
    freeReplyObject(reply);
}

void xf_reader_close(xf_reader *rd) {
  if (!rd)
    return;
  redisReaderFree(rd->r);
  free(rd);
}
