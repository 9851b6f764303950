/* Wake-on-write for the event-loop driver (xf_async) with a share's near
 * cache: the near cache's wake pipe (xf_call_wake_open on the handle's core
 * client) watched by the user's loop through the adapter's watch hook, as a
 * connection's socket is (a pseudo connection that is only that pipe). When
 * it is readable, the waiters whose key was invalidated since their read are
 * made due now: the loop's timer runs them on its next tick, and they read
 * the writer's value at once instead of at their next poll (the fallback,
 * every 200 ms, as for the other drivers). */
#include <stdlib.h>
#include <unistd.h>

#include "async.h"
#include "flow_steps.h"

int xf__awake_open(xf_async *ac) {
  xf_client *c = ac->core;
  ac->wake_rd = -1;
  if (!c->near)
    return XF_OK;
  xf__aconn *w = calloc(1, sizeof *w);
  if (!w)
    return XF_OK; /* no wake: the waits poll */
  int fd;
  if (xf_call_wake_open(c, &fd) != XF_OK || fd < 0) {
    free(w);
    c->errstr[0] = '\0';
    return XF_OK;
  }
  w->ac = ac;
  w->is_waker = 1;
  if (ac->loop.watch(ac->loop.data, &w->watch, fd, XF_ASYNC_READ, w) != 0) {
    xf_call_wake_close(c, fd);
    free(w);
    return XF_OK;
  }
  ac->waker = w;
  ac->wake_rd = fd;
  return XF_OK;
}

void xf__awake_close(xf_async *ac) {
  xf__aconn *w = ac->waker;
  if (!w)
    return;
  if (w->watch)
    ac->loop.unwatch(ac->loop.data, w->watch);
  xf_call_wake_close(ac->core, ac->wake_rd);
  free(w);
  ac->waker = NULL;
  ac->wake_rd = -1;
}

int xf__awake_missed(const xf_async *ac, const xf__acall *k) {
  const xf__flow *f = &k->f;
  return ac->waker && f->state == XF__WAIT && f->wake_on_write &&
         ac->core->ports.near->changed(ac->core->ports.self, f->key.data, f->key.len,
                                       f->near_token);
}

void xf__awake_ready(xf_async *ac) {
  char buf[64];
  while (read(ac->wake_rd, buf, sizeof buf) > 0)
    ;
  size_t n = ac->heap_len;
  if (!n)
    return;
  xf__acall **all = malloc(n * sizeof *all);
  if (!all)
    return; /* they wake at their poll */
  for (size_t i = 0; i < n; i++)
    all[i] = ac->heap[i];
  ac->heap_len = 0;
  int64_t now_ms = xf__now_ms();
  for (size_t i = 0; i < n; i++) {
    xf__acall *k = all[i];
    if (!k->resend && k->wake_ms > now_ms && xf__awake_missed(ac, k))
      k->wake_ms = now_ms;
    xf__aheap_push(ac, k);
  }
  free(all);
  xf__async_enter(ac); /* leaving re-arms the timer for them */
  xf__async_leave(ac);
}
