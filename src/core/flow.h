/* Every call kind (get-or-compute, get, set, delete) as one sans-I/O state
 * machine: it never touches a socket, a clock, a thread or a sleep, so
 * NOSCRIPT, superseded writes, fail-open and the share's drops are decided
 * here for every driver. A driver starts a call of a kind, then performs the
 * step the machine asks for and feeds back what came of it:
 *
 *   XF_STEP_SEND  send f->cmd (a command on f->key)  -> xf__flow_reply
 *   XF_STEP_LOAD  run the loader into &f->sink        -> xf__flow_loaded
 *   XF_STEP_WAIT  until f->wake_ms on the driver's    -> xf__flow_woke
 *                 monotonic clock
 *   XF_STEP_DONE  f->rc is the call's result; on XF_OK *out holds the value
 *                 (get-or-compute, get). The flow has freed everything it
 *                 held.
 *
 * Get, set and delete only SEND (one script each, NOSCRIPT recovered; a
 * write followed by a PING when the client fences its writes:
 * options.write_fence); only get-or-compute LOADs and WAITs.
 *
 * Every input carries the driver's monotonic time in ms. The machine keeps
 * its state in the flow, never on the client, so calls may nest. */
#ifndef XF_FLOW_H
#define XF_FLOW_H

#include <stdint.h>

#include "clock.h"
#include "entry.h"
#include "key.h"
#include "near.h"
#include "nest.h"
#include "policy.h"
#include "reply.h"
#include "sink.h"

typedef enum xf__step { XF_STEP_SEND, XF_STEP_LOAD, XF_STEP_WAIT, XF_STEP_DONE } xf__step;

typedef enum xf__kind {
  XF_KIND_GET_OR_COMPUTE, /* read, decide, lease, load, write (xf_get_or_compute) */
  XF_KIND_GET,            /* read only: a fresh value or XF_ENOTFOUND (xf_get) */
  XF_KIND_SET,            /* write a value (xf_set) */
  XF_KIND_DELETE,         /* delete, leaving a tombstone (xf_delete) */
  XF_KIND_INVALIDATE,     /* raise tags' versions (xf_invalidate_tags) */
  XF_KIND_RENEW           /* renew a loader's lease (policy.max_load_ms) */
} xf__kind;

/* Why a LOAD runs: with the key's lease, after giving up waiting for another
 * caller's lease, or failing open (Redis cannot be used: nothing is written). */
typedef enum xf__load_kind {
  XF_LOAD_LEASED,
  XF_LOAD_GAVE_UP,
  XF_LOAD_UNCACHED,
  XF_LOAD_BYPASS /* the client is disabled: nothing is sent, nothing shared */
} xf__load_kind;

