/* The embedded Lua scripts: how a call is encoded (EVALSHA / EVALSHA_RO), how
 * a missing script is loaded (NOSCRIPT -> SCRIPT LOAD -> retry), and what an
 * error reply means. No I/O here. */
#ifndef XF_SCRIPT_H
#define XF_SCRIPT_H

#include <stddef.h>

#include "flow_env.h"
#include "resp.h"

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
  XF_SCRIPT_DELETE,
  XF_SCRIPT_READ_MANY,
  XF_SCRIPT_TAG_READ,
  XF_SCRIPT_TAG_BUMP,
  XF_SCRIPT_RENEW,
  XF_SCRIPT_TOUCH,
  XF_SCRIPT_COUNT
};

#define XF_SCRIPT_MAX_ARGS 10

struct xf_reply;

/* Fills cmd with the call of script on key with nargs arguments (pointers
 * kept: they must outlive the send). A script declaring no-writes runs as
 * EVALSHA_RO. */
void xf__script_cmd(xf__cmd *cmd, int script, const char *key, size_t keylen, int nargs,
                    const char **args, const size_t *lens);

/* Fills cmd with the call of script on nkeys keys and no arguments (the
 * arrays are kept: they must outlive the send). cmd->key is keys[0]: in Redis
 * Cluster every key must be in its slot. */
void xf__script_cmd_keys(xf__cmd *cmd, int script, size_t nkeys, const char *const *keys,
                         const size_t *keylens);

/* Fills cmd with SCRIPT LOAD of script, routed to the node serving key (the
 * key of the command that got NOSCRIPT; NULL = any node). */
void xf__script_load_cmd(xf__cmd *cmd, int script, const char *key, size_t keylen);

/* The script whose SHA1 is sha (len bytes), or -1. */
int xf__script_by_sha(const char *sha, size_t len);

/* What a reply means for the command it answers: the one classification of
 * error replies, used by every driver and router (through the functions
 * below, or directly). */
typedef enum xf__reply_kind {
  XF_REPLY_VALUE,       /* not an error reply */
  XF_REPLY_NOSCRIPT,    /* the script must be loaded first: SCRIPT LOAD, then again */
  XF_REPLY_REDIRECT,    /* Redis Cluster MOVED / ASK: another node must run it */
  XF_REPLY_UNAVAILABLE, /* the server cannot run it now (BUSY, LOADING, MASTERDOWN,
                           READONLY, OOM, MISCONF, NOREPLICAS, TRYAGAIN,
                           CLUSTERDOWN): XF_EUNAVAILABLE, fail open */
  XF_REPLY_NOAUTH,      /* the connection is not authenticated (NOAUTH, or the
                           protocol error Redis answers an unauthenticated
                           client's long command with): XF_EAUTH */
  XF_REPLY_NOPERM,      /* XF_ENOPERM */
  XF_REPLY_WRONGTYPE,   /* XF_EWRONGTYPE */
  XF_REPLY_HARD         /* any other error reply: XF_EREDIS */
} xf__reply_kind;

xf__reply_kind xf__reply_classify(const struct xf_reply *r);

/* Whether r is Redis' NOSCRIPT error (the script must be loaded first). */
int xf__script_missing(const struct xf_reply *r);

/* Checks the reply to SCRIPT LOAD and frees it: XF_OK, or an error code with
 * the message on the client: an error reply gets xf__script_error's code (a
 * busy or loading server is XF_EUNAVAILABLE, as for the call itself). */
int xf__script_loaded(xf__runtime *rt, int script, struct xf_reply *r);

/* The code for an error reply to script (xf__reply_classify), with the
 * message on the client; frees r: XF_EUNAVAILABLE, XF_EAUTH, XF_ENOPERM,
 * XF_EWRONGTYPE, else XF_EREDIS. */
int xf__script_error(xf__runtime *rt, int script, struct xf_reply *r);

#endif
