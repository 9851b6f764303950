/* The entry protocol on Redis: read / lease / write / release / delete, one
 * script each. For each: a function that encodes the call and one that parses
 * the reply; no I/O (the flow, flow.h, runs them). Keys passed here already
 * carry the prefix. */
#ifndef XF_ENTRY_H
#define XF_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "reply.h"

/* What the read (or a lease that found a newer value) saw. */
typedef struct xf__entry {
  xf__reply *reply;  /* owns value */
  const char *value; /* NULL when the entry holds no value */
  size_t len;
  int64_t delta_us;
  int64_t remaining_ms; /* negative once past the logical expiry */
  int64_t expiry_ms;    /* server time; 0 when no value */
  int64_t now_ms;       /* the server's time when it was read (a plain read:
                           the earliest it may have been) */
  int64_t now_late_ms;  /* the latest it may have been (a script's read: now_ms) */
  int64_t nothing_ms;   /* server time the last load that found nothing (not
                           cached) ended: lua/release.lua's marker f; 0 = none */
  int lease_live;
  int negative;
  int malformed;             /* the entry is not as xfetch writes it: a miss (value NULL) */
  const unsigned char *tags; /* its tag record (flow_tags.c), into reply; */
  size_t tags_len;           /* NULL and 0: none */
  int invalidated;           /* a tag it carries was invalidated since it was loaded:
                                a tagged call refused it (value NULL) or made it
                                expire at the invalidation (flow_tag_record.c) */
  int zstd;                  /* value is still a zstd frame (header flag 128):
                                xf__entry_decode makes it the value */
  int64_t start_ms;          /* server ms its computation (or revalidation)
                                started: the entry's s; 0 = not read */
  const unsigned char *validator; /* its validator (format 2: xf_sink_validator), */
  size_t validator_len;           /* into reply; NULL and 0: none */
} xf__entry;

void xf__entry_free(xf__entry *e);

typedef enum {
  XF_LEASE_LOST = 0,
  XF_LEASE_WON = 1,
  XF_LEASE_NEWER = 2,
  XF_LEASE_NOTHING = 3, /* a load that found nothing ended after the first read */
  XF_LEASE_FAILSAFE = 4 /* lost to the fail-safe mark: a load failed lately */
} xf__lease_result;

/* What a write stores (write.lua's kinds). */
typedef enum {
  XF_WRITE_VALUE = 0,
  XF_WRITE_NOT_FOUND = 1, /* a cached not-found (negative entry) */
  XF_WRITE_GONE = 2       /* not found, not cached: remove the old value */
} xf__write_kind;

typedef struct xf__write {
  const char *token; /* "" = no lease held */
  const char *data;
  size_t len;
  int64_t delta_us; /* <0 = keep the entry's delta */
  int64_t ttl_ms;   /* XF_WRITE_GONE: how long the tombstone stays */
  int64_t keep_ms;  /* how long past ttl_ms the entry stays */
  int64_t start_ms; /* server ms when the computation started; <0 = now */
  xf__write_kind kind;
  const unsigned char *tags; /* the value's tag record (flow_tags.c), or NULL */
  size_t tags_len;
  int zstd; /* XF_WRITE_VALUE: data is the value's zstd frame (format 2 only) */
  const unsigned char *validator; /* the value's validator (format 2 only), or NULL */
  size_t validator_len;
} xf__write;

/* ---- encode: fill cmd (it keeps pointers to key, token and data) ---------- */

/* format (xf_entry_format, XF_ENTRY_HASH or XF_ENTRY_STRING): what an entry
 * the script creates is; an existing entry keeps its own format, but a write
 * converts it (lua/entry_read.lua). */

void xf__entry_read_cmd(xf__cmd *cmd, const char *key, size_t keylen);
/* seen_expiry_ms: the expiry the caller read (0 if none); first_read_ms: the
 * server time of the caller's first read (0 = none): a load that found
 * nothing and ended after it answers XF_LEASE_NOTHING. */
