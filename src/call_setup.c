/* The connection setup on the sans-I/O face (xf_call_setup*): the list the
 * blocking and event-loop transports run (setup.c), handed out as bytes to a
 * driver that owns its socket (xfetch.aio), and its replies judged here. */
#include <hiredis/hiredis.h>

#include "client.h"
#include "setup.h"

int xf_call_setup_count(const xf_client *c, int flags) {
  if (!c)
    return XF_EINVAL;
  xf__setup s;
  xf__setup_build(c, flags, &s);
  return s.n;
}

const char *xf_call_setup(xf_client *c, int flags, int i, size_t *len) {
  if (len)
    *len = 0;
  if (!c)
    return NULL;
  xf__setup s;
  xf__setup_build(c, flags, &s);
  c->request.len = 0;
  if (i < 0 || i >= s.n || xf__resp_append_cmd(&c->request, &s.cmd[i]) != 0)
    return NULL;
  if (len)
    *len = c->request.len;
  return c->request.data;
}

int xf_call_setup_reply(xf_client *c, int flags, int i, xf_reply *reply) {
  redisReply *r = (redisReply *)reply;
  int rc = XF_EINVAL;
  if (c) {
    xf__setup s;
    xf__setup_build(c, flags, &s);
    if (i < 0 || i >= s.n)
      rc = xf__fail(c, XF_EINVAL, "no setup command %d (there are %d)", i, s.n);
    else if (!r)
      rc = xf__fail(c, XF_EIO, "the connection failed during its setup");
    else
      rc = xf__setup_judge(c, s.kind[i], r);
  }
  if (r)
    freeReplyObject(r);
  return rc;
}
