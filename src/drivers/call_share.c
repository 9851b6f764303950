/* A sans-I/O call whose Redis cannot be used loads through the client's
 * share, as the blocking driver's does (drive.c), but without blocking: the
 * lead loads (its outcome ends the flight in call.c's loaded()), a kept
 * value or a landed flight serves (source "local"), and a flight in progress
 * is polled (XF_CALL_WAIT, as a wait for a lease is) up to the policy's
 * wait, then the call loads alone. */
#include "call.h"
#include "client.h"
#include "share.h"

int xf__call_share_joins(const xf_call *call) {
  return call->f.load == XF_LOAD_UNCACHED && call->f.c->share && !call->share.lead &&
         !call->share.alone;
}

xf__step xf__call_share_join(xf_call *call, int64_t now_ms) {
  xf__flow *f = &call->f;
  if (!call->share.polling) {
    call->share.from_ms = now_ms;
    call->share.give_up_ms = now_ms + f->p->wait_ms;
  }
  call->share.polling = 0;
  char *data = NULL;
  size_t len = 0;
  int rc = XF_OK;
  xf__share_role role = xf__share_try(f->c, f->key.data, f->key.len, now_ms,
                                      &call->share.seen, &data, &len, &rc);
  if (role == XF_SHARE_SERVED)
    return xf__flow_local(f, rc, data, len);
  if (role == XF_SHARE_LEAD) {
    call->share.lead = 1;
  } else if (now_ms < call->share.give_up_ms) { /* another caller's flight: poll */
    int64_t ms = (now_ms - call->share.from_ms) / 4, left = call->share.give_up_ms - now_ms;
    ms = ms < 2 ? 2 : ms > 50 ? 50 : ms;
    f->wake_ms = now_ms + (ms < left ? ms : left);
    call->share.polling = 1;
    return XF_STEP_WAIT;
  } else {
    call->share.alone = 1;
  }
  return XF_STEP_LOAD;
}