typedef struct xf__flow {
  /* The call. */
  xf__kind kind;
  const xf__config *cfg; /* what the options said (flow_env.h) */
  xf__runtime *rt;       /* the driver's counters, message, draws and ports */
  struct xf_client *c;   /* the driver's client, for its own use (set by the
                            xf__flow_start wrappers): the machine never reads it */
  const xf_policy *p;
  const char *user_key; /* as given, for the loader */
  size_t user_keylen;
  xf__key key;               /* prefixed, for Redis */
  xf_value *out;             /* get-or-compute, get; NULL for set, delete */
  xf_interrupt_fn interrupt; /* the client's, copied: a pool lends the client */
  void *interrupt_ud;        /* to others while this call waits */

  /* What the driver acts on. */
  xf__cmd cmd;         /* SEND */
  struct xf_sink sink; /* LOAD */
  xf__load_kind load;  /* LOAD: why (a driver may share UNCACHED loads) */
  int64_t wake_ms;     /* WAIT */
  int rc;              /* DONE */

  /* Where the call is. */
  int state;
  int script_loading;                 /* a SCRIPT LOAD is on the wire (NOSCRIPT recovery) */
  int script_retried;                 /* at most one SCRIPT LOAD per command */
  int refresh;                        /* an early refresh of a valid value (not a miss) */
  int detached;                       /* a background refresh (xf__flow_detach) */
  int round;                          /* reads made while waiting */
  int had_value;                      /* a value (or a malformed entry) was read */
  int found_nothing;                  /* the release tells the waiters: not found */
  int64_t failsafe_hold_ms;           /* the release leaves the fail-safe mark this long */
  int plain_read;                     /* the READ is plain: HMGET or GET (else the
                                         read script) */
  int read_format;                    /* which plain read: 1 HMGET, 2 GET */
  int format_switched;                /* the plain read met the other format
                                         (WRONGTYPE) and went again as its read */
  int asked;                          /* the router's answer to cmd.asked_out */
  struct xf__clock *clock;            /* whose clock the last reply tells of (the
                                         transport's answer to cmd.clock_out) */
  int64_t input_ms, sent_ms;          /* driver ms of the last input; of the one
                                         that asked for the SEND on the wire */
  int64_t first_read_ms;              /* server time of the call's first read */
  xf__entry e;                        /* what the last read saw */
  char token[40];                     /* the lease held ("" = none) */
  int64_t start_ms;                   /* server time the computation is dated by */
  int64_t waited_from_ms, give_up_ms; /* the driver's clock */
  int64_t delta_us;
  int64_t lease_len_ms;  /* the lease held: its length (xf__flow_lease_ms) */
  int64_t load_start_ms; /* LOAD: the driver's ms when it was asked for */
  int lease_kept;        /* the driver renews the lease until the write (a
                            batch's keeper for its group): no renewals of
                            the flow's own (xf__flow_renewal) */
  int64_t began_ms;      /* the driver's ms at the call's start */
  int hard_wait;         /* WAIT: its end is hard_timeout_ms's, not wait_ms's */
  xf_driver driver;      /* for events: the client's when the call started */
  int pending;           /* events owed when the outcome is known (flow_compute.c) */
  int fail_open_rc;      /* why Redis could not be used, for a fail-open result owed */
  int64_t woke_ms;       /* the driver's clock at the last wake-up of a wait */
  xf__write w;
  uint64_t near_token;    /* the near cache's pending marker of the last READ */
  xf__track track;        /* whose tracking the last READ's reply came under */
  int near_elected;       /* a near hit's draw elected an early refresh of the */
  int64_t near_expiry_ms; /* entry of this Redis expiry and delta: the election */
  int64_t near_delta_us;  /* stands while Redis holds it (flow_compute.c) */
  int near_served;        /* xf__flow_start's DONE is a near hit's result, not a
                             refusal of the key or policy */
  uint64_t *near_count;   /* xf__flow_start_near's caller's: a served result's
                             XF_EV_NEAR is added there (atomically), not given
                             to the hook; NULL = the hook */
  int wake_on_write;      /* WAIT: the driver ends it when the key is invalidated */
  int fence_rc;           /* FENCE: the write's outcome, the call's once the */
  int fence_applied;      /* PING is answered (flow.c: changed, fenced) */
  int fence_state;        /* FENCE: the state of the write it follows */
  xf__nest nest;          /* while its loader runs: this thread computes key */
  char msg[256];          /* the loader's message, kept across the release */
  /* Tags (flow_tags.c): the names (policy.tags, or the invalidation's), the
   * namespace's tag after them, which one is read (or raised) now, the state
   * that follows, the versions read and the record written with a value. */
  const char *const *tag_names;
  char **tag_copy; /* the names, copied (flow_tags.c); NULL once read */
  size_t tag_n;
  int tag_ns;
  size_t tag_i;
  int tag_next;
  int tag_plain;        /* XF__TAGS: a GET (kept in the near cache), else tag_read.lua */
  int tag_fencing;      /* XF__BUMP: the fence after a raise: a PING, or a WAIT */
  int tag_wait;         /* that fence is WAIT 1: the tag's master has a replica */
  int tag_raised_again; /* the raise was sent again: its WAIT went on another stream */
  uint64_t tag_raise_stream, tag_fence_stream; /* the streams the raise and its fence
                                                  went on (resp.h; 0: not said) */
  xf__key tag_key;
  int64_t tag_versions[XF_MAX_TAGS];
  unsigned char tag_rec[5 + 8 * XF_MAX_TAGS];
  size_t tag_rec_len; /* 0: an untagged call */
  /* With a near cache: the names' hash (a stamp's: near.h), whether the
   * near cache is asked for a stamped entry only (xf__flow_tags_near_fast),
   * and what the versions looked up in it say, for the entry's stamp:
   * stamp.nfds counts every version's connection, tag_kept_all is 0 once a
   * version came from Redis or from another node. */
  /* Without a near cache, on one node (rt->one_node): the first READ
   * carries the tags' keys after the entry's (an MGET, or the read script's
   * KEYS), so their versions come with the entry (flow_tags.c). The keys
   * (the entry's first) and their lengths, in one block the flow owns. */
  int tag_in_read;
  /* Else, on one node without a near cache (a set, a call whose read could
   * not carry them): every version read with one MGET of the tags' keys
   * (XF__TAGS), from the same block. */
  int tag_all_at_once;
  const char **tag_read_keys;
  size_t *tag_read_lens;
  /* Else, in Redis Cluster without a near cache: one command per node
   * (XF__TAGS: lua/tag_read.lua on the first tag unread, with the others
   * the slot map puts on its master as ARGV), from the same block: the
   * tags unread (a bit each), those the command reads, and their keys. */
  int tag_by_node;
  uint32_t tag_unread;
  size_t tag_nsent;
  unsigned char tag_sent[XF_MAX_TAGS];
  const char *tag_sent_keys[XF_MAX_TAGS];
  size_t tag_sent_lens[XF_MAX_TAGS];
  uint64_t tag_names64;
  int tag_fast;
  int tag_kept_all;
  xf__tag_stamp tag_stamp;
} xf__flow;

