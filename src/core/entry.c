/* The entry protocol: one Lua script per operation; calls encoded and
 * replies parsed here. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "entry.h"
#include "reply.h"
#include "script.h"

void xf__entry_free(xf__entry *e) {
  if (e->reply)
    xf__reply_free(e->reply);
  memset(e, 0, sizeof *e);
}

/* ---- encode ------------------------------------------------------------------ */

/* Formats v into the cmd's scratch slot i and returns it. */
static const char *number(xf__cmd *cmd, int i, int64_t v) {
  snprintf(cmd->scratch[i], sizeof cmd->scratch[i], "%" PRId64, v);
  return cmd->scratch[i];
}

static void script_cmd(xf__cmd *cmd, int script, const char *key, size_t keylen, int nargs,
                       const char **args) {
  size_t lens[XF_SCRIPT_MAX_ARGS];
  for (int i = 0; i < nargs; i++)
    lens[i] = strlen(args[i]);
  xf__script_cmd(cmd, script, key, keylen, nargs, args, lens);
}

void xf__entry_read_cmd(xf__cmd *cmd, const char *key, size_t keylen) {
  xf__script_cmd(cmd, XF_SCRIPT_READ, key, keylen, 0, NULL, NULL);
}

/* The scripts' format argument: what a new entry is (entry.h). */
static const char *format_arg(int format) { return format == XF_ENTRY_STRING ? "2" : "1"; }

void xf__entry_lease_cmd(xf__cmd *cmd, const char *key, size_t keylen, const char *token,
                         int64_t lease_ms, int64_t seen_expiry_ms, int64_t first_read_ms,
                         int format) {
  const char *args[] = {token, number(cmd, 0, lease_ms), number(cmd, 1, seen_expiry_ms),
                        number(cmd, 2, first_read_ms > 0 ? first_read_ms : 0),
                        format_arg(format)};
  script_cmd(cmd, XF_SCRIPT_LEASE, key, keylen, 5, args);
}

void xf__entry_write_cmd(xf__cmd *cmd, const char *key, size_t keylen, const xf__write *w,
                         int format) {
  const char *args[] = {w->token,
                        w->data ? w->data : "",
                        w->delta_us >= 0 ? number(cmd, 0, w->delta_us) : "",
                        number(cmd, 1, w->ttl_ms),
                        number(cmd, 2, w->keep_ms),
                        w->start_ms >= 0 ? number(cmd, 3, w->start_ms) : "",
                        w->kind == XF_WRITE_GONE        ? "2"
                        : w->kind == XF_WRITE_NOT_FOUND ? "1"
                        : w->zstd                       ? "3"
                                                        : "0",
                        format_arg(format),
                        w->tags ? (const char *)w->tags : "",
                        w->validator ? (const char *)w->validator : ""};
  size_t lens[10];
  for (int i = 0; i < 8; i++)
    lens[i] = i == 1 ? w->len : strlen(args[i]);
  lens[8] = w->tags ? w->tags_len : 0;
  lens[9] = w->validator ? w->validator_len : 0;
  xf__script_cmd(cmd, XF_SCRIPT_WRITE, key, keylen, 10, args, lens);
}

void xf__entry_release_cmd(xf__cmd *cmd, const char *key, size_t keylen, const char *token,
                           int64_t nothing_keep_ms, int64_t hold_ms) {
  const char *args[] = {token, number(cmd, 0, nothing_keep_ms > 0 ? nothing_keep_ms : 0),
                        number(cmd, 1, hold_ms > 0 ? hold_ms : 0)};
  script_cmd(cmd, XF_SCRIPT_RELEASE, key, keylen, 3, args);
}

void xf__entry_renew_cmd(xf__cmd *cmd, const char *key, size_t keylen, const char *token,
                         int64_t lease_ms) {
  const char *args[] = {token, number(cmd, 0, lease_ms)};
  script_cmd(cmd, XF_SCRIPT_RENEW, key, keylen, 2, args);
}

