/* Wake-on-write for a sans-I/O driver's waits (xf_call_wake_*): a pipe the
 * near cache writes to whenever a key is invalidated, and which waiting
 * call's key it was. The tracking of the driver's connections is its
 * links' (call_link.c). */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "call.h"
#include "client.h"
#include "flow_steps.h"

int xf_call_wake_open(xf_client *c, int *fd) {
  if (!c || !fd)
    return XF_EINVAL;
  *fd = -1;
  if (!c->near || c->near_wake_fd > 0)
    return c && c->near_wake_fd > 0 ? XF_EINVAL : XF_OK;
  int p[2];
  if (pipe(p) != 0)
    return xf__fail(c, XF_ENOMEM, "no pipe for the near cache's wakes");
  for (int i = 0; i < 2; i++)
    fcntl(p[i], F_SETFL, O_NONBLOCK), fcntl(p[i], F_SETFD, FD_CLOEXEC);
  if (c->ports.near->notify_add(c->ports.self, p[1]) != XF_OK) {
    close(p[0]), close(p[1]);
    return XF_ENOMEM;
  }
  c->near_wake_fd = p[1];
  *fd = p[0];
  return XF_OK;
}

void xf_call_wake_close(xf_client *c, int fd) {
  if (!c || c->near_wake_fd <= 0)
    return;
  c->ports.near->notify_remove(c->ports.self, c->near_wake_fd);
  close(c->near_wake_fd);
  c->near_wake_fd = 0;
  if (fd >= 0)
    close(fd);
}

int xf_call_woken(const xf_call *call) {
  const xf__flow *f = call ? &call->f : NULL;
  return f && call->step == XF_STEP_WAIT && !call->backoff && f->wake_on_write &&
         f->state == XF__WAIT &&
         f->c->ports.near->changed(f->c->ports.self, f->key.data, f->key.len,
                                   f->near_token);
}
