/* The embedded Lua scripts and how they are called. */
#ifndef XF_SCRIPT_H
#define XF_SCRIPT_H

#include <stddef.h>

typedef struct xf__script {
  const char *name;
  const char *src;
  size_t len;
  const char *sha; /* SHA1 of src, hex, computed at build time */
} xf__script;

/* Generated from the lua/ scripts, in the order of XF_LUA in CMakeLists.txt. */
extern const xf__script xf__scripts[];

enum {
  XF_SCRIPT_READ,
  XF_SCRIPT_LEASE,
  XF_SCRIPT_WRITE,
  XF_SCRIPT_RELEASE,
  XF_SCRIPT_DELETE
};

#define XF_SCRIPT_MAX_ARGS 8

struct xf_client;
struct redisReply;

/* EVALSHA script with one key and nargs arguments; on NOSCRIPT loads it and
 * retries once. Returns XF_OK with a reply that is not an error reply (caller
 * frees it); a Redis error reply becomes XF_EWRONGTYPE or XF_EREDIS with the
 * message on the client. */
int xf__script_run(struct xf_client *c, int script, const char *key, size_t keylen,
                   int nargs, const char **args, const size_t *lens,
                   struct redisReply **reply);

#endif
