/* The near cache on connections a sans-I/O driver owns (xf_call_track_*:
 * xfetch.aio): the same arming, watching and tickets as the event-loop
 * driver's (async_conn.c), handed out as a request and fed back; never a
 * connect on the caller's thread (the tracker thread opens the server's
 * invalidation connection: until then a ticket says "ask again later"). */
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "call.h"
#include "client.h"
#include "flow_steps.h"
#include "near_impl.h"
#include "setup.h"

struct xf_track {
  xf__track t;
  int armed; /* CLIENT TRACKING said OK: t may be given to reads */
  int later; /* the node's invalidation connection was not open (t.node):
                no request; xf_call_track_reply says when to ask again */
};

int xf_call_track_open(xf_client *c, const char *host, int port, xf_track **ticket,
                       const char **request, size_t *len) {
  if (!c || !ticket || !request || !len)
    return XF_EINVAL;
  *ticket = NULL;
  if (!c->near)
    return XF_OK;
  xf_track *t = calloc(1, sizeof *t);
  if (!t)
    return XF_ENOMEM;
  long long id;
  int rc =
      xf__near_arm_later(c->near, c, host, port, host ? NULL : c->unix_path, &id, &t->t);
  if (rc == XF__NEAR_LATER) { /* the tracker thread opens it: never this thread */
    c->errstr[0] = '\0';
    t->later = 1;
    *request = NULL;
    *len = 0;
    *ticket = t;
    return XF_OK;
  }
  xf__setup s = {0};
  if (rc == XF_OK) {
    xf__setup_add_tracking(&s, id);
    c->request.len = 0;
    if (xf__resp_append_cmd(&c->request, &s.cmd[0]) != 0)
      rc = XF_ENOMEM;
  }
  if (rc != XF_OK) {
    free(t);
    return rc;
  }
  *request = c->request.data;
  *len = c->request.len;
  *ticket = t;
  return XF_OK;
}

int xf_call_track_armed(xf_track *t, xf_reply *reply, int fd) {
  xf__reply *r = (xf__reply *)reply;
  int ok = t && r && r->type != XF_REPLY_ERROR;
  if (r)
    xf__reply_free(r);
  if (!ok)
    return t ? XF_EREDIS : XF_EINVAL;
  t->armed = 1;
  xf__near_watch(&t->t, fd);
  return XF_OK;
}

int xf_call_track_reply(xf_call *call, const xf_track *t) {
  xf__track none = {0};
  if (call && call->f.cmd.track_out)
    *call->f.cmd.track_out = t && t->armed ? t->t : none;
  if (t && t->later)
    return xf__near_arm_due(t->t.node) ? 2 : 0;
  return t && t->armed && xf__track_stale(&t->t);
}

void xf_call_track_close(xf_track *t, int fd) {
  if (!t)
    return;
  if (t->armed)
    xf__near_lost(&t->t, fd);
  free(t);
}

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
  if (xf__near_notify_add(c->near, p[1]) != XF_OK) {
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
  xf__near_notify_remove(c->near, c->near_wake_fd);
  close(c->near_wake_fd);
  c->near_wake_fd = 0;
  if (fd >= 0)
    close(fd);
}

int xf_call_woken(const xf_call *call) {
  const xf__flow *f = call ? &call->f : NULL;
  return f && call->step == XF_STEP_WAIT && !call->backoff && f->wake_on_write &&
         f->state == XF__WAIT &&
         xf__near_changed(f->c->near, f->key.data, f->key.len, f->near_token);
}
