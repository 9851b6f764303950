/* The circuit breaker: a state computed from the last failure and the time. */
#include <stdio.h>

#include "breaker.h"

int xf__breaker_trip(xf__breaker *b, int breaker_ms, int64_t now_ms, const char *why) {
  if (why != b->why) /* a caller may pass the breaker's own message again */
    snprintf(b->why, sizeof b->why, "%s", why);
  int opened = !b->tripped && breaker_ms >= 0;
  b->tripped = 1;
  b->retry_after_ms = breaker_ms >= 0 ? now_ms + breaker_ms : INT64_MIN;
  return opened;
}

int xf__breaker_close(xf__breaker *b) {
  int was_open = b->tripped && b->retry_after_ms != INT64_MIN;
  b->tripped = 0;
  b->retry_after_ms = 0;
  return was_open;
}

xf__breaker_state xf__breaker_state_at(const xf__breaker *b, int64_t now_ms) {
  if (!b->tripped)
    return XF__BREAKER_CLOSED;
  return now_ms < b->retry_after_ms ? XF__BREAKER_OPEN : XF__BREAKER_HALF_OPEN;
}

int xf__breaker_allows(const xf__breaker *b, int64_t now_ms) {
  return xf__breaker_state_at(b, now_ms) != XF__BREAKER_OPEN;
}