/* Binds f to what it runs with: cfg (read only) and rt (its counters,
 * message, draws and ports), both kept until the call is DONE. Every
 * xf__flow_begin* starts a bound flow. */
static inline void xf__flow_bind(xf__flow *f, const xf__config *cfg, xf__runtime *rt) {
  f->cfg = cfg;
  f->rt = rt;
}

/* Binds f to a client's configuration and runtime (client.h), f->c set for
 * the driver: before a start, or to move a flow onto another client of the
 * same servers, db and prefix (a background refresh's, a pooled client's):
 * from there on its counters, messages and draws are that client's. */
static inline void xf__flow_rebind(xf__flow *f, xf_client *c) {
  f->c = c;
  xf__flow_bind(f, &c->cfg, &c->rt);
}

/* Starts a get-or-compute. Validates policy, out and key (XF_STEP_DONE with
 * XF_EINVAL or XF_ENOMEM when they are bad; XF_EINVAL too for a key a loader
 * on this thread is computing, see nest.h). The loader is the driver's: it
 * must have checked it. */
xf__step xf__flow_begin(xf__flow *f, const char *key, size_t keylen, const xf_policy *p,
                        xf_value *out, int64_t now_ms);

/* Starts a get: XF_OK with the value while it is within its ttl, else
 * XF_ENOTFOUND (absent, stale, a cached not-found, malformed); Redis' errors
 * as they are (no loader to fail open to). */
xf__step xf__flow_begin_get(xf__flow *f, const char *key, size_t keylen, xf_value *out,
                            int64_t now_ms);

/* The near cache's fast path (xf_near_serve: a near hit without a call): starts a
 * get-or-compute (p non-NULL) or a get (p NULL) that only ends when the near
 * cache serves it: 1 when it did (f->rc the call's result, as xf__flow_start
 * or xf__flow_start_get would have ended), 0 when the call must be made as
 * usual (a bad argument, a bypass, a nested load of the key, no near hit or
 * one whose draw elected an early refresh: then the client's next
 * get-or-compute of the key refreshes it without a second draw). Nothing is
 * sent; the flow holds nothing once it returns. count: NULL, or where a
 * served result's XF_EV_NEAR is counted (atomically) instead of the hook. */
