/* Calls sent together (xf_call_send_many): the first plain reads of entries,
 * grouped by slot, go as one MGET each; each call then takes its own part as
 * if its own GET had answered. */
#include <stdlib.h>

#include "call.h"
#include "call_link.h"
#include "client.h"
#include "many.h"

/* The MGET's outcome for one call: as if its own GET had answered (many.h);
 * one the engine asks to resend goes once more alone. */
static void many_moved(void *item, int rc, xf__reply **part) {
  xf_call *call = item;
  xf_link *k = call->link;
  call->many = NULL;
  if (rc == XF__LINK_AGAIN) {
    call->resend = 1;
    call->on_link = ON_WAIT;
    k->waiting.at[k->waiting.len++] = call;
    return;
  }
  xf__reply *r = *part;
  *part = NULL;
  xf__link_moved(k, call, r, rc);
}

/* Whether call's command is a first plain GET of an entry with nothing
 * before it: it may share an MGET. */
static int mgettable(const xf_call *call) {
  return call->send_cmd == &call->f.cmd && call->pre == 0 && xf__many_fits(&call->f);
}

static int slot_of(const xf_call *call) {
  return xf__many_slot(&call->f, call->f.c->routes.mode != XF_ROUTE_STANDALONE);
}

static xf__flow *flow_of(void *item) { return &((xf_call *)item)->f; }

/* Sends calls[0..n) (mgettable, one slot) as one MGET on k's live stream. */
static int send_mget(xf_link *k, xf_call **calls, size_t n, int64_t now_ms) {
  int rc;
  xf__many *m = xf__many_submit(&k->l, &k->c->rt, k->c->near != NULL, n,
                                (void *const *)calls, flow_of, many_moved, now_ms, &rc);
  for (size_t i = 0; m && i < n; i++) {
    calls[i]->many = m;
    calls[i]->on_link = ON_WIRE;
  }
  return rc;
}

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
    for (e = s + 1; e < ng && e - s < XF__MANY_MAX_KEYS; e++)
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
