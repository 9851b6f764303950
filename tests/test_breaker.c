/* The circuit breaker (breaker.c): closed, open for breaker_ms after a
 * failure, then half-open until the next attempt's outcome. */
#include <criterion/criterion.h>
#include <string.h>

#include "breaker.h"

Test(breaker, open_then_half_open_then_closed) {
  xf__breaker b = {0};
  cr_expect_eq(xf__breaker_state_at(&b, 0), XF__BREAKER_CLOSED);
  xf__breaker_trip(&b, 1000, 5000, "connect: refused");
  cr_expect_str_eq(b.why, "connect: refused");
  cr_expect_eq(xf__breaker_state_at(&b, 5000), XF__BREAKER_OPEN);
  cr_expect_eq(xf__breaker_state_at(&b, 5999), XF__BREAKER_OPEN);
  cr_expect_not(xf__breaker_allows(&b, 5999));
  cr_expect_eq(xf__breaker_state_at(&b, 6000), XF__BREAKER_HALF_OPEN);
  cr_expect(xf__breaker_allows(&b, 6000), "one attempt when the time is up");
  xf__breaker_trip(&b, 1000, 6001, b.why); /* the attempt failed: open again */
  cr_expect_eq(xf__breaker_state_at(&b, 6500), XF__BREAKER_OPEN);
  cr_expect_str_eq(b.why, "connect: refused");
  xf__breaker_close(&b); /* an attempt succeeded */
  cr_expect_eq(xf__breaker_state_at(&b, 6500), XF__BREAKER_CLOSED);
}

Test(breaker, a_negative_breaker_ms_never_opens) {
  xf__breaker b = {0};
  xf__breaker_trip(&b, -1, 5000, "connect: refused");
  cr_expect(xf__breaker_allows(&b, 5000));
  cr_expect_eq(xf__breaker_state_at(&b, 5000), XF__BREAKER_HALF_OPEN);
  cr_expect_str_eq(b.why, "connect: refused", "why is kept for the messages");
}