int xf__flow_begin_near(xf__flow *f, const char *key, size_t keylen, const xf_policy *p,
                        xf_value *out, uint64_t *count, int64_t now_ms);

/* Starts a set of data (len bytes, not copied: kept by the driver until
 * DONE) under p: XF_OK, XF_ESUPERSEDED when a newer value holds the entry;
 * Redis' errors as they are. Whatever the outcome once sent, the share's copy
 * of the key is dropped. */
xf__step xf__flow_begin_set(xf__flow *f, const char *key, size_t keylen, const void *data,
                            size_t len, const xf_policy *p, int64_t now_ms);

/* Starts an invalidation of n tags (names kept by the driver until DONE),
 * and of the client's namespace tag when ns is non-zero: XF_OK once each
 * tag's version is raised; Redis' errors as they are, at the first. */
xf__step xf__flow_begin_invalidate(xf__flow *f, const char *const *tags, size_t n, int ns,
                                   int64_t now_ms);

static inline xf__step xf__flow_start_invalidate(xf__flow *f, xf_client *c,
                                                 const char *const *tags, size_t n, int ns,
                                                 int64_t now_ms) {
  xf__flow_rebind(f, c);
  return xf__flow_begin_invalidate(f, tags, n, ns, now_ms);
}

/* Starts a delete (a tombstone for cfg->tombstone_ms): XF_OK
 * whether or not the entry existed; the share's copy dropped as for a set. */
xf__step xf__flow_begin_delete(xf__flow *f, const char *key, size_t keylen, int64_t now_ms);

/* A leased load's renewals (policy.max_load_ms): while the loader runs,
 * a driver that can send meanwhile (another thread, its loop) renews the
 * lease at next_ms, for the length xf__renewal_take gives, through a renew
 * flow of its own (xf__flow_begin_renew on a client of the same servers,
 * db and prefix), and feeds its outcome to xf__renewal_done. The times are
 * the driver's ms. */
typedef struct xf__renewal {
  char token[40];
  int64_t lease_ms;    /* each renewal's length */
  int64_t next_ms;     /* the next renewal; INT64_MAX: none */
  int64_t until_ms;    /* the load keeps its lease until then, no later */
  int64_t deadline_ms; /* the lease's deadline as of the last renewal known
                          to have succeeded (xf__renewal_done) */
  int64_t sent_ms;     /* the deadline the renewal last taken asks for */
} xf__renewal;

/* Whether f, at its LOAD step, holds a lease to renew while its loader
 * runs; 1 with *rn set (the first renewal a third of the lease after the
 * LOAD was asked for), else 0 (no lease, or max_load_ms not past it). */
int xf__flow_renewal(const xf__flow *f, xf__renewal *rn);

/* At now_ms, past rn->next_ms: the length of the renewal to send now, and
 * the next one scheduled; 0: no renewal now nor later (max_load_ms
 * reached: the lease runs out by itself). */
int64_t xf__renewal_take(xf__renewal *rn, int64_t now_ms);

/* A renew flow ended with rc: XF_OK moves the deadline to what it asked
 * for; XF_ESUPERSEDED (the lease is not the loader's any more) stops the
 * renewals; another failure waits for the next (the deadline stays: a
 * renewal that failed extended nothing). A driver that does not report
 * renews until max_load_ms, as if every renewal had failed. */
void xf__renewal_done(xf__renewal *rn, int rc);

/* Starts a renew flow: the lease of token on key (the user's key, as the
 * loading call got it) for lease_ms. One SEND, then DONE: XF_OK renewed,
 * XF_ESUPERSEDED the lease is not token's, or Redis' error. Emits
 * XF_EV_LEASE_RENEWED with its code. */
xf__step xf__flow_begin_renew(xf__flow *f, const char *key, size_t keylen,
                              const char *token, int64_t lease_ms, int64_t now_ms);

/* The same on a client (xf__flow_rebind, then the start). */
static inline xf__step xf__flow_start(xf__flow *f, xf_client *c, const char *key,
                                      size_t keylen, const xf_policy *p, xf_value *out,
                                      int64_t now_ms) {
  xf__flow_rebind(f, c);
  return xf__flow_begin(f, key, keylen, p, out, now_ms);
}

