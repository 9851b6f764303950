/* xfetch's event-loop driver on a libevent event_base: include this header
 * (it pulls in <event2/event.h>) and link libevent yourself; libxfetch does
 * not depend on it.
 *
 *   xf_async *ac;
 *   int rc = xf_async_open_libevent(&ac, &opts, base);
 *   ... xf_async_get_or_compute(ac, ...) from the loop ...
 *   xf_async_close(ac);
 *
 * Each connection is an event on its socket, watched for reading while it is
 * open: the base stays busy while a connection is open, so
 * event_base_dispatch returns after xf_async_close (or event_base_loopbreak). */
#ifndef XFETCH_LIBEVENT_H
#define XFETCH_LIBEVENT_H

#include <event2/event.h>
#include <stdlib.h>

#include "xfetch.h"

/* The adapter's state: the base and the handle's one timer. */
typedef struct xf_libevent {
  struct event_base *base;
  struct event *timer;
  xf_async *ac;
} xf_libevent;

/* One connection's socket: its event, (re)assigned for what is watched. */
typedef struct xf_libevent_watch {
  struct event *ev;
  xf_async_conn *conn;
} xf_libevent_watch;

/* The socket's callback: hands the readiness to the driver. */
static inline void xf_libevent_ready(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  xf_libevent_watch *w = (xf_libevent_watch *)arg;
  xf_async_ready(w->conn, (what & EV_READ ? XF_ASYNC_READ : 0) |
                              (what & EV_WRITE ? XF_ASYNC_WRITE : 0));
}

/* Watches fd for events (the event made on the first call). */
static inline int xf_libevent_watch_fd(void *data, void **watch, int fd, int events,
                                       xf_async_conn *conn) {
  xf_libevent *e = (xf_libevent *)data;
  xf_libevent_watch *w = (xf_libevent_watch *)*watch;
  if (!w) {
    w = (xf_libevent_watch *)calloc(1, sizeof *w);
    if (!w || !(w->ev = event_new(e->base, fd, EV_PERSIST, xf_libevent_ready, w))) {
      free(w);
      return -1;
    }
    w->conn = conn;
    *watch = w;
  }
  event_del(w->ev);
  if (!events)
    return 0;
  short flags = (short)(EV_PERSIST | (events & XF_ASYNC_READ ? EV_READ : 0) |
                        (events & XF_ASYNC_WRITE ? EV_WRITE : 0));
  if (event_assign(w->ev, e->base, fd, flags, xf_libevent_ready, w) != 0)
    return -1;
  return event_add(w->ev, NULL);
}

/* Stops watching and frees the event. */
static inline void xf_libevent_unwatch(void *data, void *watch) {
  xf_libevent_watch *w = (xf_libevent_watch *)watch;
  (void)data;
  event_free(w->ev);
  free(w);
}

/* The timer's callback: hands the event to the driver. */
static inline void xf_libevent_fired(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  xf_async_timer_fired(((xf_libevent *)arg)->ac);
}

/* Arms the timer (evtimer_add replaces an earlier arming). */
static inline void xf_libevent_timer_start(void *data, int64_t delay_ms) {
  xf_libevent *e = (xf_libevent *)data;
  struct timeval tv = {(time_t)(delay_ms / 1000), (suseconds_t)(delay_ms % 1000) * 1000};
  evtimer_add(e->timer, &tv);
}

/* Disarms the timer. */
static inline void xf_libevent_timer_stop(void *data) {
  evtimer_del(((xf_libevent *)data)->timer);
}

/* Frees the timer and the state. */
static inline void xf_libevent_cleanup(void *data) {
  xf_libevent *e = (xf_libevent *)data;
  event_free(e->timer);
  free(e);
}

/* Opens an xf_async handle (see xf_async_open) whose connection and timer
 * live on base. Returns what xf_async_open returns (XF_ENOMEM when the
 * adapter's state cannot be allocated). Call from the base's thread. */
static inline int xf_async_open_libevent(xf_async **out, const xf_options *opts,
                                         struct event_base *base) {
  if (out)
    *out = NULL;
  if (!out || !base)
    return XF_EINVAL;
  xf_libevent *e = (xf_libevent *)calloc(1, sizeof *e);
  if (!e)
    return XF_ENOMEM;
  e->base = base;
  e->timer = evtimer_new(base, xf_libevent_fired, e);
  if (!e->timer) {
    free(e);
    return XF_ENOMEM;
  }
  xf_async_loop hooks = {e,
                         xf_libevent_watch_fd,
                         xf_libevent_unwatch,
                         xf_libevent_timer_start,
                         xf_libevent_timer_stop,
                         xf_libevent_cleanup};
  int rc = xf_async_open(out, opts, &hooks);
  if (rc == XF_OK)
    e->ac = *out;
  return rc;
}

#endif /* XFETCH_LIBEVENT_H */
