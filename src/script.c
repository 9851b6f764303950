/* EVALSHA -> NOSCRIPT -> SCRIPT LOAD -> retry once. */
#include <string.h>

#include "client.h"
#include "script.h"

static int load(xf_client *c, const xf__script *s) {
  const char *argv[] = {"SCRIPT", "LOAD", s->src};
  size_t lens[] = {6, 4, s->len};
  redisReply *r;
  int rc = xf__command(c, 3, argv, lens, &r);
  if (rc != XF_OK)
    return rc;
  if (r->type == REDIS_REPLY_ERROR)
    rc = xf__fail(c, XF_EREDIS, "SCRIPT LOAD %s: %s", s->name, r->str);
  else if (r->type != REDIS_REPLY_STRING || strcmp(r->str, s->sha) != 0)
    rc = xf__fail(c, XF_EPROTO, "SCRIPT LOAD %s: unexpected SHA1", s->name);
  freeReplyObject(r);
  return rc;
}

/* A script declaring no-writes runs as EVALSHA_RO: Redis 7 blocks plain
 * EVALSHA of any script under CLIENT PAUSE WRITE and on read-only replicas. */
static int read_only(const xf__script *s) {
  static const char shebang[] = "#!lua flags=no-writes\n";
  return s->len >= sizeof shebang - 1 && memcmp(s->src, shebang, sizeof shebang - 1) == 0;
}

static int evalsha(xf_client *c, const xf__script *s, const char *key, size_t keylen,
                   int nargs, const char **args, const size_t *lens, redisReply **reply) {
  int ro = read_only(s);
  const char *argv[4 + XF_SCRIPT_MAX_ARGS] = {ro ? "EVALSHA_RO" : "EVALSHA", s->sha, "1",
                                              key};
  size_t argl[4 + XF_SCRIPT_MAX_ARGS] = {ro ? 10u : 7u, 40, 1, keylen};
  for (int i = 0; i < nargs; i++) {
    argv[4 + i] = args[i];
    argl[4 + i] = lens[i];
  }
  return xf__command(c, 4 + nargs, argv, argl, reply);
}

static int is_error(const redisReply *r, const char *prefix) {
  return r->type == REDIS_REPLY_ERROR && strncmp(r->str, prefix, strlen(prefix)) == 0;
}

int xf__script_run(xf_client *c, int script, const char *key, size_t keylen, int nargs,
                   const char **args, const size_t *lens, redisReply **reply) {
  const xf__script *s = &xf__scripts[script];
  int rc = evalsha(c, s, key, keylen, nargs, args, lens, reply);
  if (rc == XF_OK && is_error(*reply, "NOSCRIPT")) {
    freeReplyObject(*reply);
    *reply = NULL;
    rc = load(c, s);
    if (rc == XF_OK)
      rc = evalsha(c, s, key, keylen, nargs, args, lens, reply);
  }
  if (rc != XF_OK)
    return rc;
  redisReply *r = *reply;
  if (r->type != REDIS_REPLY_ERROR)
    return XF_OK;
  rc = strstr(r->str, "WRONGTYPE") ? XF_EWRONGTYPE : XF_EREDIS;
  xf__fail(c, rc, "%s script: %s", s->name, r->str);
  c->stats.redis_errors++;
  freeReplyObject(r);
  *reply = NULL;
  return rc;
}
