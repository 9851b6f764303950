/* Wake-on-write for a sans-I/O driver's waits (xf_call_wake_*): a pipe the
 * near cache writes to whenever a key is invalidated, and which waiting
 * call's key it was. The tracking of the driver's connections is its
 * links' (call_link.c). */

#include "call.h"
#include "client.h"
#include "flow_steps.h"
#include "wake_pipe.h"

int xf_call_wake_open(xf_client *c, int *fd) {
  if (!c || !fd)
    return XF_EINVAL;
  *fd = -1;
  if (!c->near || c->near_wake_fd > 0)
    return c && c->near_wake_fd > 0 ? XF_EINVAL : XF_OK;
  int p[2];
  if (xf__wake_pipe_open(c, p) != XF_OK)
    return xf__fail(c, XF_ENOMEM, "no pipe for the near cache's wakes");
  c->near_wake_fd = p[1];
  *fd = p[0];
  return XF_OK;
}

void xf_call_wake_close(xf_client *c, int fd) {
  if (!c || c->near_wake_fd <= 0)
    return;
  xf__wake_pipe_close(c, fd, c->near_wake_fd);
  c->near_wake_fd = 0;
}

int xf_call_woken(const xf_call *call) {
  const xf__flow *f = call ? &call->f : NULL;
  return f && call->step == XF_STEP_WAIT && !call->backoff && f->wake_on_write &&
         f->state == XF__WAIT &&
         f->c->ports.near->changed(f->c->ports.self, f->key.data, f->key.len,
                                   f->near_token);
}
