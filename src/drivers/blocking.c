/* The blocking driver: today's API, each call a loop around the flow
 * (flow.h) on the client's one connection, sleeping through waits. */
#include <stdlib.h>
#include <string.h>

#include "client_io.h"
#include "drive.h"
#include "refresh.h"
#include "reply.h"

/* Runs the flow from step to its end: the blocking driver's one loop, for
 * every kind (only get-or-compute LOADs or WAITs: loader NULL otherwise). */
static int run(xf__flow *f, xf__step step, xf_loader_fn loader, void *ud) {
  for (;;) {
    switch (step) {
    case XF_STEP_SEND:
      step = xf__drive_send(f);
      break;
    case XF_STEP_LOAD:
      step = xf__flow_detachable(f, xf__blocking_off_path(f->c))
                 ? xf__blocking_refresh(f, loader, ud)
             : xf__flow_load_deadline(f) != INT64_MAX
                 ? xf__blocking_bounded_load(f, loader, ud)
                 : xf__flow_run_loader(f, loader, ud);
      break;
    case XF_STEP_WAIT:
      step = xf__drive_sleep(f, f->wake_ms) ? xf__flow_cancel(f)
                                            : xf__flow_woke(f, xf__now_ms());
      break;
    case XF_STEP_DONE:
      return f->rc;
    }
  }
}

int xf_get_or_compute(xf_client *c, const char *key, size_t keylen, const xf_policy *p,
                      xf_loader_fn loader, void *ud, xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  c->loader_rc = 0;
  c->load_moved = 0;
  if (!out)
    return xf__fail(c, XF_EINVAL, "out is NULL");
  if (!loader)
    return xf__fail(c, XF_EINVAL, "loader is NULL");
  xf__flow f;
  return run(&f, xf__flow_start(&f, c, key, keylen, p, out, xf__now_ms()), loader, ud);
}

int xf_get(xf_client *c, const char *key, size_t keylen, xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  if (!out)
    return xf__fail(c, XF_EINVAL, "out is NULL");
  xf__flow f;
  return run(&f, xf__flow_start_get(&f, c, key, keylen, out, xf__now_ms()), NULL, NULL);
}

int xf_set(xf_client *c, const char *key, size_t keylen, const void *data, size_t len,
           const xf_policy *p) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  xf__flow f;
  return run(&f, xf__flow_start_set(&f, c, key, keylen, data, len, p, xf__now_ms()), NULL,
             NULL);
}

int xf_delete(xf_client *c, const char *key, size_t keylen) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  xf__flow f;
  return run(&f, xf__flow_start_delete(&f, c, key, keylen, xf__now_ms()), NULL, NULL);
}

int xf_invalidate_tags(xf_client *c, const char *const *tags, size_t ntags) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  xf__flow f;
  return run(&f, xf__flow_start_invalidate(&f, c, tags, ntags, 0, xf__now_ms()), NULL,
             NULL);
}

int xf_clear_namespace(xf_client *c) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  xf__flow f;
  return run(&f, xf__flow_start_invalidate(&f, c, NULL, 0, 1, xf__now_ms()), NULL, NULL);
}
