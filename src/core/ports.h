/* What the flow needs from outside the core, as small tables of functions:
 * the near cache (src/near), the share (src/share) and which keys this
 * thread's loaders are computing (src/drivers); the drivers' waits reach
 * the near cache through the same table. The layers that implement
 * them fill a client's ports when it is opened (xf__ports_fill); the flow
 * calls nothing else outside src/core (the core_calls test checks the
 * core's object files for it). Every function is given the ports' self,
 * the client they were filled for. */
#ifndef XF_PORTS_H
#define XF_PORTS_H

#include <stddef.h>
#include <stdint.h>

#include "near.h"

struct xf_client;

/* A near hit's copy of the entry. */
typedef struct xf__port_hit {
  char *data; /* malloc'd, NUL-terminated; the caller's */
  size_t len;
  int64_t delta_us;
  int64_t remaining_ms;    /* > 0 */
  int64_t redis_expiry_ms; /* the Redis entry's logical expiry (server ms): with
                              delta_us, which entry this is a copy of */
  int negative;
  const unsigned char *tags; /* the entry's tag record (flow_tags.c), into data */
  size_t tags_len;           /* past the value's NUL; NULL and 0: none */
  uint64_t stamp_names;      /* its stamp's names (near.h) while current, checked with
                                the hit; else 0 */
  const struct xf__track_node *node; /* the node it is tracked on */
  int fd;                            /* the connection it was read over */
} xf__port_hit;

/* The near cache of the client's share (near.h says what each promises). */
typedef struct xf__port_near {
  /* The pending marker of a read about to be sent. */
  uint64_t (*token)(void *self);
  /* The entry of key (the client's namespace), when kept and within its
   * life at now_ms: 1 with *hit filled (hit->data the caller's), else 0. */
  int (*get)(void *self, const char *key, size_t keylen, int64_t now_ms, xf__port_hit *hit);
  /* Keeps what a read sent with token saw, over the connection of t, until
   * driver ms expires_ms (unless overtaken since token): the entries evicted
   * to make room. */
  uint64_t (*put)(void *self, const xf__track *t, uint64_t token, const char *key,
                  size_t keylen, const char *value, size_t len, const unsigned char *tags,
                  size_t tags_len, int64_t delta_us, int64_t redis_expiry_ms,
                  int64_t expires_ms, int negative);
  /* The tag epoch (near.h), to be taken before a call looks its versions
   * up. */
  uint64_t (*tag_epoch)(void *self);
  /* Stamps the entry of key (st->node's) whose tag record is tags: unless
   * it is another entry by now, the epoch moved past st->epoch, or the
   * versions were read over more connections than a hit polls. */
  void (*stamp)(void *self, const char *key, size_t keylen, const unsigned char *tags,
                size_t tags_len, const xf__tag_stamp *st);
  /* An own write or delete of key: its entries go, a read in flight is not
   * kept. */
  void (*drop)(void *self, const char *key, size_t keylen);
  /* XF_EV_INVALIDATION: what the near cache was told since the last report,
   * through the client's hook, as driver's events. */
  void (*report)(void *self, xf_driver driver);

  /* What the drivers' waits ask (wake-on-write: a WAIT of a flow whose
   * wake_on_write is set ends when its key is invalidated after the read
   * that saw the lease, f->near_token). */
  /* Blocks until key is invalidated (or its node dropped) after token, or
   * until driver ms until_ms: 1 when it was, 0 when the time ran out. */
  int (*wait)(void *self, const char *key, size_t keylen, uint64_t token, int64_t until_ms);
  /* Whether key was invalidated (or its node dropped) since token: no wait. */
  int (*changed)(void *self, const char *key, size_t keylen, uint64_t token);
  /* fd, a pipe's write end, gets a byte on every invalidation and node drop
   * until removed (an event loop's or a batch's wake pipe): XF_OK, or
   * XF_ENOMEM. */
  int (*notify_add)(void *self, int fd);
  void (*notify_remove)(void *self, int fd);
  /* A batch's keys (as the user gave them, count of them) looked up
   * together, once per node: until batch_end, the client's gets of those
   * keys take their results from it. */
  void (*batch_begin)(void *self, size_t count, const char *const *keys, const size_t *lens,
                      int64_t now_ms);
  void (*batch_end)(void *self);
} xf__port_near;

/* The process share (share.h). */
typedef struct xf__port_share {
  /* Redis was sent a write or delete of key: the share's copy goes. */
  void (*drop)(void *self, const char *key, size_t keylen);
} xf__port_share;

typedef struct xf__ports {
  void *self;                  /* given to every function of near and share */
  const xf__port_near *near;   /* NULL = no near cache */
  const xf__port_share *share; /* NULL = no share */
  /* Whether a loader on the calling thread is computing key of namespace
   * ns (nest.h); NULL = never asked (no driver runs loaders here). */
  int (*loading)(const char *ns, size_t ns_len, const char *key, size_t keylen);
} xf__ports;

/* Fills c's ports from what c was opened with (its share, its near cache):
 * defined above the core (src/drivers/ports.c, with the share's part from
 * xf__share_fill_ports), called once by xf_client_open. */
void xf__ports_fill(struct xf_client *c);

#endif
