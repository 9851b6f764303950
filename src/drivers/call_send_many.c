/* Calls sent together (xf_call_send_many): the first plain reads of entries,
 * grouped by slot, go as one MGET each; each call then takes its own part as
 * if its own GET had answered. */
#include <stdlib.h>

#include "call.h"
#include "call_link.h"
#include "client.h"
#include "cluster.h"
#include "entry.h"
#include "flow_steps.h"

static void many_free(xf__many *m) {
  free(m->calls);
  free(m->keys);
  free(m->lens);
  free(m);
}

/* The MGET's outcome: each call gets its own part as if its own GET had
 * answered (an error reply: each a copy, to follow as its own: MOVED,
 * TRYAGAIN...), or the link's failure; resent ones go once more alone. */
static void on_many(xf__link *l, void *ud, int rc, xf__reply **reply) {
  (void)l;
  xf__many *m = ud;
  xf_link *k = m->k;
  xf__reply *r = rc == XF_OK ? *reply : NULL;
  if (r)
    *reply = NULL;
  xf__reply **parts = NULL;
  if (r && r->type != XF_REPLY_ERROR) {
    if (!(parts = calloc(m->n, sizeof *parts)))
      rc = XF_ENOMEM;
    else if ((rc = xf__entry_split_read_many(&k->c->rt, r, m->n, parts)) != XF_OK)
      free(parts), parts = NULL;
    r = NULL; /* taken */
  }
  for (size_t i = 0; i < m->n; i++) {
    xf_call *call = m->calls[i];
    if (!call) {
      if (parts)
        xf__reply_free(parts[i]);
      continue;
    }
    call->many = NULL;
    if (rc == XF__LINK_AGAIN) {
      call->resend = 1;
      call->on_link = ON_WAIT;
      k->waiting.at[k->waiting.len++] = call;
    } else if (parts) {
      call->f.clock = m->clock;
      call->f.track = m->track; /* its read offers its value to the near cache */
      call->f.plain_read = 1;
      xf__link_moved(k, call, parts[i], XF_OK);
    } else if (r) {
      xf__reply *copy = xf__reply_copy(r);
      xf__link_moved(k, call, copy, copy ? XF_OK : XF_ENOMEM);
    } else {
      xf__link_moved(k, call, NULL, rc != XF_OK ? rc : XF_EIO);
    }
  }
  if (r)
    xf__reply_free(r);
  free(parts);
  many_free(m);
}

/* Whether call's command is a first plain GET of an entry with nothing
 * before it (plain_out: a plain read, whatever the route encoded for a
 * driver without a clock): it may share an MGET. */
static int mgettable(const xf_call *call) {
  return call->send_cmd == &call->f.cmd && call->pre == 0 && call->f.state == XF__READ &&
         call->f.cmd.plain_out && call->f.read_format == XF_ENTRY_STRING &&
         !call->f.tag_in_read && call->f.cmd.argc == 2;
}

static int slot_of(const xf_call *call) {
  return xf__cluster_keyslot(call->f.cmd.argv[1], call->f.cmd.lens[1]);
}

/* Sends calls[0..n) (mgettable, one slot) as one MGET on k's live stream. */
static int send_mget(xf_link *k, xf_call **calls, size_t n, int64_t now_ms) {
  xf__many *m = calloc(1, sizeof *m);
  if (!m || !(m->calls = malloc(n * sizeof *m->calls)) ||
      !(m->keys = malloc(n * sizeof *m->keys)) ||
      !(m->lens = malloc(n * sizeof *m->lens))) {
    if (m)
      many_free(m);
    return XF_ENOMEM;
  }
  m->k = k;
  m->n = n;
  for (size_t i = 0; i < n; i++) {
    m->calls[i] = calls[i];
    m->keys[i] = calls[i]->f.cmd.argv[1];
    m->lens[i] = calls[i]->f.cmd.lens[1];
  }
  xf__entry_mget_cmd(&m->cmd, n, m->keys, m->lens);
  m->cmd.clock_out = &m->clock;
  if (k->c->near)
    m->cmd.track_out = &m->track;
  int rc = xf__link_submit(&k->l, &m->cmd, 0, now_ms, on_many, m);
  if (rc != XF_OK) {
    many_free(m);
    return rc;
  }
  for (size_t i = 0; i < n; i++) {
    calls[i]->many = m;
    calls[i]->on_link = ON_WIRE;
  }
  return XF_OK;
}

/* Most keys one MGET carries: bound how long it keeps Redis from others. */
#define MANY_MAX_KEYS 512

static int by_slot(const void *pa, const void *pb) {
  int a = slot_of(*(xf_call *const *)pa), b = slot_of(*(xf_call *const *)pb);
  return (a > b) - (a < b);
}

int xf_call_send_many(xf_call *const *calls, size_t n, xf_link *k, int64_t now_ms) {
  if (!k || (n && !calls))
    return XF_EINVAL;
  xf_call **group = malloc((n ? n : 1) * sizeof *group);
  if (!group)
    return XF_ENOMEM;
  size_t ng = 0;
  int rc = XF_OK;
  for (size_t i = 0; i < n && rc == XF_OK; i++) {
    xf_call *call = calls[i];
    int first_plain = k->l.connected && call && mgettable(call) &&
                      call->step == XF_STEP_SEND && call->on_link == ON_NONE &&
                      !call->got_set;
    /* a plain read goes as one where the clock is fresh, or behind the read
     * script that refreshes it (the first call's, sent alone) */
    if (first_plain && ng == 0 && !xf__clock_fresh(k->l.clock, now_ms) &&
        !xf__clock_refreshing(k->l.clock ? k->l.clock : &(xf__clock){0}, k->l.refresh_ms,
                              now_ms))
      first_plain = 0;
    if (first_plain)
      group[ng++] = call;
    else
      rc = xf_call_send(call, k, now_ms);
  }
  if (rc == XF_OK && ng > 1 && k->c->routes.mode != XF_ROUTE_STANDALONE)
    qsort(group, ng, sizeof *group, by_slot);
  for (size_t s = 0, e; rc == XF_OK && s < ng; s = e) {
    int slot = k->c->routes.mode != XF_ROUTE_STANDALONE ? slot_of(group[s]) : -1;
    for (e = s + 1; e < ng && e - s < MANY_MAX_KEYS; e++)
      if (slot >= 0 && slot_of(group[e]) != slot)
        break;
    if (e - s == 1) {
      rc = xf_call_send(group[s], k, now_ms);
      continue;
    }
    if (xf__calls_reserve(&k->ready, k->ready.len + k->attached + (e - s)) != XF_OK ||
        xf__calls_reserve(&k->waiting, k->attached + (e - s)) != XF_OK) {
      rc = XF_ENOMEM;
      break;
    }
    k->now_ms = now_ms;
    if ((rc = send_mget(k, group + s, e - s, now_ms)) != XF_OK)
      break;
    for (size_t j = s; j < e; j++) {
      group[j]->link = k;
      group[j]->resend = 0;
    }
    k->attached += e - s;
  }
  free(group);
  return rc;
}
