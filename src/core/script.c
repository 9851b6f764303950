/* The embedded Lua scripts: encoding, SCRIPT LOAD, what error replies mean
 * (NOSCRIPT is recovered by the flow, flow.c). */
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "reply.h"
#include "script.h"

/* A script declaring no-writes runs as EVALSHA_RO: Redis 7 blocks plain
 * EVALSHA of any script under CLIENT PAUSE WRITE and on read-only replicas. */
static int read_only(const xf__script *s) {
  static const char shebang[] = "#!lua flags=no-writes\n";
  return s->len >= sizeof shebang - 1 && memcmp(s->src, shebang, sizeof shebang - 1) == 0;
}

static void put(xf__cmd *cmd, const char *arg, size_t len) {
  cmd->argv[cmd->argc] = arg;
  cmd->lens[cmd->argc++] = len;
}

void xf__script_cmd(xf__cmd *cmd, int script, const char *key, size_t keylen, int nargs,
                    const char **args, const size_t *lens) {
  const xf__script *s = &xf__scripts[script];
  int ro = read_only(s);
  xf__cmd_begin(cmd, key, keylen);
  put(cmd, ro ? "EVALSHA_RO" : "EVALSHA", ro ? 10 : 7);
  put(cmd, s->sha, 40);
  put(cmd, "1", 1);
  put(cmd, key, keylen);
  for (int i = 0; i < nargs && i < XF_SCRIPT_MAX_ARGS; i++)
    put(cmd, args[i], lens[i]);
}

void xf__script_cmd_keys(xf__cmd *cmd, int script, size_t nkeys, const char *const *keys,
                         const size_t *keylens) {
  const xf__script *s = &xf__scripts[script];
  int ro = read_only(s);
  xf__cmd_begin(cmd, nkeys ? keys[0] : NULL, nkeys ? keylens[0] : 0);
  put(cmd, ro ? "EVALSHA_RO" : "EVALSHA", ro ? 10 : 7);
  put(cmd, s->sha, 40);
  int n = snprintf(cmd->scratch[0], sizeof cmd->scratch[0], "%zu", nkeys);
  put(cmd, cmd->scratch[0], (size_t)n);
  cmd->more_argc = nkeys;
  cmd->more_argv = keys;
  cmd->more_lens = keylens;
}

void xf__script_load_cmd(xf__cmd *cmd, int script, const char *key, size_t keylen) {
  const xf__script *s = &xf__scripts[script];
  xf__cmd_begin(cmd, key, keylen);
  put(cmd, "SCRIPT", 6);
  put(cmd, "LOAD", 4);
  put(cmd, s->src, s->len);
}

static int is_error(const xf__reply *r, const char *prefix) {
  return r->type == XF_REPLY_ERROR && strncmp(r->str, prefix, strlen(prefix)) == 0;
}

/* Replies of a server that cannot serve the command right now, whatever it
 * is (a long script, a replica loading its dataset, a failover...): callers
 * fail open on them as on a connection failure. */
static int is_unavailable(const xf__reply *r) {
  static const char *const prefixes[] = {"BUSY",       "LOADING",  "MASTERDOWN",
                                         "READONLY",   "OOM",      "MISCONF",
                                         "NOREPLICAS", "TRYAGAIN", "CLUSTERDOWN"};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if (is_error(r, prefixes[i]))
      return 1;
  return 0;
}

xf__reply_kind xf__reply_classify(const xf__reply *r) {
  if (r->type != XF_REPLY_ERROR)
    return XF_REPLY_VALUE;
  if (is_error(r, "NOSCRIPT"))
    return XF_REPLY_NOSCRIPT;
  if (is_error(r, "MOVED ") || is_error(r, "ASK "))
    return XF_REPLY_REDIRECT;
  if (is_unavailable(r))
    return XF_REPLY_UNAVAILABLE;
  /* Redis answers an unauthenticated client's command with NOAUTH, and one
   * longer than it accepts before AUTH with "ERR Protocol error:
   * unauthenticated multibulk length" (then closes the connection). */
  if (is_error(r, "NOAUTH") || is_error(r, "ERR Protocol error: unauthenticated"))
    return XF_REPLY_NOAUTH;
  if (is_error(r, "NOPERM"))
    return XF_REPLY_NOPERM;
  if (strstr(r->str, "WRONGTYPE"))
    return XF_REPLY_WRONGTYPE;
  return XF_REPLY_HARD;
}

/* The code an error reply ends a call with. */
static int error_code(const xf__reply *r) {
  switch (xf__reply_classify(r)) {
  case XF_REPLY_UNAVAILABLE:
    return XF_EUNAVAILABLE;
  case XF_REPLY_NOAUTH:
    return XF_EAUTH;
  case XF_REPLY_NOPERM:
    return XF_ENOPERM;
  case XF_REPLY_WRONGTYPE:
    return XF_EWRONGTYPE;
  default:
    return XF_EREDIS;
  }
}

int xf__script_by_sha(const char *sha, size_t len) {
  for (int i = 0; i < XF_SCRIPT_COUNT; i++)
    if (len == 40 && memcmp(xf__scripts[i].sha, sha, 40) == 0)
      return i;
  return -1;
}

int xf__script_missing(const xf__reply *r) {
  return xf__reply_classify(r) == XF_REPLY_NOSCRIPT;
}

/* An error reply to a script's call or to its SCRIPT LOAD (what, e.g. "SCRIPT
 * LOAD "): its code, the message on the client; frees r. */
static int error_reply(xf__runtime *rt, const char *what, int script, xf__reply *r) {
  int rc = error_code(r);
  xf__rt_fail(rt, rc, "%s%s script: %s", what, xf__scripts[script].name, r->str);
  rt->stats.redis_errors++;
  xf__reply_free(r);
  return rc;
}

int xf__script_loaded(xf__runtime *rt, int script, xf__reply *r) {
  const xf__script *s = &xf__scripts[script];
  if (r->type == XF_REPLY_ERROR) /* BUSY, LOADING: unavailable, as for the call */
    return error_reply(rt, "SCRIPT LOAD of the ", script, r);
  int rc = XF_OK;
  if (r->type != XF_REPLY_STRING || strcmp(r->str, s->sha) != 0)
    rc = xf__rt_fail(rt, XF_EPROTO, "SCRIPT LOAD %s: unexpected SHA1", s->name);
  xf__reply_free(r);
  return rc;
}

int xf__script_error(xf__runtime *rt, int script, xf__reply *r) {
  return error_reply(rt, "", script, r);
}
