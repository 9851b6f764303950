/* An MGET for several flows' first reads, and its reply split back (many.h). */
#include <stdlib.h>

#include "cluster.h"
#include "entry.h"
#include "flow_steps.h"
#include "many.h"

static void many_free(xf__many *m) {
  free(m->items);
  free(m->keys);
  free(m->lens);
  free(m);
}

int xf__many_fits(const xf__flow *f) {
  return f->state == XF__READ && f->cmd.plain_out && f->read_format == XF_ENTRY_STRING &&
         !f->tag_in_read && f->cmd.argc == 2;
}

int xf__many_slot(const xf__flow *f, int cluster) {
  return cluster ? xf__cluster_keyslot(f->cmd.argv[1], f->cmd.lens[1]) : -1;
}

/* The MGET's outcome, to each item: its part, a copy of an error reply, or
 * the connection's failure. */
static void on_many(xf__link *l, void *ud, int rc, xf__reply **reply) {
  (void)l;
  xf__many *m = ud;
  xf__reply *r = rc == XF_OK ? *reply : NULL, **parts = NULL;
  if (r)
    *reply = NULL;
  if (r && r->type != XF_REPLY_ERROR) {
    if (!(parts = calloc(m->n, sizeof *parts)))
      rc = XF_ENOMEM, xf__reply_free(r);
    else if ((rc = xf__entry_split_read_many(m->rt, r, m->n, parts)) != XF_OK)
      free(parts), parts = NULL;
    r = NULL; /* taken */
  }
  for (size_t i = 0; i < m->n; i++) {
    xf__reply *own = parts ? parts[i] : NULL;
    if (!m->items[i]) {
      xf__reply_free(own);
      continue;
    }
    int item_rc = rc;
    if (parts) {
      xf__flow *f = m->flow_of(m->items[i]);
      f->clock = m->clock;
      f->track = m->track; /* its read offers its value to the near cache */
      f->plain_read = 1;
    } else if (r && !(own = xf__reply_copy(r))) {
      item_rc = XF_ENOMEM;
    } else if (!r && item_rc == XF_OK) {
      item_rc = XF_EIO;
    }
    m->fn(m->items[i], item_rc, &own);
    xf__reply_free(own);
  }
  xf__reply_free(r);
  free(parts);
  many_free(m);
}

xf__many *xf__many_submit(xf__link *l, xf__runtime *rt, int track, size_t n,
                          void *const *items, xf__many_flow_fn *flow_of, xf__many_fn *fn,
                          int64_t now_ms, int *rc) {
  xf__many *m = calloc(1, sizeof *m);
  if (!m || !(m->items = malloc(n * sizeof *m->items)) ||
      !(m->keys = malloc(n * sizeof *m->keys)) ||
      !(m->lens = malloc(n * sizeof *m->lens))) {
    if (m)
      many_free(m);
    *rc = XF_ENOMEM;
    return NULL;
  }
  m->n = n;
  m->rt = rt;
  m->flow_of = flow_of;
  m->fn = fn;
  for (size_t i = 0; i < n; i++) {
    const xf__flow *f = flow_of(items[i]);
    m->items[i] = items[i];
    m->keys[i] = f->cmd.argv[1];
    m->lens[i] = f->cmd.lens[1];
  }
  xf__entry_mget_cmd(&m->cmd, n, m->keys, m->lens);
  m->cmd.clock_out = &m->clock;
  if (track)
    m->cmd.track_out = &m->track;
  if ((*rc = xf__link_submit(l, &m->cmd, 0, now_ms, on_many, m)) != XF_OK) {
    many_free(m);
    return NULL;
  }
  return m;
}
