/* One MGET carrying the first plain reads of several flows on one
 * connection (a batch's hits), and its reply split back: each flow takes its
 * own part as if its own GET had answered. For the drivers that send calls
 * together: the sans-I/O call's xf_call_send_many, the event loop's corked
 * sends (xf_async_cork). */
#ifndef XF_MANY_H
#define XF_MANY_H

#include <stddef.h>
#include <stdint.h>

#include "flow.h"
#include "link.h"

/* Most keys one MGET carries: bound how long it keeps Redis from others. */
#define XF__MANY_MAX_KEYS 512

/* One item's outcome: rc XF_OK with *part (its own reply, or a copy of an
 * error reply to follow as its own: MOVED, TRYAGAIN...; taken by setting
 * *part NULL, else freed after), or the connection's failure (XF__LINK_AGAIN:
 * the engine's, to send again alone). */
typedef void xf__many_fn(void *item, int rc, xf__reply **part);

/* The flow of an item. */
typedef xf__flow *xf__many_flow_fn(void *item);

typedef struct xf__many {
  size_t n;
  void **items; /* NULL where an item left meanwhile: its part is dropped */
  const char **keys;
  size_t *lens;
  xf__cmd cmd;
  xf__clock *clock; /* whose server answered: each flow's */
  xf__track track;  /* whose tracking it came under: each flow's */
  xf__runtime *rt;
  xf__many_flow_fn *flow_of;
  xf__many_fn *fn;
} xf__many;

/* Whether f's next command may go in an MGET: a first plain GET of a
 * format-2 entry, untagged. */
int xf__many_fits(const xf__flow *f);

/* The slot of f's key in a Cluster (cluster 0: -1), to group by. */
int xf__many_slot(const xf__flow *f, int cluster);

/* Submits one MGET of the flows of items[0..n) (their keys in one slot in a
 * Cluster) on l, tracked for the near cache when track; each item's outcome
 * goes to fn(items[i], ...). Returns the MGET in flight (a driver that drops
 * an item sets its items[i] NULL), or NULL with *rc the refusal: nothing was
 * sent. */
xf__many *xf__many_submit(xf__link *l, xf__runtime *rt, int track, size_t n,
                          void *const *items, xf__many_flow_fn *flow_of, xf__many_fn *fn,
                          int64_t now_ms, int *rc);

#endif
