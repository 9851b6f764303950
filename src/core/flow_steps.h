/* What the flow's files share: flow.c (the machine: kinds, inputs,
 * NOSCRIPT, the one-script kinds), flow_compute.c (get-or-compute's
 * decisions) and flow_near.c (the near cache). Not for drivers: they use
 * flow.h. */
#ifndef XF_FLOW_STEPS_H
#define XF_FLOW_STEPS_H

#include "flow.h"

/* Where a flow is; the ones that send name the script they run (flow.c's
 * script_of). */
enum {
  XF__READ,
  XF__LEASE,
  XF__WRITE,
  XF__RELEASE,
  XF__DELETE,
  XF__LOAD,
  XF__WAIT,
  XF__DONE,
  XF__FENCE, /* a PING after a write's reply (options.write_fence): no script */
  XF__TAGS,  /* a tag's version read (tag_read.lua), before the call's first step */
  XF__BUMP,  /* a tag invalidated (tag_bump.lua): xf_invalidate_tags */
  XF__RENEW, /* a loader's lease renewed (renew.lua) */
  XF__TOUCH  /* a value the loader found unchanged: its entry extended (touch.lua) */
};

/* Encodes the command of the current state (again, after a SCRIPT LOAD). */
xf__step xf__flow_encode(xf__flow *f);

/* Encodes and asks for the command of state. Inline: a hit's start sends
 * its read without a call. */
static inline xf__step xf__flow_send(xf__flow *f, int state) {
  f->state = state;
  if (state == XF__READ) { /* plain, unless the transport keeps no clock estimate */
    f->plain_read = f->rt->plain_hits;
    f->read_format = f->cfg->entry_format; /* the format this client writes */
    f->format_switched = 0;
  }
  f->script_retried = 0;
  return xf__flow_encode(f);
}

/* Ends the call with rc, freeing what the flow holds. */
xf__step xf__flow_done(xf__flow *f, int rc);
/* Compresses f->w's value (policy.compress_min_bytes, format 2 entries) when
 * that makes it smaller: f->w then writes the frame, kept in f->sink's
 * buffer. */
void xf__flow_pack(xf__flow *f);

/* A copy of data (NUL-terminated) as the call's value, from source. */
int xf__flow_serve_bytes(xf__flow *f, const char *data, size_t len, xf_source source);

/* The entry's value (f->e) as the call's value, from source, taken from its
 * reply (no copy); the flow must not read f->e's value afterwards. */
int xf__flow_serve_entry(xf__flow *f, xf_source source);

/* A reply to the command sent at f->sent_ms, read by now_ms, carried the
 * server's time server_ms: the estimate of that connection's clock learns
 * it (f->clock; none: nothing). */
void xf__flow_learn_clock(xf__flow *f, int64_t server_ms, int64_t now_ms);

/* flow_compute.c's side of get-or-compute: the lease asked for; what a read
 * (parsed: rc) and a lease lead to; the value read (f->e) handed to the
 * caller; whether it may be served when a load fails (stale_if_error_ms). */
int64_t xf__flow_lease_ms(const xf__flow *f);
xf__step xf__flow_read_decide(xf__flow *f, int rc, int64_t now_ms);
xf__step xf__flow_lease_done(xf__flow *f, int rc, xf__reply *r, int64_t now_ms);
int xf__flow_serve_read(xf__flow *f, xf_source source);
int xf__flow_within_stale_if_error(const xf__flow *f, const xf__entry *e);

/* Whether e's value is within a window of window_ms past its ttl: its
 * remaining time in (-window_ms, 0] (or still positive), as Redis keeps it
 * (PEXPIRE is the ttl plus the window). A window of 0 gives nothing past
 * the ttl, not even in the ms it ends. */
static inline int xf__flow_within_window(const xf__entry *e, int64_t window_ms) {
  return e->value && -e->remaining_ms < window_ms;
}

/* flow_load.c: a LOAD of kind begins (the loader gets the value it
 * refreshes); Redis cannot be used (rc): the loader runs uncached; what the
 * write will be; the outcome decided (rc), the lease released first; what a
 * write (ok: written) and a release lead to. */
xf__step xf__flow_load(xf__flow *f, xf__load_kind kind);
xf__step xf__flow_fail_open(xf__flow *f, int rc);
xf__write xf__flow_what_to_write(xf__flow *f);
xf__step xf__flow_release_then_done(xf__flow *f, int rc);
xf__step xf__flow_written(xf__flow *f, int ok);
xf__step xf__flow_released(xf__flow *f, xf__reply *r);

/* flow_timeout.c: a waiter's hard timeout (its wait ended at
 * hard_timeout_ms): a value within stale_if_error_ms (f->e), or
 * XF_ETIMEDOUT. */
xf__step xf__flow_hard_timeout(xf__flow *f);
/* flow_compute.c: f's LOAD moved to bg (xf__flow_detach's move). */
void xf__flow_move_load(xf__flow *f, xf__flow *bg, const xf_policy *p, const char *user_key,
                        xf_value *out);

/* A FENCE cut short by the interrupt (xf__flow_cancel): the write it
 * follows was acknowledged, so the call ends as the write did. */
