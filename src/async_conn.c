/* The event-loop driver's connection: one hiredis redisAsyncContext at a time,
 * set up with AUTH, SELECT and the scripts' SCRIPT LOAD ahead of any call's
 * command, opened again when a call needs it (unless the breaker is open), and
 * dropped by a watchdog when it stops answering: hiredis 0.14's async API has
 * no timeouts.
 *
 * hiredis runs every command's callback exactly once: with its reply, or with
 * NULL when the context is freed (a lost connection, a failed connect, our own
 * redisAsyncFree). A NULL reply is the flow's I/O-error input: the call fails
 * open through its loader. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "script.h"

/* Setup commands' callback data (a script's index otherwise). */
enum { SETUP_AUTH = -1, SETUP_SELECT = -2 };

/* ---- replies ------------------------------------------------------------------- */

/* hiredis 0.14 frees a reply when its callback returns; the flow keeps what it
 * is given, so it gets a copy. */
redisReply *xf__reply_copy(const redisReply *r) {
  redisReply *copy = calloc(1, sizeof *copy);
  if (!copy)
    return NULL;
  copy->type = r->type;
  copy->integer = r->integer;
  if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ||
      r->type == REDIS_REPLY_ERROR) {
    copy->str = malloc(r->len + 1);
    if (!copy->str) {
      free(copy);
      return NULL;
    }
    memcpy(copy->str, r->str, r->len);
    copy->str[r->len] = '\0';
    copy->len = r->len;
  } else if (r->type == REDIS_REPLY_ARRAY && r->elements > 0) {
    copy->element = calloc(r->elements, sizeof *copy->element);
    if (!copy->element) {
      free(copy);
      return NULL;
    }
    copy->elements = r->elements;
    for (size_t i = 0; i < r->elements; i++)
      if (r->element[i] && !(copy->element[i] = xf__reply_copy(r->element[i]))) {
        freeReplyObject(copy);
        return NULL;
      }
  }
  return copy;
}

/* ---- connection state ------------------------------------------------------------- */

/* A connection failed: remember why and open the breaker, as the blocking
 * client does. */
static void conn_failed(xf_async *ac, const char *what, const char *detail) {
  xf_client *c = ac->core;
  snprintf(c->conn_err, sizeof c->conn_err, "%s: %s", what, detail);
  c->stats.redis_errors++;
  if (c->breaker_ms >= 0)
    c->retry_after_ms = xf__now_ms() + c->breaker_ms;
}

static void on_connect(const redisAsyncContext *crac, int status) {
  redisAsyncContext *rac = (redisAsyncContext *)crac;
  xf_async *ac = rac->data;
  if (!ac || ac->rac != rac)
    return;
  if (status == REDIS_OK) {
    xf__async_enter(ac); /* leaving re-arms the watchdog: now a command timeout */
    ac->connected = 1;
    ac->progress_ms = xf__now_ms();
    if (!ac->core->unix_path)
      redisEnableKeepAlive(&rac->c);
    xf__async_leave(ac);
    return;
  }
  /* hiredis frees rac next; its calls' callbacks then run with NULL. */
  conn_failed(ac, "connect", rac->errstr ? rac->errstr : "failed");
  ac->rac = NULL;
  ac->usable = 0;
  rac->data = NULL;
}

static void on_disconnect(const redisAsyncContext *crac, int status) {
  redisAsyncContext *rac = (redisAsyncContext *)crac;
  (void)status;
  xf_async *ac = rac->data;
  if (!ac || ac->rac != rac)
    return;
  ac->rac = NULL;
  ac->usable = ac->dying = ac->connected = 0;
  ac->inflight = 0;
}

/* AUTH or SELECT refused: the connection is useless. Its calls' replies get
 * XF_EAUTH (as the blocking client's calls do) and it closes once they are in.
 * A failed SCRIPT LOAD is left to the flow's NOSCRIPT recovery. */
