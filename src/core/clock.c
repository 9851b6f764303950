/* The per-connection estimate of the server's clock (clock.h). The server's
 * TIME in ms is a floor, and so are the driver's ms: each bound is widened by
 * the 1 ms either may have dropped. */
#include <string.h>

#include "clock.h"

void xf__clock_reset(xf__clock *k) { memset(k, 0, sizeof *k); }

static int64_t drift_ms(int64_t age_ms) {
  return age_ms / 1000 * XF_CLOCK_DRIFT_PER_S + XF_CLOCK_DRIFT_PER_S;
}

/* Whether the sample of k may be used at driver ms now_ms. */
static int usable(const xf__clock *k, int64_t now_ms) {
  return k->known && now_ms >= k->learned_ms &&
         now_ms - k->learned_ms <= XF_CLOCK_REFRESH_MS;
}

void xf__clock_learn(xf__clock *k, int64_t server_ms, int64_t sent_ms, int64_t recv_ms) {
  if (server_ms <= 0 || recv_ms < sent_ms)
    return;
  /* The server read its clock, S in [server_ms, server_ms + 1), at a driver
   * time m in [sent_ms, recv_ms + 1): S - m lies in [lo, hi]. */
  int64_t lo = server_ms - recv_ms - 1, hi = server_ms + 1 - sent_ms;
  if (usable(k, recv_ms)) {
    int64_t d = drift_ms(recv_ms - k->learned_ms);
    int64_t old_lo = k->lo - d, old_hi = k->hi + d;
    if (old_lo <= hi && lo <= old_hi) { /* they agree: keep what both say */
      lo = lo > old_lo ? lo : old_lo;
      hi = hi < old_hi ? hi : old_hi;
    }
  }
  k->lo = lo;
  k->hi = hi;
  k->learned_ms = recv_ms;
  k->known = 1;
}

int xf__clock_fresh(const xf__clock *k, int64_t now_ms) {
  return k && k->known && now_ms >= k->learned_ms &&
         now_ms - k->learned_ms < XF_CLOCK_REFRESH_MS / 2;
}

int xf__clock_server_now(const xf__clock *k, int64_t now_ms, int64_t *lo, int64_t *hi) {
  if (!k || !usable(k, now_ms))
    return 0;
  int64_t d = drift_ms(now_ms - k->learned_ms);
  *lo = now_ms + k->lo - d;
  *hi = now_ms + 1 + k->hi + d; /* now_ms is a floor too */
  return 1;
}

int xf__clock_refreshing(const xf__clock *k, int64_t asked_ms, int64_t now_ms) {
  return asked_ms >= 0 && now_ms >= asked_ms &&
         now_ms - asked_ms < XF_CLOCK_REFRESH_MS / 2 &&
         (!k->known || k->learned_ms < asked_ms);
}
