/* The circuit breaker of one server's connection, for every transport: after
 * a failure no reconnect for breaker_ms, so that calls fail open at once
 * instead of each paying a connect timeout while the server is down; then
 * one attempt (half-open) whose outcome closes it or opens it again. The
 * clock is an input: tests step it. */
#ifndef XF_BREAKER_H
#define XF_BREAKER_H

#include <stdint.h>

typedef enum xf__breaker_state {
  XF__BREAKER_CLOSED,   /* no failure since the last success */
  XF__BREAKER_OPEN,     /* failed: no attempt before retry_after_ms */
  XF__BREAKER_HALF_OPEN /* failed, and its time is up: the next attempt decides */
} xf__breaker_state;

typedef struct xf__breaker {
  int tripped;
  int64_t retry_after_ms;
  char why[256]; /* the failure that tripped it, for "circuit open after: ..." */
} xf__breaker;

/* A failure at now_ms (why copied): open for breaker_ms; with breaker_ms
 * negative it never opens (why is still kept). Returns 1 when this failure
 * opened it (it was closed: an episode starts), else 0. */
int xf__breaker_trip(xf__breaker *b, int breaker_ms, int64_t now_ms, const char *why);

/* A connection came up (or a forked child starts afresh): closed. Returns 1
 * when it was open (or half-open): an episode ends. */
int xf__breaker_close(xf__breaker *b);

xf__breaker_state xf__breaker_state_at(const xf__breaker *b, int64_t now_ms);

/* Whether a connect may be tried at now_ms: closed or half-open. */
int xf__breaker_allows(const xf__breaker *b, int64_t now_ms);

#endif
