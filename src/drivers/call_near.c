/* The near cache on connections a sans-I/O driver owns (xf_call_track_*:
 * xfetch.aio): the same arming, watching and tickets as the blocking
 * transport's (conn.c), handed out as a request and fed back. */
#include <stdlib.h>

#include "call.h"
#include "client.h"
#include "near_impl.h"
#include "setup.h"

struct xf_track {
  xf__track t;
  int armed; /* CLIENT TRACKING said OK: t may be given to reads */
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
  int rc = xf__near_arm(c->near, c, host, port, host ? NULL : c->unix_path, &id, &t->t);
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
  return t && t->armed && xf__track_stale(&t->t);
}

void xf_call_track_close(xf_track *t, int fd) {
  if (!t)
    return;
  if (t->armed)
    xf__near_lost(&t->t, fd);
  free(t);
}