xf__step xf__flow_fence_cut(xf__flow *f);

/* The events a call owes once its outcome is known (f->pending: a wait's
 * end, a miss's result; a fail-open's result and load_start, owed until the
 * share answered or the loader runs), emitted by xf__flow_done and before a
 * load: a driver settles right before it runs a loader. */
#define XF__PENDING_MISS 1
#define XF__PENDING_WAIT 2
#define XF__PENDING_FAIL_OPEN 4
#define XF__PENDING_LOAD_START 8
void xf__flow_settle(xf__flow *f);

/* flow_tags.c: whether the call carries tags (its policy's, its client's
 * namespace); if so it reads their versions first (XF__TAGS), then goes on
 * with the SEND of state next. *step: the SEND, or DONE with XF_EINVAL (bad
 * tags). 0: untagged, nothing done. */
int xf__flow_tags_first(xf__flow *f, int next, xf__step *step);

/* A tagged get-or-compute with a near cache asks it first for an entry
 * stamped current for its tags (near.h): 1 when served (*step DONE), as
 * xf__flow_near_first; 0, nothing taken (an early refresh's mark left for
 * the call's own look-up), when there is none or the names are not valid
 * (xf__flow_tags_first says why). */
int xf__flow_tags_near_fast(xf__flow *f, xf__step *step);
/* The command of a READ that carries the tags' keys (f->tag_in_read) into
 * f->cmd: an MGET of the entry and the tags (plain), else the read script
 * on them all. */
void xf__flow_tags_read_cmd(xf__flow *f);
/* The reply *r (not an error) to such a READ: 1 with *r the entry's own
 * part (as a read without the tags' keys gets it) and the versions recorded;
 * 0 with *step when the tags are read on their own first (a tag without a
 * key yet: tag_read.lua makes it), then the entry again (*r freed). */
int xf__flow_tags_split_read(xf__flow *f, xf__reply **r, xf__step *step);
/* Frees the flow's copy of the names and the tag key built last. */
void xf__flow_tags_free(xf__flow *f);
/* The command of XF__TAGS or XF__BUMP into f->cmd; its key. */
void xf__flow_tags_encode(xf__flow *f);
/* A reply to XF__TAGS or XF__BUMP (rc as xf__flow_reply's, r taken). */
xf__step xf__flow_tags_reply(xf__flow *f, int rc, xf__reply *r, int64_t now_ms);
/* The next tag raised (XF__BUMP, its key built), or the call's end. */
xf__step xf__flow_tags_raise_next(xf__flow *f);

/* flow_tag_raise.c: a tag just raised: its near copy dropped, then the
 * fence's SEND; the fence's command (a PING or a WAIT) into f->cmd; its
 * reply (rc as xf__flow_reply's, r taken): the next tag, or the end. */
xf__step xf__flow_tags_raised(xf__flow *f);
void xf__flow_tags_fence_cmd(xf__flow *f);
xf__step xf__flow_tags_fenced(xf__flow *f, int rc, xf__reply *r);

/* flow_tag_record.c: how many tags the call carries (the namespace's
 * last); the record of the versions read (f->tag_versions into f->tag_rec);
 * a version as the scripts give it (decimal digits, a bulk string): 1 with
 * *v, else 0. */
static inline size_t xf__flow_tag_count(const xf__flow *f) {
  return f->tag_n + (f->tag_ns ? 1 : 0);
}
void xf__flow_tags_record(xf__flow *f);
/* The names in order and the namespace's mark, hashed (64-bit, never 0):
 * what an entry's stamp is for (near.h). */
uint64_t xf__flow_tags_names_hash64(const char *const *names, size_t n, int ns);
int xf__flow_tags_version(const xf__reply *r, int64_t *v);
/* Judges e (just read) by the call's tag record: 1 when the entry carries
 * the current versions; else 0, invalidated set, counted and told: an entry
 * of the same tags, one raised since, is past its ttl from the raise on
 * (served stale only as the policy allows, policy.tags_never_stale); any
 * other is refused (its value cleared). */
int xf__flow_tags_judge(xf__flow *f, xf__entry *e);
/* xf__flow_tags_judge for a get of a namespace client: by the namespace's
 * version alone (the record's last; a get names no tags of its own). */
int xf__flow_tags_judge_namespace(xf__flow *f, xf__entry *e);

/* A get-or-compute on a disabled client: straight to the loader, uncached. */
xf__step xf__flow_bypass(xf__flow *f);

/* flow_near.c: a get-or-compute or get served from the client's near cache
 * (1, *step DONE), or not (0: the flow reads Redis; near_elected when the
 * near hit's draw elected an early refresh); a read's value offered to it. */
int xf__flow_near_first(xf__flow *f, int64_t now_ms, xf__step *step);
/* Marks f's key on its client as elected by a near hit's draw that did not
 * go on (xf__flow_start_near): the client's next xf__flow_near_first takes
 * the mark (any key), and a get-or-compute of that key with a near hit
 * refreshes it without drawing again while Redis holds the entry drawn on. */
void xf__flow_near_elect(xf__flow *f);
void xf__flow_near_keep(xf__flow *f);

#endif
