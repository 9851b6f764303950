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

/* Opens a pipe on the near cache and watches its read end with w: 0, or -1
 * (none: the waits poll). */
static int watch_pipe(xf_async *ac, xf__aconn *w) {
  xf_client *c = ac->core;
  int fd;
  if (xf_call_wake_open(c, &fd) != XF_OK || fd < 0) {
    c->errstr[0] = '\0';
    return -1;
  }
  if (ac->loop.watch(ac->loop.data, &w->watch, fd, XF_ASYNC_READ, w) != 0) {
    xf_call_wake_close(c, fd);
    return -1;
  }
  ac->wake_rd = fd;
  return 0;
}

int xf__awake_open(xf_async *ac) {
  ac->wake_rd = -1;
  if (!ac->core->near)
    return XF_OK;
  xf__aconn *w = calloc(1, sizeof *w);
  if (!w)
    return XF_OK; /* no wake: the waits poll */
  w->ac = ac;
  w->is_waker = 1;
  if (watch_pipe(ac, w) != 0) {
    free(w);
    return XF_OK;
  }
  ac->waker = w;
  return XF_OK;
}

/* The pseudo connection stays (the loop may still hand it an event it had
 * ready), its pipe is the child's own. */
void xf__awake_forked(xf_async *ac) {
  xf__aconn *w = ac->waker;
  if (!w)
    return;
  if (w->watch) /* before the descriptor closes (a libuv rule) */
    ac->loop.unwatch(ac->loop.data, w->watch);
  w->watch = NULL;
  if (ac->wake_rd >= 0) /* the near cache no longer writes to it in the child */
    xf_call_wake_close(ac->core, ac->wake_rd);
  ac->wake_rd = -1;
  watch_pipe(ac, w);
}

void xf__awake_close(xf_async *ac) {
  xf__aconn *w = ac->waker;
  if (!w)
    return;
  if (w->watch)
    ac->loop.unwatch(ac->loop.data, w->watch);
  if (ac->wake_rd >= 0)
    xf_call_wake_close(ac->core, ac->wake_rd);
  free(w);
  ac->waker = NULL;
  ac->wake_rd = -1;
}

int xf__awake_missed(const xf_async *ac, const xf__acall *k) {
  const xf__flow *f = &k->f;
  return ac->wake_rd >= 0 && f->state == XF__WAIT && f->wake_on_write &&
         ac->core->ports.near->changed(ac->core->ports.self, f->key.data, f->key.len,
                                       f->near_token);
}

void xf__awake_ready(xf_async *ac) {
  char buf[64];
  if (ac->wake_rd < 0)
    return;
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