void xf__entry_touch_cmd(xf__cmd *cmd, const char *key, size_t keylen, const xf__touch *t) {
  const char *args[] = {t->token,
                        number(cmd, 0, t->seen_e_ms),
                        number(cmd, 1, t->ttl_ms),
                        number(cmd, 2, t->keep_ms),
                        t->start_ms < 0 ? "" : number(cmd, 3, t->start_ms),
                        t->tags ? (const char *)t->tags : ""};
  size_t lens[6];
  for (int i = 0; i < 5; i++)
    lens[i] = strlen(args[i]);
  lens[5] = t->tags ? t->tags_len : 0;
  xf__script_cmd(cmd, XF_SCRIPT_TOUCH, key, keylen, 6, args, lens);
}

void xf__entry_delete_cmd(xf__cmd *cmd, const char *key, size_t keylen,
                          int64_t tombstone_ms, int format) {
  const char *args[] = {number(cmd, 0, tombstone_ms), format_arg(format)};
  script_cmd(cmd, XF_SCRIPT_DELETE, key, keylen, 2, args);
}

void xf__entry_read_many_cmd(xf__cmd *cmd, size_t nkeys, const char *const *keys,
                             const size_t *keylens) {
  xf__script_cmd_keys(cmd, XF_SCRIPT_READ_MANY, nkeys, keys, keylens);
}

/* The reply string of r (or of its elements, one level down) that holds p. */
static xf__reply *holder(xf__reply *r, const char *p) {
  if (r->type == XF_REPLY_STRING)
    return r->str && p >= r->str && p <= r->str + r->len ? r : NULL;
  for (size_t i = 0; r->type == XF_REPLY_ARRAY && i < r->elements; i++) {
    xf__reply *el = r->element[i];
    if (el && el->type == XF_REPLY_STRING && el->str && p >= el->str &&
        p <= el->str + el->len)
      return el;
  }
  return NULL;
}

char *xf__entry_take_value(xf__entry *e) {
  xf__reply *s = e->reply && e->value ? holder(e->reply, e->value) : NULL;
  if (!s)
    return NULL;
  char *buf = s->str;
  if (e->value != buf) /* format 2: the header goes, the value moves up */
    memmove(buf, e->value, e->len);
  buf[e->len] = '\0';
  s->str = NULL;
  s->len = 0;
  e->value = NULL;
  return buf;
}

void xf__entry_token(const xf__config *cfg, xf__runtime *rt, char token[40]) {
  snprintf(token, 40, "%016" PRIx64 "-%" PRIu64, cfg->id, ++rt->lease_count);
}

/* ---- parse ------------------------------------------------------------------- */

static int is_int(const xf__reply *r) { return r->type == XF_REPLY_INTEGER; }

/* Bounds the scripts keep to (lua/entry_read.lua): anything outside is not
 * from them, and would overflow the arithmetic of the flow. */
#define MAX_DELTA_US ((int64_t)1 << 40)
#define MAX_SPAN_MS ((int64_t)1 << 41)
#define MAX_CLOCK_MS ((int64_t)1 << 50)

static int out_of_range(int64_t v, int64_t min, int64_t max) { return v < min || v > max; }

/* How many fields read.lua's reply has (lua/entry_read.lua's read_entry):
 * a ninth, the entry's s, and a tenth, its validator, may follow (lease.lua's
 * newer value has neither). */
#define READ_FIELDS 8

/* Whether the fields at el, of the right types, are values read.lua gives:
 * {value, delta_us, remaining_ms, lease_live, negative (2: the value is a
 * zstd frame), expiry_ms, nothing_ms, tags} or {nil, 0, 0, lease_live, malformed, now_ms,
 * nothing_ms, ""}. */
static int in_range(xf__reply **el, int has_value) {
  if (out_of_range(el[1]->integer, 0, MAX_DELTA_US) ||
      out_of_range(el[6]->integer, 0, MAX_CLOCK_MS) ||
      out_of_range(el[2]->integer, -MAX_SPAN_MS, MAX_SPAN_MS) ||
      out_of_range(el[5]->integer, 0, MAX_CLOCK_MS) ||
      out_of_range(el[5]->integer - el[2]->integer, 0, MAX_CLOCK_MS) ||
      out_of_range(el[3]->integer, 0, 1) ||
      out_of_range(el[4]->integer, 0, has_value ? 2 : 1))
    return 0;
  return has_value || (el[1]->integer | el[2]->integer | (long long)el[7]->len) == 0;
}

