/* The embedded Lua scripts: encoding, NOSCRIPT recovery, error replies. */
#include <stdio.h>
#include <string.h>

#include "client.h"
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
  cmd->key = key;
  cmd->keylen = keylen;
  cmd->argc = 0;
  cmd->more_argc = 0;
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
  cmd->key = nkeys ? keys[0] : NULL;
  cmd->keylen = nkeys ? keylens[0] : 0;
  cmd->argc = 0;
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
  cmd->key = key;
  cmd->keylen = keylen;
  cmd->argc = 0;
  cmd->more_argc = 0;
  put(cmd, "SCRIPT", 6);
  put(cmd, "LOAD", 4);
  put(cmd, s->src, s->len);
}

static int is_error(const redisReply *r, const char *prefix) {
  return r->type == REDIS_REPLY_ERROR && strncmp(r->str, prefix, strlen(prefix)) == 0;
}

int xf__script_by_sha(const char *sha, size_t len) {
  for (int i = 0; i < XF_SCRIPT_COUNT; i++)
    if (len == 40 && memcmp(xf__scripts[i].sha, sha, 40) == 0)
      return i;
  return -1;
}

int xf__script_missing(const redisReply *r) { return is_error(r, "NOSCRIPT"); }

int xf__script_loaded(xf_client *c, int script, redisReply *r) {
  const xf__script *s = &xf__scripts[script];
  int rc = XF_OK;
  if (r->type == REDIS_REPLY_ERROR)
    rc = xf__fail(c, XF_EREDIS, "SCRIPT LOAD %s: %s", s->name, r->str);
  else if (r->type != REDIS_REPLY_STRING || strcmp(r->str, s->sha) != 0)
    rc = xf__fail(c, XF_EPROTO, "SCRIPT LOAD %s: unexpected SHA1", s->name);
  freeReplyObject(r);
  return rc;
}

/* Replies of a server that cannot serve the command right now, whatever it
 * is: the flow fails open on them as on a connection failure. */
static int is_unavailable(const redisReply *r) {
  static const char *const prefixes[] = {"BUSY",       "LOADING",  "MASTERDOWN",
                                         "READONLY",   "OOM",      "MISCONF",
                                         "NOREPLICAS", "TRYAGAIN", "CLUSTERDOWN"};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
    if (is_error(r, prefixes[i]))
      return 1;
  return 0;
}

int xf__script_error(xf_client *c, int script, redisReply *r) {
  int rc = is_unavailable(r)             ? XF_EUNAVAILABLE
           : is_error(r, "NOPERM")       ? XF_ENOPERM
           : strstr(r->str, "WRONGTYPE") ? XF_EWRONGTYPE
                                         : XF_EREDIS;
  xf__fail(c, rc, "%s script: %s", xf__scripts[script].name, r->str);
  c->stats.redis_errors++;
  freeReplyObject(r);
  return rc;
}

int xf__script_run(xf_client *c, int script, const xf__cmd *call, redisReply **reply) {
  xf__cmd load;
  int rc = xf__command(c, call, reply);
  if (rc == XF_OK && xf__script_missing(*reply)) {
    freeReplyObject(*reply);
    *reply = NULL;
    xf__script_load_cmd(&load, script, call->key, call->keylen);
    rc = xf__command(c, &load, reply);
    if (rc == XF_OK)
      rc = xf__script_loaded(c, script, *reply);
    *reply = NULL;
    if (rc == XF_OK)
      rc = xf__command(c, call, reply);
  }
  if (rc != XF_OK || (*reply)->type != REDIS_REPLY_ERROR)
    return rc;
  rc = xf__script_error(c, script, *reply);
  *reply = NULL;
  return rc;
}
