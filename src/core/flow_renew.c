/* A leased load's renewals (flow.h, policy.max_load_ms): when a loader's
 * lease is renewed and for how long. The driver sends them (another
 * thread's client, its loop); the renew flow itself is flow.c's. */
#include <stdint.h>
#include <string.h>

#include "flow_steps.h"
#include "policy.h"

int xf__flow_renewal(const xf__flow *f, xf__renewal *rn) {
  if (f->state != XF__LOAD || f->load != XF_LOAD_LEASED || !f->token[0] ||
      f->lease_len_ms <= 0 || f->lease_kept)
    return 0;
  int64_t until_ms = f->load_start_ms + xf__policy_max_load_ms(f->p);
  int64_t deadline_ms = f->load_start_ms + f->lease_len_ms;
  if (until_ms <= deadline_ms)
    return 0; /* the lease covers max_load_ms already */
  memcpy(rn->token, f->token, sizeof rn->token);
  rn->lease_ms = f->lease_len_ms;
  rn->until_ms = until_ms;
  rn->deadline_ms = rn->sent_ms = deadline_ms;
  /* A third of the lease: two renewals may fail (a reconnect, a stall)
   * before it runs out. */
  rn->next_ms = f->load_start_ms + (f->lease_len_ms / 3 > 0 ? f->lease_len_ms / 3 : 1);
  return 1;
}

int64_t xf__renewal_take(xf__renewal *rn, int64_t now_ms) {
  if (rn->next_ms == INT64_MAX)
    return 0;
  int64_t len = rn->until_ms - now_ms;
  if (len > rn->lease_ms)
    len = rn->lease_ms;
  if (len <= 0 || now_ms + len <= rn->deadline_ms) { /* it would not extend it */
    rn->next_ms = INT64_MAX;
    return 0;
  }
  rn->sent_ms = now_ms + len;
  rn->next_ms = now_ms + (rn->lease_ms / 3 > 0 ? rn->lease_ms / 3 : 1);
  return len;
}

void xf__renewal_done(xf__renewal *rn, int rc) {
  if (rc == XF_OK && rn->sent_ms > rn->deadline_ms)
    rn->deadline_ms = rn->sent_ms;
  else if (rc == XF_ESUPERSEDED) /* taken over, or deleted: nothing left to keep */
    rn->next_ms = INT64_MAX;
}