/* Parses the fields starting at element `at` of r, taking ownership of r.
 * A reply of another shape is XF_EPROTO. A reply of the right shape whose
 * numbers are out of range, or read.lua's "malformed" miss, is a malformed
 * entry: a miss, never an error, so that an entry xfetch did not write
 * cannot stop its key from being recomputed and overwritten. */
static int parse_entry(xf__runtime *rt, xf__reply *r, size_t at, xf__entry *out) {
  memset(out, 0, sizeof *out);
  out->reply = r;
  if (r->type != XF_REPLY_ARRAY || r->elements < at + READ_FIELDS ||
      r->elements > at + READ_FIELDS + 2)
    return xf__rt_fail(rt, XF_EPROTO, "entry reply has an unexpected shape");
  xf__reply **el = r->element + at;
  int with_s = r->elements > at + READ_FIELDS, with_x = r->elements > at + READ_FIELDS + 1;
  if (with_s && !is_int(el[READ_FIELDS]))
    return xf__rt_fail(rt, XF_EPROTO, "entry reply's start is not an integer");
  if (with_x && el[READ_FIELDS + 1]->type != XF_REPLY_STRING)
    return xf__rt_fail(rt, XF_EPROTO, "entry reply's validator is not a string");
  for (int i = 1; i < READ_FIELDS - 1; i++)
    if (!is_int(el[i]))
      return xf__rt_fail(rt, XF_EPROTO, "entry reply field %d is not an integer", i);
  if (el[READ_FIELDS - 1]->type != XF_REPLY_STRING)
    return xf__rt_fail(rt, XF_EPROTO, "entry reply's tag record is not a string");
  int has_value = el[0]->type == XF_REPLY_STRING;
  if (!has_value && el[0]->type != XF_REPLY_NIL)
    return xf__rt_fail(rt, XF_EPROTO, "entry reply's value has an unexpected type");
  if (!in_range(el, has_value)) { /* no time to trust: 0 dates a write the oldest */
    out->malformed = 1;
    out->lease_live = el[3]->integer == 1;
    return XF_OK;
  }
  out->lease_live = (int)el[3]->integer;
  out->now_ms = out->now_late_ms = el[5]->integer - el[2]->integer;
  out->nothing_ms = el[6]->integer;
  if (!has_value) {
    out->malformed = (int)el[4]->integer;
    return XF_OK;
  }
  out->value = el[0]->str;
  out->len = el[0]->len;
  out->delta_us = el[1]->integer;
  out->remaining_ms = el[2]->integer;
  out->negative = el[4]->integer == 1;
  out->zstd = el[4]->integer == 2;
  out->expiry_ms = el[5]->integer;
  if (with_s && !out_of_range(el[READ_FIELDS]->integer, 0, MAX_CLOCK_MS))
    out->start_ms = el[READ_FIELDS]->integer;
  if (with_x && el[READ_FIELDS + 1]->len) {
    out->validator = (const unsigned char *)el[READ_FIELDS + 1]->str;
    out->validator_len = el[READ_FIELDS + 1]->len;
  }
  if (el[7]->len) {
    out->tags = (const unsigned char *)el[7]->str;
    out->tags_len = el[7]->len;
  }
  return XF_OK;
}

int xf__entry_parse_read(xf__runtime *rt, xf__reply *r, xf__entry *out) {
  int rc = parse_entry(rt, r, 0, out);
  if (rc != XF_OK)
    xf__entry_free(out);
  else if (out->malformed)
    rt->stats.malformed++;
  return rc;
}

int xf__entry_split_read_many(xf__runtime *rt, xf__reply *r, size_t nkeys,
                              xf__reply **parts) {
  memset(parts, 0, nkeys * sizeof *parts);
  int ok = r->type == XF_REPLY_ARRAY && r->elements == nkeys;
  for (size_t i = 0; ok && i < nkeys; i++)
    ok = r->element[i] != NULL;
  if (!ok) {
    int array = r->type == XF_REPLY_ARRAY;
    size_t got = r->elements;
    xf__reply_free(r);
    if (!array)
      return xf__rt_fail(rt, XF_EPROTO, "read_many reply is not an array");
    return xf__rt_fail(rt, XF_EPROTO, "read_many reply: %zu replies for %zu keys", got,
                       nkeys);
  }
  /* Each element moves to its part; xf__reply_free skips the NULLs left. */
  for (size_t i = 0; i < nkeys; i++) {
    parts[i] = r->element[i];
    r->element[i] = NULL;
  }
  xf__reply_free(r);
  return XF_OK;
}

