/* The entry protocol: one function per Lua script, turning replies into C. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "entry.h"
#include "script.h"

void xf__entry_free(xf__entry *e) {
  if (e->reply)
    freeReplyObject(e->reply);
  memset(e, 0, sizeof *e);
}

static int is_int(const redisReply *r) { return r->type == REDIS_REPLY_INTEGER; }

/* Bounds the scripts keep to (lua/read.lua): anything outside is not from
 * them, and would overflow the arithmetic of the flow. */
#define MAX_DELTA_US ((int64_t)1 << 40)
#define MAX_SPAN_MS ((int64_t)1 << 41)
#define MAX_CLOCK_MS ((int64_t)1 << 50)

static int out_of_range(int64_t v, int64_t min, int64_t max) { return v < min || v > max; }

/* Parses {value|nil, delta_us, remaining_ms, lease_live, negative, expiry_ms,
 * now_ms} starting at element `at` of r, taking ownership of r. */
static int parse_entry(xf_client *c, redisReply *r, size_t at, xf__entry *out) {
  memset(out, 0, sizeof *out);
  out->reply = r;
  if (r->type != REDIS_REPLY_ARRAY || r->elements != at + 7)
    return xf__fail(c, XF_EPROTO, "entry reply has an unexpected shape");
  redisReply **el = r->element + at;
  for (int i = 1; i < 7; i++)
    if (!is_int(el[i]))
      return xf__fail(c, XF_EPROTO, "entry reply field %d is not an integer", i);
  if (out_of_range(el[1]->integer, 0, MAX_DELTA_US) ||
      out_of_range(el[2]->integer, -MAX_SPAN_MS, MAX_SPAN_MS) ||
      out_of_range(el[5]->integer, 0, MAX_CLOCK_MS) ||
      out_of_range(el[6]->integer, 0, MAX_CLOCK_MS))
    return xf__fail(c, XF_EPROTO, "entry reply field out of range");
  if (el[0]->type == REDIS_REPLY_STRING) {
    out->value = el[0]->str;
    out->len = el[0]->len;
  } else if (el[0]->type != REDIS_REPLY_NIL) {
    return xf__fail(c, XF_EPROTO, "entry value has an unexpected type");
  }
  out->delta_us = el[1]->integer;
  out->remaining_ms = el[2]->integer;
  out->lease_live = el[3]->integer != 0;
  out->negative = el[4]->integer != 0;
  out->expiry_ms = el[5]->integer;
  out->now_ms = el[6]->integer;
  return XF_OK;
}

int xf__entry_read(xf_client *c, const char *key, size_t keylen, xf__entry *out) {
  redisReply *r;
  memset(out, 0, sizeof *out);
  int rc = xf__script_run(c, XF_SCRIPT_READ, key, keylen, 0, NULL, NULL, &r);
  if (rc != XF_OK)
    return rc;
  rc = parse_entry(c, r, 0, out);
  if (rc != XF_OK)
    xf__entry_free(out);
  return rc;
}

int xf__entry_lease(xf_client *c, const char *key, size_t keylen, int64_t lease_ms,
                    int64_t seen_expiry_ms, char token[40], int64_t *now_ms,
                    xf__lease_result *result, xf__entry *newer) {
  char ms[24], seen[24];
  snprintf(token, 40, "%016" PRIx64 "-%" PRIu64, c->id, ++c->lease_count);
  snprintf(ms, sizeof ms, "%" PRId64, lease_ms);
  snprintf(seen, sizeof seen, "%" PRId64, seen_expiry_ms);
  const char *args[] = {token, ms, seen};
  size_t lens[] = {strlen(token), strlen(ms), strlen(seen)};
  redisReply *r;
  memset(newer, 0, sizeof *newer);
  int rc = xf__script_run(c, XF_SCRIPT_LEASE, key, keylen, 3, args, lens, &r);
  if (rc != XF_OK)
    return rc;
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 2 || !is_int(r->element[0]) ||
      !is_int(r->element[1])) {
    freeReplyObject(r);
    return xf__fail(c, XF_EPROTO, "lease reply has an unexpected shape");
  }
  *result = (xf__lease_result)r->element[0]->integer;
  *now_ms = r->element[1]->integer;
  if (*result != XF_LEASE_NEWER) {
    freeReplyObject(r);
    return XF_OK;
  }
  rc = parse_entry(c, r, 2, newer);
  if (rc != XF_OK)
    xf__entry_free(newer);
  return rc;
}

static int expect_int_reply(xf_client *c, redisReply *r, const char *what, int *value) {
  int rc = XF_OK;
  if (is_int(r))
    *value = (int)r->integer;
  else
    rc = xf__fail(c, XF_EPROTO, "%s reply is not an integer", what);
  freeReplyObject(r);
  return rc;
}

int xf__entry_write(xf_client *c, const char *key, size_t keylen, const xf__write *w,
                    int *written) {
  char delta[24], ttl[24], keep[24], start[24], kind[4];
  if (w->delta_us >= 0)
    snprintf(delta, sizeof delta, "%" PRId64, w->delta_us);
  else
    delta[0] = '\0';
  snprintf(ttl, sizeof ttl, "%" PRId64, w->ttl_ms);
  snprintf(keep, sizeof keep, "%" PRId64, w->keep_ms);
  if (w->start_ms >= 0)
    snprintf(start, sizeof start, "%" PRId64, w->start_ms);
  else
    start[0] = '\0';
  snprintf(kind, sizeof kind, "%d", (int)w->kind);
  const char *args[] = {w->token, w->data ? w->data : "", delta, ttl, keep, start, kind};
  size_t lens[] = {strlen(w->token), w->len,        strlen(delta), strlen(ttl),
                   strlen(keep),     strlen(start), strlen(kind)};
  redisReply *r;
  int rc = xf__script_run(c, XF_SCRIPT_WRITE, key, keylen, 7, args, lens, &r);
  return rc == XF_OK ? expect_int_reply(c, r, "write", written) : rc;
}

int xf__entry_release(xf_client *c, const char *key, size_t keylen, const char *token) {
  const char *args[] = {token};
  size_t lens[] = {strlen(token)};
  redisReply *r;
  int released;
  int rc = xf__script_run(c, XF_SCRIPT_RELEASE, key, keylen, 1, args, lens, &r);
  return rc == XF_OK ? expect_int_reply(c, r, "release", &released) : rc;
}

int xf__entry_delete(xf_client *c, const char *key, size_t keylen, int64_t tombstone_ms) {
  char ms[24];
  snprintf(ms, sizeof ms, "%" PRId64, tombstone_ms);
  const char *args[] = {ms};
  size_t lens[] = {strlen(ms)};
  redisReply *r;
  int deleted;
  int rc = xf__script_run(c, XF_SCRIPT_DELETE, key, keylen, 1, args, lens, &r);
  return rc == XF_OK ? expect_int_reply(c, r, "delete", &deleted) : rc;
}
