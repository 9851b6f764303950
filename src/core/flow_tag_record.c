/* The tag record (flow_tags.c reads the versions it holds): the number of
 * tags (1 byte), a hash of their names in order (4 bytes, FNV-1a), then each
 * version (8 bytes, big-endian), as the entry's header carries it
 * (entry_string.c); an entry read is served only while the record it carries
 * is the one the call built from the versions it read. */
#include <string.h>

#include "client.h"
#include "event.h"
#include "flow_steps.h"

/* The names in order and the namespace's mark, hashed (64-bit FNV-1a; never
 * 0): what an entry's stamp is for (near.h). */
uint64_t xf__flow_tags_names_hash64(const char *const *names, size_t n, int ns) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++)
    for (const unsigned char *p = (const unsigned char *)names[i];; p++) {
      h = (h ^ *p) * 1099511628211ull;
      if (!*p)
        break;
    }
  h = (h ^ (ns ? 2u : 1u)) * 1099511628211ull;
  return h ? h : 1;
}

static uint32_t names_hash(const xf__flow *f) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < f->tag_n; i++)
    for (const unsigned char *p = (const unsigned char *)f->tag_names[i];; p++) {
      h = (h ^ *p) * 16777619u;
      if (!*p)
        break;
    }
  if (f->tag_ns)
    h = (h ^ 0x01u) * 16777619u;
  return h;
}

static void put_be(unsigned char *p, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; i--, v >>= 8)
    p[i] = (unsigned char)(v & 0xff);
}

void xf__flow_tags_record(xf__flow *f) {
  size_t n = xf__flow_tag_count(f);
  unsigned char *p = f->tag_rec;
  p[0] = (unsigned char)n;
  put_be(p + 1, names_hash(f), 4);
  for (size_t i = 0; i < n; i++)
    put_be(p + 5 + 8 * i, (uint64_t)f->tag_versions[i], 8);
  f->tag_rec_len = 5 + 8 * n;
}

int xf__flow_tags_version(const xf__reply *r, int64_t *v) {
  if (r->type != XF_REPLY_STRING || r->len == 0 || r->len > 18)
    return 0;
  int64_t n = 0;
  for (size_t i = 0; i < r->len; i++) {
    if (r->str[i] < '0' || r->str[i] > '9')
      return 0;
    n = n * 10 + (r->str[i] - '0');
  }
  *v = n;
  return 1;
}

/* e judged invalidated (raised: a version of its tags was raised, else it
 * carries other tags): marked, counted and told; 0. */
static int told_invalidated(xf__flow *f, xf__entry *e, int raised) {
  e->invalidated = 1;
  f->rt->stats.tag_invalidated++;
  xf__emit(f, XF_EV_TAG_INVALIDATED, -1, 0, raised ? XF_TAG_RAISED : XF_TAG_OTHER);
  return 0;
}

/* e refused as invalidated: its value cleared, then told; 0. */
static int refuse(xf__flow *f, xf__entry *e, int raised) {
  e->value = NULL; /* its reply still holds it: freed with the entry */
  return told_invalidated(f, e, raised);
}

/* When the newest raise of e's tags happened (server ms): the largest current
 * version that is not the one e recorded, a version being the server's time
 * in us when the tag was raised (tag_bump.lua) or its key made again
 * (tag_read.lua). e's record has the call's count and names. */
static int64_t raised_at_ms(const xf__flow *f, const xf__entry *e) {
  int64_t at_us = 0;
  for (size_t i = 0, n = xf__flow_tag_count(f); i < n; i++) {
    const unsigned char *rec = e->tags + 5 + 8 * i;
    if (memcmp(rec, f->tag_rec + 5 + 8 * i, 8) != 0 && f->tag_versions[i] > at_us)
      at_us = f->tag_versions[i];
  }
  return at_us / 1000;
}

/* e, whose tags were raised since it was loaded, kept as a value that
 * expired when the newest raise happened (no later than its own expiry):
 * past its ttl, served stale only as the policy's stale rules allow
 * (stale_ms while another caller reloads it, stale_if_error_ms when the
 * load fails), never as fresh; counted and told as refused; 0. */
static int expire_at_raise(xf__flow *f, xf__entry *e) {
  /* At least 1 ms ago (the raise's ms rounded down, a clock a little
   * ahead): past its ttl, served by no window of 0. */
  int64_t since_ms = e->now_late_ms - raised_at_ms(f, e) + 1;
  if (since_ms < 1)
    since_ms = 1;
  if (-since_ms < e->remaining_ms)
    e->remaining_ms = -since_ms;
  return told_invalidated(f, e, 1);
}

int xf__flow_tags_judge(xf__flow *f, xf__entry *e) {
  if (!e->value ||
      (e->tags_len == f->tag_rec_len && memcmp(e->tags, f->tag_rec, f->tag_rec_len) == 0))
    return 1;
  /* The same count and names' hash: a version was raised; else other tags. */
  int raised = e->tags_len == f->tag_rec_len && memcmp(e->tags, f->tag_rec, 5) == 0;
  if (raised && !e->negative && !f->p->tags_never_stale)
    return expire_at_raise(f, e);
  return refuse(f, e, raised);
}

int xf__flow_tags_judge_namespace(xf__flow *f, xf__entry *e) {
  /* Every entry of a namespace client carries the namespace's version last;
   * one without a record was written by a client without it: refused, as a
   * get-or-compute refuses it. */
  if (!e->value ||
      (e->tags_len >= 13 && f->tag_rec_len >= 13 &&
       memcmp(e->tags + e->tags_len - 8, f->tag_rec + f->tag_rec_len - 8, 8) == 0))
    return 1;
  return refuse(f, e, e->tags_len >= 13);
}
