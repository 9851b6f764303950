/* The batch driver's state, shared by batch.c (the rounds after the first,
 * the loaders) and batch_read.c (the first round: every read at once). */
#ifndef XF_BATCH_H
#define XF_BATCH_H

#include "client_io.h"
#include "drive.h"
#include "reply.h"

typedef struct batch_loaders {
  xf_loader_fn one;        /* per key; or */
  xf_batch_loader_fn many; /* every won key in one call */
  void *ud;
} batch_loaders;

/* The flows who[first .. first+count) read with one command, cmd. */
typedef struct xf__batch_group {
  size_t first, count;
  xf__cmd *cmd;
  int reload;              /* NOSCRIPT: load read_many, send cmd again */
  struct xf__clock *clock; /* whose server answered (cmd->clock_out): each flow's */
  xf__track track;         /* whose tracking it came under (cmd->track_out): each
                              flow's, so its read fills the near cache */
  size_t extra;            /* an MGET's: the tags' keys after the entries' */
} xf__batch_group;

typedef struct batch {
  xf_client *c;
  size_t n;
  xf__flow *flows;
  xf__step *steps;
  const xf__cmd **cmds; /* the pending SENDs, in the order sent */
  size_t *who;          /* which flow each pending SEND is */
  int *rcs;
  xf__reply **replies;
  const char **keys; /* read_many's KEYS; the batch loader's keys */
  size_t *lens;
  xf_sink **sinks;
  xf__reply **parts;       /* read_many's reply, split per key */
  xf__batch_group *groups; /* the first round (lazily) */
  xf__cmd *many;           /* the first round's read_many calls (lazily) */
  const char **read_keys;  /* the first round's MGETs' keys, entries' then tags' */
  size_t *read_lens;       /* (lazily, when a flow's read carries tags) */
  size_t *tag_at;          /* who[j]'s tag t is its MGET's reply's element
                              tag_at[j * (XF_MAX_TAGS + 1) + t] */
  int64_t lease_ms;        /* the policy's */
  size_t loaded;           /* per-key loads run so far, and their time */
  int64_t load_us;
  xf__flow **order;     /* the batch loader's keys by key, and how each */
  int *roles;           /* gets its value (batch_load.c; lazily) */
  int wake_rd, wake_wr; /* > 0: the wake pipe of several waits (batch_wait.c) */
  size_t *fence_of;     /* flow i's write fence is the PING sent j-th, + 1 (0: its
                           own or none): one per connection and round (send_all) */
  size_t *fence_at;     /* where in the round the PINGs sent are */
  int *fence_ok;        /* whether the round's j-th command, a PING, was answered */
  xf__flow **waiting;   /* the leased flows whose loads are due (load_all) */
} batch;

/* The first round: the read of every flow still at its first SEND, in one
 * pipeline of read_many calls (one per slot in Redis Cluster; a key alone in
 * its slot sends its own read). Flows whose call was refused for reasons
 * that may hold for some keys only (TRYAGAIN during a migration, CROSSSLOT, an
 * ACL's NOPERM) stay at their SEND, to go one by one. */
void xf__batch_read_all(batch *b);

/* The flows who[0..k), at their LOAD, loaded with one call of l->many:
 * through the client's share for those failing open (see batch_load.c). */
void xf__batch_load_many(batch *b, const batch_loaders *l, size_t k);

/* Sleeps until driver ms wake_ms, or (a near cache) until the key of a flow
 * waiting with wake_on_write is invalidated since its read: 0 then, 1 when
 * the interrupt asked to stop (batch_wait.c). */
int xf__batch_sleep(batch *b, int64_t wake_ms);

/* Whether flow i waits for a key invalidated since its read: due now. */
int xf__batch_woken(const batch *b, size_t i);

/* Closes the wake pipe, if the batch opened one. */
void xf__batch_wake_close(batch *b);

#endif