static inline int xf__flow_start_near(xf__flow *f, xf_client *c, const char *key,
                                      size_t keylen, const xf_policy *p, xf_value *out,
                                      uint64_t *count, int64_t now_ms) {
  xf__flow_rebind(f, c);
  return xf__flow_begin_near(f, key, keylen, p, out, count, now_ms);
}

static inline xf__step xf__flow_start_get(xf__flow *f, xf_client *c, const char *key,
                                          size_t keylen, xf_value *out, int64_t now_ms) {
  xf__flow_rebind(f, c);
  return xf__flow_begin_get(f, key, keylen, out, now_ms);
}

static inline xf__step xf__flow_start_set(xf__flow *f, xf_client *c, const char *key,
                                          size_t keylen, const void *data, size_t len,
                                          const xf_policy *p, int64_t now_ms) {
  xf__flow_rebind(f, c);
  return xf__flow_begin_set(f, key, keylen, data, len, p, now_ms);
}

static inline xf__step xf__flow_start_renew(xf__flow *f, xf_client *c, const char *key,
                                            size_t keylen, const char *token,
                                            int64_t lease_ms, int64_t now_ms) {
  xf__flow_rebind(f, c);
  return xf__flow_begin_renew(f, key, keylen, token, lease_ms, now_ms);
}

static inline xf__step xf__flow_start_delete(xf__flow *f, xf_client *c, const char *key,
                                             size_t keylen, int64_t now_ms) {
  xf__flow_rebind(f, c);
  return xf__flow_begin_delete(f, key, keylen, now_ms);
}

/* The outcome of a SEND: rc XF_OK with the reply (any type, error replies
 * included; the flow takes it), or the driver's error (XF_EIO, XF_ECONNECT,
 * XF_ENOMEM) with reply NULL. */
xf__step xf__flow_reply(xf__flow *f, int rc, xf__reply *reply, int64_t now_ms);

/* The outcome of a LOAD: the loader's return code and how long it ran. */
xf__step xf__flow_loaded(xf__flow *f, int loader_rc, int64_t delta_us, int64_t now_ms);

/* The outcome of a LOAD the driver answered without the loader (from the
 * share: another thread's load of the key): rc, and on XF_OK the value (data,
 * malloc'd, is the flow's). The value is served as XF_SOURCE_LOCAL. */
xf__step xf__flow_local(xf__flow *f, int rc, char *data, size_t len);

/* Background refresh (policy.background_refresh). A LOAD step that is an
 * early refresh of a value still within its ttl, its lease won, is
 * detachable when the policy lets it leave the request path on a driver
 * that can run it as `driver` says (xf__policy_background): the driver may, in
 * place of running the loader,
 *   - move it off the call: xf__flow_detach(f, bg, p, user_key, out): bg
 *     takes the lease, the key and the rest of the work, at the LOAD step
 *     (the driver runs bg as any flow: its loader, then SENDs on a client of
 *     the same servers, db and prefix: xf__flow_rebind(bg, it) first), with p,
 *     user_key and out the driver's copies, valid until bg's DONE (bg's
 *     value in *out is the driver's to free). f is DONE with the current
 *     value (XF_SOURCE_CACHE). A failed bg ends XF_ELOADER (the lease
 *     released, load_errors counted): the cached value stays.
 *   - or skip it (nowhere to run it): xf__flow_skip(f): the lease is
 *     released (SEND), then DONE with the current value; stats.loads is
 *     given back.
 * A driver that does neither runs the loader as for any LOAD. */
int xf__flow_detachable(const xf__flow *f, xf__off_path driver);
xf__step xf__flow_detach(xf__flow *f, xf__flow *bg, const xf_policy *p,
                         const char *user_key, xf_value *out);
xf__step xf__flow_skip(xf__flow *f);