void xf__entry_lease_cmd(xf__cmd *cmd, const char *key, size_t keylen, const char *token,
                         int64_t lease_ms, int64_t seen_expiry_ms, int64_t first_read_ms,
                         int format);
void xf__entry_write_cmd(xf__cmd *cmd, const char *key, size_t keylen, const xf__write *w,
                         int format);
/* nothing_keep_ms > 0: the load found nothing (not cached); leave the marker
 * that answers its waiters (lua/release.lua) for that long. hold_ms > 0: the
 * load failed and served the entry's value; the lease becomes the fail-safe
 * mark for that long (policy.failsafe_throttle_ms). */
void xf__entry_release_cmd(xf__cmd *cmd, const char *key, size_t keylen, const char *token,
                           int64_t nothing_keep_ms, int64_t hold_ms);
/* The lease holder's renewal (lua/renew.lua): its deadline becomes the
 * server's now + lease_ms, if the lease is still token's. */
void xf__entry_renew_cmd(xf__cmd *cmd, const char *key, size_t keylen, const char *token,
                         int64_t lease_ms);
/* What a touch keeps (lua/touch.lua): the loader found the value it was
 * given unchanged; the entry's life is extended as a write's, its value and
 * its delta (a full load's time) kept, its value not rewritten. */
typedef struct xf__touch {
  const char *token; /* "" = no lease held */
  int64_t seen_e_ms; /* the expiry of the entry whose value the loader judged */
  int64_t ttl_ms;
  int64_t keep_ms;  /* how long past ttl_ms the entry stays */
  int64_t start_ms; /* server ms when the computation started; <0 = now */
  const unsigned char
      *tags; /* the call's tag record (format 2), or NULL: keep the entry's */
  size_t tags_len;
} xf__touch;

/* Returns (parse_int) 1 touched, 0 refused: the entry no longer holds that
 * value (a write or a delete since) or the lease is not token's. */
void xf__entry_touch_cmd(xf__cmd *cmd, const char *key, size_t keylen, const xf__touch *t);
void xf__entry_delete_cmd(xf__cmd *cmd, const char *key, size_t keylen,
                          int64_t tombstone_ms, int format);
/* The reads of nkeys keys in one call (read_many.lua; in Redis Cluster all in
 * one slot). The arrays are kept: they must outlive the send. */
void xf__entry_read_many_cmd(xf__cmd *cmd, size_t nkeys, const char *const *keys,
                             const size_t *keylens);

/* The hit path's read (entry_fields.c): HMGET key v d e s l n, no script. */
void xf__entry_fields_cmd(xf__cmd *cmd, const char *key, size_t keylen);

/* Format 2 (entry_string.c): one string, the header (14 to 40 bytes, as
 * its flags say) then the value. */
/* The hit path's read of a format-2 entry: GET key. */
void xf__entry_get_cmd(xf__cmd *cmd, const char *key, size_t keylen);
/* The hit path's read of nkeys format-2 entries: MGET (in Redis Cluster all
 * in one slot). The arrays are kept: they must outlive the send. */
void xf__entry_mget_cmd(xf__cmd *cmd, size_t nkeys, const char *const *keys,
                        const size_t *keylens);

/* What a transport puts on a connection whose clock estimate is k, at driver
 * ms now_ms, for cmd: cmd itself, unless it is a plain read (cmd->plain_out)
 * and k is not fresh (xf__clock_fresh): then the read script on its key
 * (on every key of a plain MGET, the entry's first: read.lua gives the
 * others' values after the entry's fields), filled into *script (routed as cmd: same
 * clock_out, ask_node, asked_out). Sets *cmd->plain_out to which it is. */
struct xf__clock;
const xf__cmd *xf__entry_read_as(const xf__cmd *cmd, const struct xf__clock *k,
                                 int64_t now_ms, xf__cmd *script);

