/* A near hit without a call (xf_near_serve, <xfetch/near.h>): the flow
 * started for the near cache alone, its events naming the driver whose call
 * it stands in for; and the early refresh its draw elected, handed to the
 * client that makes the call. */
#include <string.h>

#include "client_io.h"
#include "flow.h"

int xf_near_serve(xf_client *c, const char *key, size_t keylen, const xf_policy *policy,
                  xf_driver driver, uint64_t *near_hits, xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!c || !out)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  c->loader_rc = 0;
  xf_driver own = c->driver;
  c->driver = driver; /* the flow's events name the driver the call would have */
  xf__flow f;
  int served =
      xf__flow_start_near(&f, c, key, keylen, policy, out, near_hits, xf__now_ms());
  c->driver = own;
  return served ? f.rc : XF_NEAR_NOT_SERVED;
}

void xf_near_move_refresh(xf_client *from, xf_client *to) {
  if (!from || !to || !from->near_elect)
    return;
  to->near_elect = 1;
  to->near_elect_hash = from->near_elect_hash;
  to->near_elect_len = from->near_elect_len;
  to->near_elect_expiry_ms = from->near_elect_expiry_ms;
  to->near_elect_delta_us = from->near_elect_delta_us;
  from->near_elect = 0;
}