/* Load timeouts (policy.soft_timeout_ms, hard_timeout_ms). At a LOAD step
 * (a leased load, or one after giving up a wait), the caller waits for its
 * loader until xf__flow_load_deadline (the driver's ms; INT64_MAX: no
 * bound): the call's start + soft_timeout_ms when it has a value to give
 * (an early refresh's current value, a stale value within stale_ms), else
 * + hard_timeout_ms. A driver whose loader still runs then calls
 * xf__flow_time_out(f, bg, p, user_key, out, now_ms): the load moves to bg
 * as with xf__flow_detach (bg at its LOAD: the driver feeds it the
 * loader's outcome and runs it to DONE: the write, or the release; p,
 * user_key, out: the driver's copies, valid until then), and f is DONE
 * with the value it had (soft: XF_SOURCE_CACHE or XF_SOURCE_STALE; hard: a
 * value within stale_ms or stale_if_error_ms, as XF_SOURCE_STALE), or
 * XF_ETIMEDOUT (hard, none to give). Emits XF_EV_SOFT_TIMEOUT or
 * XF_EV_HARD_TIMEOUT. A driver that cannot move a running loader off the
 * call ignores the deadline (the call waits for its loader, as before). */
int64_t xf__flow_load_deadline(const xf__flow *f);
xf__step xf__flow_time_out(xf__flow *f, xf__flow *bg, const xf_policy *p,
                           const char *user_key, xf_value *out, int64_t now_ms);

/* Frees what a flow abandoned before DONE holds (the machine has no abort
 * input: a driver that drops a call mid-way calls this). */
void xf__flow_abandon(xf__flow *f);

/* Whether the SEND step is a write fence (options.write_fence): a PING after
 * the write's reply, whose answer says Redis has sent what the write caused
 * (its invalidations). Any PING sent on the same connection after that
 * reply says as much: a driver that pipelines many calls' writes (batch.c)
 * may send one for all of them and feed the others xf__flow_fence_shared
 * with its outcome (ok: answered, not an error). */
int xf__flow_fencing(const xf__flow *f);
xf__step xf__flow_fence_shared(xf__flow *f, int ok, int64_t now_ms);

/* Whether the SEND step is a first READ that carries the tags' keys after
 * the entry's (a tagged call without a near cache on one node): how many
 * (0: it is not), with *keys and *lens theirs. A driver that reads several
 * flows' entries in one MGET (batch_read.c) may put them in it too and feed
 * the flow, as its reply, an array of the entry's reply then each tag's
 * value in this order (plain_read set: what the flow's own MGET gets). */
size_t xf__flow_tags_in_read(const xf__flow *f, const char *const **keys,
                             const size_t **lens);

/* Whether the SEND step asks for the key's lease (a driver may hold it back
 * until the key's turn to load comes: see batch.c). */
int xf__flow_leasing(const xf__flow *f);

/* A WAIT is over. */
xf__step xf__flow_woke(xf__flow *f, int64_t now_ms);

/* Whether the call's interrupt check (options.interrupt) asks it to stop. */
int xf__flow_interrupted(const xf__flow *f);

/* Ends the call with XF_ECANCELED (options.interrupt asked): from a WAIT, or
 * any step where the driver stops it; a SEND's reply wait the interrupt cut
 * short (xf__flow_reply with XF_ECANCELED) comes here too. A lease held (or
 * maybe held: a LEASE whose reply was cut) is released first: that SEND is
 * xf__flow_canceled, and the driver sends it with client->grace_ms. A value
 * already decided is freed. */
xf__step xf__flow_cancel(xf__flow *f);

/* How long the release of a call the interrupt ended may take (connect,
 * setup, reply): the server that was too slow may still be; past it the
 * lease is left to expire (lease_ms), and Ctrl-C is not held for longer. */
#define XF_CANCEL_GRACE_MS 250

/* Whether f's SEND is the release of a call the interrupt ended: to be sent
 * without asking the interrupt again, within a short grace (the lease
 * expires by itself when that fails). Inline, for the hot path: while a call
 * sends, only xf__flow_cancel has set f->rc to XF_ECANCELED (an outcome is
 * kept in f->rc before a release only). */
static inline int xf__flow_canceled(const xf__flow *f) { return f->rc == XF_ECANCELED; }

#endif
