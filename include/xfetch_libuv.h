/* xfetch's event-loop driver on a libuv loop: include this header (it pulls
 * in <uv.h>) and link libuv yourself; libxfetch does not depend on it.
 *
 *   xf_async *ac;
 *   int rc = xf_async_open_libuv(&ac, &opts, uv_default_loop());
 *   ... xf_async_get_or_compute(ac, ...) from the loop ...
 *   xf_async_close(ac);  then let the loop run once more: it closes the timer
 *                        and the poll handles (uv_close) before uv_loop_close.
 *
 * Each connection is a uv_poll_t on its socket, watched for reading while it
 * is open: the loop stays alive while a connection is open, so
 * uv_run(UV_RUN_DEFAULT) returns after xf_async_close (or uv_stop). A
 * uv_run(UV_RUN_ONCE) turn that ran a call's callback returns, as one whose
 * I/O did (the adapter wakes the loop's poll after its timer ran). Under a
 * strict -std=c11, <uv.h> needs _DEFAULT_SOURCE (or _GNU_SOURCE) defined. */
#ifndef XFETCH_LIBUV_H
#define XFETCH_LIBUV_H

#include <stdlib.h>
#include <uv.h>

#include "xfetch.h"

/* The adapter's state: the loop, the handle's one timer and the wake of
 * the loop's poll (unreferenced: it keeps no loop alive). */
typedef struct xf_libuv {
  uv_loop_t *loop;
  uv_timer_t timer;
  uv_async_t kick;
  int open_handles; /* the state goes when both are closed */
  xf_async *ac;
} xf_libuv;

/* One connection's socket: its poll handle. */
typedef struct xf_libuv_watch {
  uv_poll_t poll;
  xf_async_conn *conn;
} xf_libuv_watch;

/* The poll handle's callback: hands the readiness to the driver. */
static inline void xf_libuv_ready(uv_poll_t *poll, int status, int events) {
  xf_libuv_watch *w = (xf_libuv_watch *)poll->data;
  int ready = (events & UV_READABLE ? XF_ASYNC_READ : 0) |
              (events & UV_WRITABLE ? XF_ASYNC_WRITE : 0);
  xf_async_ready(w->conn, status < 0 ? XF_ASYNC_READ | XF_ASYNC_WRITE : ready);
}

/* Watches fd for events (a poll handle made on the first call). */
static inline int xf_libuv_watch_fd(void *data, void **watch, int fd, int events,
                                    xf_async_conn *conn) {
  xf_libuv *u = (xf_libuv *)data;
  xf_libuv_watch *w = (xf_libuv_watch *)*watch;
  if (!w) {
    w = (xf_libuv_watch *)calloc(1, sizeof *w);
    if (!w)
      return -1;
    if (uv_poll_init_socket(u->loop, &w->poll, fd) != 0) {
      free(w);
      return -1;
    }
    w->poll.data = w;
    w->conn = conn;
    *watch = w;
  }
  if (!events)
    return uv_poll_stop(&w->poll) == 0 ? 0 : -1;
  int flags = (events & XF_ASYNC_READ ? UV_READABLE : 0) |
              (events & XF_ASYNC_WRITE ? UV_WRITABLE : 0);
  return uv_poll_start(&w->poll, flags, xf_libuv_ready) == 0 ? 0 : -1;
}

/* Frees a poll handle once libuv has closed it. */
static inline void xf_libuv_unwatched(uv_handle_t *handle) { free(handle->data); }

/* Stops watching; the handle goes on the loop's next turn. */
static inline void xf_libuv_unwatch(void *data, void *watch) {
  xf_libuv_watch *w = (xf_libuv_watch *)watch;
  (void)data;
  uv_poll_stop(&w->poll);
  uv_close((uv_handle_t *)&w->poll, xf_libuv_unwatched);
}

/* The kick's callback: nothing; being called ends the poll. */
static inline void xf_libuv_kicked(uv_async_t *kick) { (void)kick; }

/* The timer's callback: hands the event to the driver, which may have ended
 * a call (a near hit, an error served on the next tick, a wait's end).
 * libuv (1.44) runs the timers that are due when uv_run(UV_RUN_ONCE) starts
 * before it polls, and that poll then waits for I/O (with no timer armed,
 * for ever) although the turn ran the callback: the kick makes it return. */
static inline void xf_libuv_fired(uv_timer_t *timer) {
  xf_libuv *u = (xf_libuv *)timer->data;
  xf_async_timer_fired(u->ac);
  if (!uv_is_closing((uv_handle_t *)&u->kick)) /* a callback may close the handle */
    uv_async_send(&u->kick);
}

/* Arms the timer (uv_timer_start replaces an earlier arming). */
static inline void xf_libuv_timer_start(void *data, int64_t delay_ms) {
  xf_libuv *u = (xf_libuv *)data;
  uv_timer_start(&u->timer, xf_libuv_fired, (uint64_t)delay_ms, 0);
}

/* Disarms the timer. */
static inline void xf_libuv_timer_stop(void *data) {
  uv_timer_stop(&((xf_libuv *)data)->timer);
}

/* Frees the state once libuv has closed its last handle. */
static inline void xf_libuv_closed(uv_handle_t *handle) {
  xf_libuv *u = (xf_libuv *)handle->data;
  if (--u->open_handles == 0)
    free(u);
}

/* Closes the timer and the kick; the state goes with them on the loop's
 * next turn. */
static inline void xf_libuv_cleanup(void *data) {
  xf_libuv *u = (xf_libuv *)data;
  uv_close((uv_handle_t *)&u->timer, xf_libuv_closed);
  uv_close((uv_handle_t *)&u->kick, xf_libuv_closed);
}

/* Opens an xf_async handle (see xf_async_open) whose connection and timer
 * live on loop. Returns what xf_async_open returns (XF_ENOMEM when the
 * adapter's state cannot be allocated). Call from the loop's thread. */
static inline int xf_async_open_libuv(xf_async **out, const xf_options *opts,
                                      uv_loop_t *loop) {
  if (out)
    *out = NULL;
  if (!out || !loop)
    return XF_EINVAL;
  xf_libuv *u = (xf_libuv *)calloc(1, sizeof *u);
  if (!u)
    return XF_ENOMEM;
  u->loop = loop;
  if (uv_timer_init(loop, &u->timer) != 0) {
    free(u);
    return XF_ENOMEM;
  }
  u->timer.data = u;
  u->open_handles = 1;
  if (uv_async_init(loop, &u->kick, xf_libuv_kicked) != 0) {
    uv_close((uv_handle_t *)&u->timer, xf_libuv_closed);
    return XF_ENOMEM;
  }
  u->kick.data = u;
  u->open_handles = 2;
  uv_unref((uv_handle_t *)&u->kick);
  xf_async_loop hooks = {u,
                         xf_libuv_watch_fd,
                         xf_libuv_unwatch,
                         xf_libuv_timer_start,
                         xf_libuv_timer_stop,
                         xf_libuv_cleanup};
  int rc = xf_async_open(out, opts, &hooks);
  if (rc == XF_OK)
    u->ac = *out;
  return rc;
}

#endif /* XFETCH_LIBUV_H */
