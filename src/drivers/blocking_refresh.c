/* The blocking driver's background refresh (refresh.h): the client is the
 * calling thread's, so the refresh writes through a client opened like it
 * (options copied: xf__options_helper), taken from
 * the share's idle refresh clients and given back to them (refresh_clients.c:
 * a connect only when none opened alike is idle; without a share, one per
 * refresh), on the share's workers or on a user's executor
 * (xf_options.refresh_executor: xf_refresh_run). */
#include <stdlib.h>

#include "client_io.h"
#include "drive.h"
#include "lease_keeper.h"
#include "refresh.h"

struct xf_refresh {
  xf__detached d; /* first */
  xf_options *opts;
};

/* The refresh from its loader on. */
static int run(xf_refresh *r) {
  xf_options *o = r->opts;
  if (!xf__detached_load(&r->d))
    return free(o), XF_REFRESH_ABANDONED;
  xf__idle_clients *idle = o->share ? xf__refresh_share_idle(o->share) : NULL;
  xf_stats seen;
  xf_client *c = xf__idle_take(idle, o, &seen);
  int outcome = XF_REFRESH_ABANDONED; /* no client: its lease expires */
  if (c) {
    xf__flow_rebind(&r->d.f, c);
    outcome = xf__detached_finish(&r->d);
    xf__idle_give(idle, c, &seen);
  } else {
    xf__flow_abandon(&r->d.f);
  }
  xf__detached_end(&r->d);
  free(o);
  return outcome;
}

static int run_job(xf__refresh_job *j) { return run((xf_refresh *)j); }

xf__off_path xf__blocking_off_path(const xf_client *c) {
  return c->opened_with->refresh_executor || c->share ? XF__OFF_PATH_READY
                                                      : XF__OFF_PATH_NONE;
}

xf__step xf__blocking_refresh(xf__flow *f, xf_loader_fn loader, void *ud) {
  xf_client *c = f->c;
  const xf_options *mine = c->opened_with;
  int executor = mine->refresh_executor != NULL;
  if (!executor && !c->share) /* nowhere else to run it */
    return xf__flow_run_loader(f, loader, ud);
  xf__refresh_gate *gate = executor ? NULL : xf__refresh_share_gate(c->share);
  xf_options *o = xf__options_helper(mine);
  xf_refresh *r = NULL;
  if (o && (executor || gate))
    r = (xf_refresh *)xf__detached_new(f, sizeof *r, gate, run_job, loader, ud);
  if (!r) {
    free(o);
    return xf__flow_run_loader(f, loader, ud);
  }
  r->opts = o;
  if (!executor)
    xf__detached_submit(&r->d, c->share, c);
  else if (mine->refresh_executor(r, mine->refresh_executor_ud) != 0)
    xf__detached_skip(&r->d, c), free(o);
  return XF_STEP_DONE;
}

int xf_refresh_run(xf_refresh *r, xf_loader_fn loader, void *loader_ud) {
  if (!r)
    return XF_EINVAL;
  if (loader) {
    r->d.loader = loader;
    r->d.ud = loader_ud;
  }
  int outcome = run(r);
  return outcome == XF_REFRESH_DONE     ? XF_OK
         : outcome == XF_REFRESH_FAILED ? XF_ELOADER
                                        : XF_ECONNECT;
}

void xf_refresh_drop(xf_refresh *r) {
  if (!r)
    return;
  free(r->opts);
  xf__detached_abandon(&r->d);
}

const char *xf_refresh_key(const xf_refresh *r, size_t *len) {
  if (len)
    *len = r ? r->d.keylen : 0;
  return r ? r->d.key : NULL;
}
