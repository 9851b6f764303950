/* The connection setup's commands and the judgement of their replies. */
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "reply.h"
#include "setup.h"

static xf__cmd *next(xf__setup *s, xf__setup_kind kind) {
  xf__cmd *cmd = &s->cmd[s->n];
  memset(cmd, 0, sizeof *cmd);
  s->kind[s->n++] = kind;
  return cmd;
}

static void put(xf__cmd *cmd, const char *arg) {
  cmd->argv[cmd->argc] = arg;
  cmd->lens[cmd->argc++] = strlen(arg);
}

void xf__setup_build(const xf_client *c, int flags, xf__setup *s) {
  s->n = 0;
  if (c->password) { /* AUTH first: with requirepass, nothing else is allowed */
    xf__cmd *auth = next(s, XF__SETUP_AUTH);
    put(auth, "AUTH");
    put(auth, c->username ? c->username : "default");
    put(auth, c->password);
  }
  if (c->db != 0) {
    xf__cmd *select = next(s, XF__SETUP_SELECT);
    snprintf(select->scratch[0], sizeof select->scratch[0], "%d", c->db);
    put(select, "SELECT");
    put(select, select->scratch[0]);
  }
  if (flags & XF_SETUP_REPLICA)
    put(next(s, XF__SETUP_READONLY), "READONLY");
  /* A fresh server would otherwise answer each concurrent call's first
   * EVALSHA with NOSCRIPT, and each would load the script itself. read_many
   * is left out: only the blocking batch driver sends it. */
  for (int i = XF_SCRIPT_READ; (flags & XF_SETUP_SCRIPTS) && i < XF_SCRIPT_COUNT; i++)
    if (i != XF_SCRIPT_READ_MANY)
      xf__script_load_cmd(next(s, XF__SETUP_SCRIPT), i, NULL, 0);
  /* A server that needs a password refuses every command of a client that
   * sent none with NOAUTH: the setup asks it once, so that the connection
   * fails at connect time with XF_EAUTH (as a wrong password does) instead of
   * every call failing its own way. Any command above asks it too; else
   * HELLO (no arguments: the protocol stays RESP2), the handshake command,
   * which a server that lets the client in answers with what it is. */
  if (s->n == 0)
    put(next(s, XF__SETUP_PROBE), "HELLO");
}

void xf__setup_add_tracking(xf__setup *s, long long redirect_id) {
  xf__cmd *track = next(s, XF__SETUP_TRACKING);
  snprintf(track->scratch[0], sizeof track->scratch[0], "%lld", redirect_id);
  put(track, "CLIENT");
  put(track, "TRACKING");
  put(track, "on");
  put(track, "REDIRECT");
  put(track, track->scratch[0]);
}

static const char *name(xf__setup_kind kind) {
  static const char *const names[] = {"AUTH",        "SELECT",          "READONLY",
                                      "SCRIPT LOAD", "CLIENT TRACKING", "HELLO"};
  return names[kind];
}

/* The code an error reply (not NOAUTH) to kind gets. Only AUTH's refusal is
 * an authentication failure (and SELECT's: a db the user may not use): a busy
 * or loading server at connect time is a server that cannot serve now, so the
 * calls fail open instead of reporting a misconfiguration. */
static int refusal(xf__setup_kind kind, const xf__reply *r) {
  if (xf__reply_classify(r) == XF_REPLY_UNAVAILABLE)
    return XF_EUNAVAILABLE;
  if (kind == XF__SETUP_AUTH)
    return XF_EAUTH;
  if (kind == XF__SETUP_SELECT) /* a db the server does not have: a wrong option */
    return strstr(r->str, "cluster mode") || strstr(r->str, "out of range") ? XF_EINVAL
                                                                            : XF_EAUTH;
  return XF_EREDIS;
}

int xf__setup_judge(xf_client *c, xf__setup_kind kind, const xf__reply *r) {
  if (r->type != XF_REPLY_ERROR)
    return XF_OK;
  if (xf__reply_classify(r) == XF_REPLY_NOAUTH) /* whatever the command */
    return xf__fail(c, XF_EAUTH, "%s%s: %s",
                    c->password ? "" : "the server needs a password (options.password): ",
                    name(kind), r->str);
  if (kind == XF__SETUP_SCRIPT || kind == XF__SETUP_TRACKING || kind == XF__SETUP_PROBE)
    return XF_OK;
  int rc = refusal(kind, r);
  if (rc == XF_EINVAL && strstr(r->str, "cluster mode"))
    return xf__fail(c, rc, "Redis Cluster has only db 0; options.db is %d", c->db);
  if (rc == XF_EINVAL)
    return xf__fail(c, rc, "db %d: SELECT: %s", c->db, r->str);
  return xf__fail(c, rc, "%s: %s", name(kind), r->str);
}