static void on_setup_reply(redisAsyncContext *rac, void *reply, void *what) {
  redisReply *r = reply;
  xf_async *ac = r ? rac->data : NULL;
  if (!ac || ac->rac != rac)
    return;
  ac->inflight--;
  ac->progress_ms = xf__now_ms();
  intptr_t step = (intptr_t)what;
  if (step >= 0 || r->type != REDIS_REPLY_ERROR || ac->setup_rc != XF_OK)
    return;
  ac->setup_rc = XF_EAUTH;
  conn_failed(ac, step == SETUP_AUTH ? "AUTH" : "SELECT", r->str);
  ac->usable = 0;
  redisAsyncDisconnect(rac);
}

static int queue(xf_async *ac, redisCallbackFn *fn, void *privdata, const xf__cmd *cmd) {
  ac->request.len = 0;
  if (xf__resp_append_cmd(&ac->request, cmd) != 0)
    return xf__fail(ac->core, XF_ENOMEM, "out of memory for a %d-argument command",
                    cmd->argc);
  if (redisAsyncFormattedCommand(ac->rac, fn, privdata, ac->request.data,
                                 ac->request.len) != REDIS_OK)
    return xf__fail(ac->core, XF_EIO, "the connection refuses commands: %s",
                    ac->rac->errstr && ac->rac->errstr[0] ? ac->rac->errstr : "closing");
  if (ac->inflight++ == 0)
    ac->progress_ms = xf__now_ms();
  return XF_OK;
}

static void put(xf__cmd *cmd, const char *arg) {
  cmd->argv[cmd->argc] = arg;
  cmd->lens[cmd->argc++] = strlen(arg);
}

/* AUTH, SELECT, then every script, ahead of any call's command: a fresh
 * server would otherwise answer each concurrent call's first EVALSHA with
 * NOSCRIPT and each would load the script itself. */
static int queue_setup(xf_async *ac) {
  xf_client *c = ac->core;
  xf__cmd cmd = {0};
  int rc = XF_OK;
  if (c->password) {
    put(&cmd, "AUTH");
    put(&cmd, c->username ? c->username : "default");
    put(&cmd, c->password);
    rc = queue(ac, on_setup_reply, (void *)(intptr_t)SETUP_AUTH, &cmd);
  }
  char db[16];
  if (rc == XF_OK && c->db != 0) {
    snprintf(db, sizeof db, "%d", c->db);
    cmd.argc = 0;
    put(&cmd, "SELECT");
    put(&cmd, db);
    rc = queue(ac, on_setup_reply, (void *)(intptr_t)SETUP_SELECT, &cmd);
  }
  for (intptr_t s = XF_SCRIPT_READ; rc == XF_OK && s <= XF_SCRIPT_DELETE; s++) {
    xf__script_load_cmd(&cmd, (int)s, NULL, 0);
    rc = queue(ac, on_setup_reply, (void *)s, &cmd);
  }
  return rc;
}

int xf__aconn_start(xf_async *ac) {
  xf_client *c = ac->core;
  redisAsyncContext *rac = c->unix_path ? redisAsyncConnectUnix(c->unix_path)
                                        : redisAsyncConnect(c->host, c->port);
  if (!rac)
    return xf__fail(c, XF_ENOMEM, "cannot allocate the Redis context");
  const char *where = c->unix_path ? c->unix_path : c->host;
  if (rac->err || ac->loop.attach(ac->loop.data, rac) != 0) {
    char detail[200];
    snprintf(detail, sizeof detail, "%s",
             rac->err ? rac->errstr : "cannot attach to the loop");
    redisAsyncFree(rac);
    conn_failed(ac, "connect", detail);
    return xf__fail(c, XF_ECONNECT, "connect to %s: %s", where, detail);
  }
  rac->data = ac;
  redisAsyncSetConnectCallback(rac, on_connect);
  redisAsyncSetDisconnectCallback(rac, on_disconnect);
  ac->rac = rac;
  ac->usable = 1;
  ac->dying = ac->connected = 0;
  ac->setup_rc = XF_OK;
  ac->inflight = 0;
  ac->progress_ms = xf__now_ms();
  return queue_setup(ac);
}