/* ---- parse: each takes ownership of r (not an error reply) ---------------- */

/* HMGET's reply -> *out, judged as lua/entry_read.lua judges an entry with
 * the server's time within [lo, hi] (clock.h), conservatively: remaining_ms
 * counts from hi, a lease is live only past hi, now_ms is lo. XF_OK (a
 * malformed entry too: a miss, counted) or XF_EPROTO. */
int xf__entry_parse_fields(xf__runtime *rt, xf__reply *r, int64_t lo, int64_t hi,
                           xf__entry *out);

/* Copies a top-level string reply of len bytes from src into dst (len + 1
 * bytes): as is, or, when it starts as a format-2 entry (magic and version,
 * at least the header its flags announce long: a GET of an entry), value
 * first and header after it, so that a hit hands the buffer to its caller
 * without moving the value. Returns what the reply's integer field must
 * say: the header's length when rotated so, else 0. The reader (src/link/reader.c) builds
 * every top-level string with it; xf__entry_parse_string reads both layouts. */
long long xf__entry_string_copy(char *dst, const char *src, size_t len);

/* GET's reply (a string or nil) -> *out, judged as xf__entry_parse_fields
 * judges HMGET's (and lua/entry_read.lua a format-2 entry): a header that is
 * not as xfetch writes it is a malformed miss, counted; the value is not
 * copied (out->value points into r). XF_OK, XF_EPROTO, or XF_EWRONGTYPE for
 * a string that does not start with the magic byte (not an entry). */
int xf__entry_parse_string(xf__runtime *rt, xf__reply *r, int64_t lo, int64_t hi,
                           xf__entry *out);

/* The read script's reply -> *out (which then owns r). XF_OK or XF_EPROTO
 * (a reply of another shape). A malformed entry (out->malformed, counted in
 * stats.malformed) is XF_OK: a miss. */
int xf__entry_parse_read(xf__runtime *rt, xf__reply *r, xf__entry *out);

/* The lease script's reply: *result, the server time in *now_ms, and on
 * XF_LEASE_NEWER the newer value in *newer. XF_OK or XF_EPROTO. */
int xf__entry_parse_lease(xf__runtime *rt, xf__reply *r, int64_t *now_ms,
                          xf__lease_result *result, xf__entry *newer);

/* Splits read_many's reply r (taken; not an error reply) for nkeys keys into
 * parts[i], key i's reply as read.lua gives it, for xf__entry_parse_read or
 * xf__flow_reply (each part is then the caller's). XF_OK, or XF_EPROTO when r
 * is not an array of nkeys replies (every part NULL, r freed). */
int xf__entry_split_read_many(xf__runtime *rt, xf__reply *r, size_t nkeys,
                              xf__reply **parts);

/* When e's value is a zstd frame (e->zstd), makes it the value it encodes,
 * at most cap bytes (max_value_len), in a buffer that replaces the reply
 * string that held the frame (e->tags kept valid). A frame that cannot be
 * decoded within cap makes e a malformed entry (a miss, counted in
 * stats.malformed; the reason on rt): XF_OK; XF_ENOMEM. */
int xf__entry_decode(xf__runtime *rt, xf__entry *e, size_t cap);

/* The integer reply of write (1 written, 0 refused), release, renew or
 * delete. */
int xf__entry_parse_int(xf__runtime *rt, xf__reply *r, const char *what, int *value);

/* The entry's value as a malloc'd NUL-terminated buffer of e->len bytes,
 * taken from the reply that holds it (moved to the front of its string past
 * a format-2 header, not copied to a new one); NULL when it cannot be (no
 * value). e->value is NULL afterwards. */
char *xf__entry_take_value(xf__entry *e);

/* Makes the lease token of a client's next lease. The driver has checked for
 * a fork first (xf__client_check_fork): never a parent's token in a child. */
void xf__entry_token(const xf__config *cfg, xf__runtime *rt, char token[40]);

#endif
