/* xfetch's event-loop driver on a libuv loop: include this header (it pulls
 * in <uv.h> and hiredis' libuv adapter) and link libuv yourself; libxfetch
 * does not depend on it.
 *
 *   xf_async *ac;
 *   int rc = xf_async_open_libuv(&ac, &opts, uv_default_loop());
 *   ... xf_async_get_or_compute(ac, ...) from the loop ...
 *   xf_async_close(ac);  then let the loop run once more: it closes the timer
 *                        and the poll handle (uv_close) before uv_loop_close.
 *
 * hiredis' adapter keeps the loop alive while the connection is open, so
 * uv_run(UV_RUN_DEFAULT) returns after xf_async_close (or uv_stop). Under a
 * strict -std=c11, <uv.h> needs _DEFAULT_SOURCE (or _GNU_SOURCE) defined.
 * hiredis' adapter also brings a static function named on_close. */
#ifndef XFETCH_LIBUV_H
#define XFETCH_LIBUV_H

#include <hiredis/adapters/libuv.h>
#include <stdlib.h>
#include <uv.h>

#include "xfetch.h"

/* The adapter's state: the loop and the handle's one timer. */
typedef struct xf_libuv {
  uv_loop_t *loop;
  uv_timer_t timer;
  xf_async *ac;
} xf_libuv;

/* Hooks a new hiredis connection into the loop. */
static inline int xf_libuv_attach(void *data, struct redisAsyncContext *rac) {
  xf_libuv *u = (xf_libuv *)data;
  return redisLibuvAttach(rac, u->loop) == REDIS_OK ? 0 : -1;
}

/* The timer's callback: hands the event to the driver. */
static inline void xf_libuv_fired(uv_timer_t *timer) {
  xf_libuv *u = (xf_libuv *)timer->data;
  xf_async_timer_fired(u->ac);
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

/* Frees the state once libuv has closed the timer. */
static inline void xf_libuv_closed(uv_handle_t *handle) { free(handle->data); }

/* Closes the timer; the state goes with it on the loop's next turn. */
static inline void xf_libuv_cleanup(void *data) {
  xf_libuv *u = (xf_libuv *)data;
  uv_close((uv_handle_t *)&u->timer, xf_libuv_closed);
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
  xf_async_loop hooks = {u, xf_libuv_attach, xf_libuv_timer_start, xf_libuv_timer_stop,
                         xf_libuv_cleanup};
  int rc = xf_async_open(out, opts, &hooks);
  if (rc == XF_OK)
    u->ac = *out;
  return rc;
}

#endif /* XFETCH_LIBUV_H */