/* ---- calls' commands ------------------------------------------------------------ */

static void on_reply(redisAsyncContext *rac, void *reply, void *privdata) {
  xf__acall *k = privdata;
  k->sent = 0;
  xf_async *ac = k->ac;
  if (!ac) { /* canceled by xf_async_close */
    xf__acall_release(k);
    return;
  }
  int current = ac->rac == rac;
  int64_t now_ms = xf__now_ms();
  if (current && reply) {
    ac->inflight--;
    ac->progress_ms = now_ms;
  }
  if (ac->closing)
    return; /* the close cancels the call */
  int rc = XF_OK;
  redisReply *copy = NULL;
  if (!reply) {
    if (current && !ac->dying) { /* hiredis is freeing rac: no more sends on it */
      ac->dying = 1;
      ac->usable = 0;
      snprintf(ac->core->conn_err, sizeof ac->core->conn_err, "connection lost: %s",
               rac->errstr && rac->errstr[0] ? rac->errstr : "closed");
      ac->core->stats.redis_errors++;
    }
    rc = xf__fail(ac->core, XF_EIO, "%s", ac->core->conn_err);
  } else if (current && ac->setup_rc != XF_OK) {
    rc = xf__fail(ac->core, ac->setup_rc, "%s", ac->core->conn_err);
  } else if (!(copy = xf__reply_copy(reply))) {
    rc = xf__fail(ac->core, XF_ENOMEM, "out of memory for a reply");
  }
  xf__async_enter(ac);
  xf__async_advance(k, xf__flow_reply(&k->f, rc, copy, now_ms));
  xf__async_leave(ac);
}

int xf__aconn_send(xf__acall *k) {
  xf_async *ac = k->ac;
  xf_client *c = ac->core;
  if (!ac->rac) {
    if (c->breaker_ms >= 0 && xf__now_ms() < c->retry_after_ms)
      return xf__fail(c, XF_ECONNECT, "circuit open after: %s", c->conn_err);
    int rc = xf__aconn_start(ac);
    if (rc != XF_OK)
      return rc;
  }
  if (!ac->usable)
    return xf__fail(c, XF_ECONNECT, "connection closing after: %s", c->conn_err);
  int rc = queue(ac, on_reply, k, &k->f.cmd);
  if (rc == XF_OK)
    k->sent = 1;
  return rc;
}

/* ---- the watchdog ------------------------------------------------------------------ */

int64_t xf__aconn_deadline(const xf_async *ac) {
  if (!ac->rac || ac->dying || ac->inflight == 0)
    return INT64_MAX;
  const xf_client *c = ac->core;
  return ac->progress_ms + (ac->connected ? c->command_timeout_ms : c->connect_timeout_ms);
}

void xf__aconn_check(xf_async *ac, int64_t now_ms) {
  if (now_ms < xf__aconn_deadline(ac))
    return;
  /* The loop may have been busy (a slow callback) while the replies were
   * arriving: take what is there before judging. */
  redisAsyncHandleRead(ac->rac);
  if (xf__now_ms() < xf__aconn_deadline(ac) || ac->closing)
    return;
  redisAsyncContext *rac = ac->rac;
  conn_failed(ac, ac->connected ? "command" : "connect", "timed out");
  ac->rac = NULL;
  ac->usable = ac->connected = 0;
  ac->inflight = 0;
  rac->data = NULL;
  redisAsyncFree(rac); /* its calls' callbacks run now, with NULL */
}

void xf__aconn_close(xf_async *ac) {
  redisAsyncContext *rac = ac->rac;
  if (!rac)
    return;
  ac->rac = NULL;
  rac->data = NULL;
  if (!ac->dying) /* else hiredis is freeing it and calling us from there */
    redisAsyncFree(rac);
}