int xf__entry_parse_lease(xf__runtime *rt, xf__reply *r, int64_t *now_ms,
                          xf__lease_result *result, xf__entry *newer) {
  memset(newer, 0, sizeof *newer);
  /* lease.lua: {0|1|3|4, now} or {2, now, the read's fields}. */
  if (r->type != XF_REPLY_ARRAY || r->elements < 2 || !is_int(r->element[0]) ||
      !is_int(r->element[1]) || out_of_range(r->element[0]->integer, 0, 4) ||
      out_of_range(r->element[1]->integer, 0, MAX_CLOCK_MS) ||
      r->elements != (r->element[0]->integer == XF_LEASE_NEWER ? 2u + READ_FIELDS : 2u)) {
    xf__reply_free(r);
    return xf__rt_fail(rt, XF_EPROTO, "lease reply has an unexpected shape");
  }
  *result = (xf__lease_result)r->element[0]->integer;
  *now_ms = r->element[1]->integer;
  if (*result != XF_LEASE_NEWER) {
    xf__reply_free(r);
    return XF_OK;
  }
  int rc = parse_entry(rt, r, 2, newer);
  /* A newer value is a valid one, read at the same instant, with no lease. */
  if (rc == XF_OK && (!newer->value || newer->remaining_ms <= 0 || newer->lease_live ||
                      newer->now_ms != *now_ms))
    rc = xf__rt_fail(rt, XF_EPROTO, "lease reply's newer value is not one lease.lua gives");
  if (rc != XF_OK)
    xf__entry_free(newer);
  return rc;
}

int xf__entry_parse_int(xf__runtime *rt, xf__reply *r, const char *what, int *value) {
  int rc = XF_OK;
  if (is_int(r) && (r->integer == 0 || r->integer == 1)) /* the scripts' 0 or 1 */
    *value = (int)r->integer;
  else
    rc = xf__rt_fail(rt, XF_EPROTO, "%s reply is not 0 or 1", what);
  xf__reply_free(r);
  return rc;
}

int xf__entry_decode(xf__runtime *rt, xf__entry *e, size_t cap) {
  if (!e->zstd || !e->value)
    return XF_OK;
  xf__reply *s = e->reply ? holder(e->reply, e->value) : NULL;
  char *buf = NULL;
  size_t len = 0;
  int rc = s ? xf__codec_unpack(rt, e->value, e->len, cap, e->tags_len + e->validator_len,
                                &buf, &len)
             : xf__rt_fail(rt, XF_EPROTO, "compressed value: not in its reply");
  e->zstd = 0;
  if (rc == XF_ENOMEM)
    return rc;
  if (rc != XF_OK) { /* a frame we cannot trust: a malformed entry, recomputed */
    /* Its expiry stays: the lease script, which cannot look inside the frame,
     * then takes the lease instead of answering with this value as newer. */
    e->value = NULL;
    e->len = 0;
    e->negative = 0;
    e->tags = NULL;
    e->tags_len = 0;
    e->validator = NULL;
    e->validator_len = 0;
    e->malformed = 1;
    rt->stats.malformed++;
    return XF_OK;
  }
  /* The value first (xf__entry_take_value hands the buffer over as is), its
   * tag record and validator past its NUL: the old string held them all. */
  if (e->tags_len) {
    memcpy(buf + len + 1, e->tags, e->tags_len);
    e->tags = (const unsigned char *)buf + len + 1;
  }
  if (e->validator_len) {
    memcpy(buf + len + 1 + e->tags_len, e->validator, e->validator_len);
    e->validator = (const unsigned char *)buf + len + 1 + e->tags_len;
  }
  free(s->str);
  s->str = buf;
  s->len = len;
  s->integer = 0;
  e->value = buf;
  e->len = len;
  return XF_OK;
}
