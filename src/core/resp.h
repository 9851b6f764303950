/* RESP request encoding into a reusable buffer (hiredis 0.14 formats each
 * command with sdscatfmt, which costs more than the rest of a cache hit). */
#ifndef XF_RESP_H
#define XF_RESP_H

#include <stddef.h>
#include <stdint.h>

typedef struct xf__buf {
  char *data;
  size_t len, cap;
} xf__buf;

/* One command to send, as argv. It may point into its own scratch space
 * (formatted numbers), so it must not be copied once filled. key is the key
 * whose node must run it (Redis Cluster routes by its slot): the command's
 * key, or for a SCRIPT LOAD the key of the command it recovers; NULL = any
 * node. */
#define XF_CMD_MAX_ARGS 14
typedef struct xf__cmd {
  const char *key;
  size_t keylen;
  int on_master; /* a read that must see the latest write: never on a replica */
  int argc;
  const char *argv[XF_CMD_MAX_ARGS];
  size_t lens[XF_CMD_MAX_ARGS];
  char scratch[4][24];
  /* Arguments sent after argv (a command on many keys: read_many's KEYS);
   * more_argc 0 = none. Whoever fills argv sets it. */
  size_t more_argc;
  const char *const *more_argv;
  const size_t *more_lens;
  /* Where the transport that got the reply says whose clock estimate
   * (clock.h) goes with it: *clock_out = its connection's. NULL = not asked
   * (whoever fills argv clears it; the flow asks). */
  struct xf__clock **clock_out;
  /* Cluster routing across a flow's two sends of one read (route.c). In:
   * ask_node > 0 sends the command to node ask_node - 1 (an index in
   * xf__routes.nodes) with ASKING first, as the ASK that led the previous
   * command there did (the read script after an HMGET whose answering node's
   * clock was unknown: else the slot's owner answers ASK a second time).
   * Out: *asked_out = node + 1 when the reply came after ASKING to that node,
   * else 0 (NULL = not asked). Whoever fills argv clears both. */
  int ask_node;
  int *asked_out;
  /* A plain read (the flow's HMGET) that needs the answering server's clock
   * (clock.h): non-NULL asks the transport, as it puts the command on a
   * connection, to send the read script on key in its place when that
   * connection's estimate is not fresh (xf__clock_fresh: xf__entry_read_as),
   * and to say which went: *plain_out 1 the HMGET, 0 the script. Whoever
   * fills argv clears it. */
  int *plain_out;
  /* Where the transport that got the reply says whether (and under which
   * invalidation connection) its connection is tracked for the near cache
   * (near.h): *track_out = its connection's ticket; a transport that does
   * not track leaves it as it was (node NULL: the read is not kept). NULL =
   * not asked. Whoever fills argv clears it. */
  struct xf__track *track_out;
  /* Where the transport says which stream (one connection, from its connect
   * to its end) it put the command on: *stream_out = that stream's number,
   * unique among the client's (link.h), set when it is queued there; a
   * transport that does not know leaves it as it was. NULL = not asked.
   * Whoever fills argv clears it. */
  uint64_t *stream_out;
} xf__cmd;

/* Starts a command on key (NULL: none): no arguments yet, and every routing
 * and clock field cleared ("whoever fills argv clears it"), in one place. */
static inline void xf__cmd_begin(xf__cmd *cmd, const char *key, size_t keylen) {
  cmd->key = key;
  cmd->keylen = keylen;
  cmd->on_master = 0;
  cmd->argc = 0;
  cmd->more_argc = 0;
  cmd->clock_out = NULL;
  cmd->plain_out = NULL;
  cmd->ask_node = 0;
  cmd->asked_out = NULL;
  cmd->track_out = NULL;
  cmd->stream_out = NULL;
}

/* Encodes argv as a RESP array of bulk strings into buf (replacing its
 * contents). Returns 0, or -1 when out of memory. */
int xf__resp_encode(xf__buf *buf, int argc, const char *const *argv, const size_t *lens);

/* The same, appended to buf's contents (a pipeline of commands). */
int xf__resp_append(xf__buf *buf, int argc, const char *const *argv, const size_t *lens);

/* Appends cmd (argv, then more_argv) to buf's contents. 0, or -1 when out of
 * memory. */
int xf__resp_append_cmd(xf__buf *buf, const xf__cmd *cmd);

void xf__buf_free(xf__buf *buf);

#endif
