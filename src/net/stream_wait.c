/* Blocking use of a stream (stream.h): each step that answers AGAIN waits in
 * poll() for what it wants, until an absolute deadline. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include "stream_impl.h"
#include "xfetch.h"

int64_t xf__stream_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until s->fd is ready for s->want or the deadline passes. XF_OK (an
 * error or hang-up also wakes it: the next step reports it), or the code of
 * s's failure: the deadline ("after <budget_ms> ms"), or poll() itself. */
static int wait_sliced(xf__stream *s, int64_t *deadline_ms, int budget_ms,
                       int (*ask)(void *), void *ud, int slice_ms) {
  short events = (short)((s->want & XF__WANT_READ ? POLLIN : 0) |
                         (s->want & XF__WANT_WRITE ? POLLOUT : 0));
  for (;;) {
    /* *deadline_ms 0: budget_ms from now, the clock read only if it waits on */
    int64_t left = *deadline_ms ? *deadline_ms - xf__stream_now_ms() : budget_ms;
    if (left <= 0) {
      xf__stream_timeout(s, budget_ms);
      return xf__stream_code(s);
    }
    int cap = ask && slice_ms < 60000 ? slice_ms : 60000;
    int ms = left > cap ? cap : (int)left;
    struct pollfd p = {.fd = s->fd, .events = events};
    int n = poll(&p, 1, ms);
    if (n > 0)
      return XF_OK;
    if (!*deadline_ms) /* poll() timed out after ms; EINTR: about now */
      *deadline_ms = xf__stream_now_ms() - (n == 0 ? ms : 0) + budget_ms;
    if (n < 0 && errno != EINTR) {
      xf__stream_fail(s, XF__SE_IO, "poll on %s: %s", s->peer, strerror(errno));
      return xf__stream_code(s);
    }
    if (ask && ask(ud) != 0)
      return XF_ECANCELED;
  }
}

static int wait_for(xf__stream *s, int64_t deadline_ms, int budget_ms) {
  return wait_sliced(s, &deadline_ms, budget_ms, NULL, NULL, 0);
}

static int budget(int64_t from_ms, int64_t deadline_ms) {
  int64_t ms = deadline_ms - from_ms;
  return ms < 0 ? 0 : ms > 1000000000 ? 1000000000 : (int)ms;
}

int xf__stream_connect_blocking(xf__stream *s, int64_t deadline_ms) {
  int ms = budget(s->started_ms, deadline_ms); /* the whole connect's budget */
  for (;;) {
    xf__io r = xf__stream_continue(s);
    if (r == XF__IO_DONE)
      return XF_OK;
    if (r == XF__IO_FAIL)
      return xf__stream_code(s);
    int rc = wait_for(s, deadline_ms, ms);
    if (rc != XF_OK)
      return rc;
  }
}

int xf__stream_write_all(xf__stream *s, const void *buf, size_t len, int64_t deadline_ms) {
  int ms = budget(xf__stream_now_ms(), deadline_ms);
  const char *at = buf;
  while (len > 0) {
    size_t put;
    xf__io r = xf__stream_write(s, at, len, &put);
    if (r == XF__IO_FAIL)
      return xf__stream_code(s);
    if (r == XF__IO_AGAIN) {
      int rc = wait_for(s, deadline_ms, ms);
      if (rc != XF_OK)
        return rc;
      continue; /* the same bytes again, as TLS requires */
    }
    at += put;
    len -= put;
  }
  return XF_OK;
}

int xf__stream_read_some(xf__stream *s, void *buf, size_t cap, size_t *got,
                         int64_t deadline_ms) {
  int ms = budget(xf__stream_now_ms(), deadline_ms);
  for (;;) {
    /* Read first: TLS may already hold decrypted bytes poll() cannot see. */
    xf__io r = xf__stream_read(s, buf, cap, got);
    if (r == XF__IO_DONE)
      return XF_OK;
    if (r == XF__IO_FAIL)
      return xf__stream_code(s);
    int rc = wait_for(s, deadline_ms, ms);
    if (rc != XF_OK)
      return rc;
  }
}

int xf__stream_read_sliced(xf__stream *s, void *buf, size_t cap, size_t *got,
                           int64_t *deadline_ms, int budget_ms, int (*ask)(void *),
                           void *ud, int slice_ms) {
  *got = 0;
  if (s->state == XF__STREAM_OPEN && !xf__stream_pending(s)) {
    s->want = XF__WANT_READ;
    int rc = wait_sliced(s, deadline_ms, budget_ms, ask, ud, slice_ms);
    if (rc != XF_OK)
      return rc;
  }
  for (;;) {
    xf__io r = xf__stream_read(s, buf, cap, got);
    if (r == XF__IO_DONE)
      return XF_OK;
    if (r == XF__IO_FAIL)
      return xf__stream_code(s);
    int rc = wait_sliced(s, deadline_ms, budget_ms, ask, ud, slice_ms);
    if (rc != XF_OK)
      return rc;
  }
}
