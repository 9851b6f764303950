/* What the flow needs from outside the core, as small tables of functions:
 * the near cache (src/near), the share (src/share) and which keys this
 * thread's loaders are computing (src/drivers). The layers that implement
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

/* The near cache of the client's share (near.h says what each promises). */
typedef struct xf__near_port {
  /* The pending marker of a read about to be sent. */
  uint64_t (*token)(void *self);
  /* The entry of key (the client's namespace), when kept and within its
   * life at now_ms: 1 with *hit filled (hit->data the caller's), else 0. */
  int (*get)(void *self, const char *key, size_t keylen, int64_t now_ms, xf__near_hit *hit);
  /* Keeps what a read sent with token saw, over the connection of t, until
   * driver ms expires_ms (unless overtaken since token): the entries evicted
   * to make room. */
  uint64_t (*put)(void *self, const xf__track *t, uint64_t token, const char *key,
                  size_t keylen, const char *value, size_t len, int64_t delta_us,
                  int64_t redis_expiry_ms, int64_t expires_ms, int negative);
  /* An own write or delete of key: its entries go, a read in flight is not
   * kept. */
  void (*drop)(void *self, const char *key, size_t keylen);
  /* XF_EV_INVALIDATION: what the near cache was told since the last report,
   * through the client's hook, as driver's events. */
  void (*report)(void *self, xf_driver driver);
} xf__near_port;

/* The process share (share.h). */
typedef struct xf__share_port {
  /* Redis was sent a write or delete of key: the share's copy goes. */
  void (*drop)(void *self, const char *key, size_t keylen);
} xf__share_port;

typedef struct xf__ports {
  void *self;                  /* given to every function of near and share */
  const xf__near_port *near;   /* NULL = no near cache */
  const xf__share_port *share; /* NULL = no share */
  /* Whether a loader on the calling thread is computing key of namespace
   * ns (nest.h); NULL = never asked (no driver runs loaders here). */
  int (*loading)(const char *ns, size_t ns_len, const char *key, size_t keylen);
} xf__ports;

/* Fills c's ports from what c was opened with (its share, its near cache):
 * defined above the core (src/drivers/ports.c), called once by
 * xf_client_open. */
void xf__ports_fill(struct xf_client *c);

#endif
