/* The hit path's read: one plain HMGET of the entry's fields (no script), so
 * a hit costs Redis what a plain read costs. The entry is judged here as
 * lua/entry_read.lua judges it, with the server's time known only within
 * [lo, hi] (clock.h): every judgment that depends on it takes the side that
 * cannot serve a value past its expiry (remaining life counted from hi), nor
 * skip a lease that may be dead (live only when its deadline is past hi). */
#include <string.h>

#include "clock.h"
#include "entry.h"
#include "reply.h"
#include "script.h"

static const char *const fields[] = {"v", "d", "e", "s", "l", "n", "f"};
#define NFIELDS (int)(sizeof fields / sizeof fields[0])

void xf__entry_fields_cmd(xf__cmd *cmd, const char *key, size_t keylen) {
  xf__cmd_begin(cmd, key, keylen);
  cmd->argc = 2 + NFIELDS;
  cmd->argv[0] = "HMGET";
  cmd->lens[0] = 5;
  cmd->argv[1] = key;
  cmd->lens[1] = keylen;
  for (int i = 0; i < NFIELDS; i++) {
    cmd->argv[2 + i] = fields[i];
    cmd->lens[2 + i] = 1;
  }
}

const xf__cmd *xf__entry_read_as(const xf__cmd *cmd, const xf__clock *k, int64_t now_ms,
                                 xf__cmd *script) {
  if (!cmd->plain_out)
    return cmd;
  if (xf__clock_fresh(k, now_ms)) {
    *cmd->plain_out = 1;
    return cmd;
  }
  if (cmd->more_argc) /* an MGET of the entry and other keys: the script on them all */
    xf__script_cmd_keys(script, XF_SCRIPT_READ, cmd->more_argc, cmd->more_argv,
                        cmd->more_lens);
  else
    xf__entry_read_cmd(script, cmd->key, cmd->keylen);
  script->on_master = cmd->on_master;
  script->clock_out = cmd->clock_out;
  script->ask_node = cmd->ask_node;
  script->asked_out = cmd->asked_out;
  *cmd->plain_out = 0;
  return script;
}

#define MAX_DELTA_US ((int64_t)1 << 40)
#define MAX_SPAN_MS ((int64_t)1 << 41)
#define DAY_MS 86400000

/* A number as the scripts write them: decimal digits, at most max. -1 when
 * absent (r NIL); -2 when malformed. */
static int64_t judge_uint(const xf__reply *r, int64_t max) {
  if (r->type == XF_REPLY_NIL)
    return -1;
  if (r->len == 0 || r->len > 18)
    return -2;
  int64_t n = 0;
  for (size_t i = 0; i < r->len; i++) {
    if (r->str[i] < '0' || r->str[i] > '9')
      return -2;
    n = n * 10 + (r->str[i] - '0');
  }
  return n <= max ? n : -2;
}

/* The lease's deadline: the digits after its last ':'. */
static int64_t lease_deadline(const xf__reply *l, int64_t max) {
  const char *colon = NULL;
  for (size_t i = 0; i < l->len; i++)
    if (l->str[i] == ':')
      colon = l->str + i;
  if (!colon)
    return -2;
  xf__reply digits = {.type = XF_REPLY_STRING,
                      .str = (char *)colon + 1,
                      .len = l->len - (size_t)(colon + 1 - l->str)};
  int64_t n = judge_uint(&digits, max);
  return n < 0 ? -2 : n;
}

int xf__entry_parse_fields(xf__runtime *rt, xf__reply *r, int64_t lo, int64_t hi,
                           xf__entry *out) {
  memset(out, 0, sizeof *out);
  out->reply = r;
  if (r->type != XF_REPLY_ARRAY || r->elements != (size_t)NFIELDS) {
    xf__entry_free(out);
    return xf__rt_fail(rt, XF_EPROTO, "HMGET of an entry: a reply of an unexpected shape");
  }
  xf__reply **f = r->element;
  for (int i = 0; i < NFIELDS; i++)
    if (f[i]->type != XF_REPLY_STRING && f[i]->type != XF_REPLY_NIL) {
      xf__entry_free(out);
      return xf__rt_fail(rt, XF_EPROTO, "HMGET of an entry: field %s of an unexpected type",
                         fields[i]);
    }
  int64_t s = judge_uint(f[3], hi + DAY_MS);
  int bad = s == -2;
  out->start_ms = s > 0 ? s : 0;
  if (f[4]->type == XF_REPLY_STRING) {
    int64_t deadline = lease_deadline(f[4], hi + ((int64_t)1 << 40));
    bad |= deadline < 0;
    out->lease_live = deadline > hi;
  }
  out->now_ms = lo;      /* dates what follows no later than the read */
  out->now_late_ms = hi; /* a load that ended past it ended after the read */
  int64_t nothing =
      judge_uint(f[6], hi + DAY_MS); /* as the scripts: none unless as written */
  out->nothing_ms = nothing > 0 ? nothing : 0;
  int has_value = f[0]->type == XF_REPLY_STRING;
  int64_t d = 0, e = -1;
  if (has_value) {
    d = judge_uint(f[1], MAX_DELTA_US);
    bad |= d == -2;
    e = judge_uint(f[2], lo + MAX_SPAN_MS);
    bad |= e < 0 || e <= hi - MAX_SPAN_MS;
    bad |= f[5]->type == XF_REPLY_STRING && (f[5]->len != 1 || f[5]->str[0] != '1');
  }
  if (bad || !has_value) {
    out->malformed = bad;
    if (bad)
      rt->stats.malformed++;
    return XF_OK;
  }
  out->value = f[0]->str;
  out->len = f[0]->len;
  out->delta_us = d > 0 ? d : 0;
  out->expiry_ms = e;
  out->remaining_ms = e - hi; /* within the clock's error of e: expiring */
  out->negative = f[5]->type == XF_REPLY_STRING;
  return XF_OK;
}
