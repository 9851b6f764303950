/* The share's flights, for the drivers that must not block (flight.h). */
#include "flight.h"
#include "client.h"
#include "share.h"

/* The share's code for what the loader gave. */
static int load_outcome(const xf__flow *f, int lrc) {
  if (lrc != 0 || (!f->sink.is_set && !f->sink.not_found))
    return XF_ELOADER;
  return f->sink.not_found ? XF_ENOTFOUND : XF_OK;
}

void xf__flow_share_end(xf__flow *f, const xf_client *sc, int loader_rc, int64_t end_ms) {
  /* kept for the loader's ttl (xf_sink_ttl), 0 = not kept */
  xf__share_end(sc, f->key.data, f->key.len, load_outcome(f, loader_rc), f->sink.data,
                f->sink.len, end_ms + (f->sink.ttl_set ? f->sink.ttl_ms : f->p->ttl_ms));
}

int xf__flight_joins(const xf__flow *f, const xf__flight *fl) {
  return f->load == XF_LOAD_UNCACHED && f->c->share && !fl->lead && !fl->alone;
}

xf__step xf__flight_join(xf__flow *f, xf__flight *fl, int64_t now_ms) {
  if (!fl->polling) {
    fl->from_ms = now_ms;
    fl->give_up_ms = now_ms + f->p->wait_ms;
  }
  fl->polling = 0;
  char *data = NULL;
  size_t len = 0;
  int rc = XF_OK;
  xf__share_role role =
      xf__share_try(f->c, f->key.data, f->key.len, now_ms, &fl->seen, &data, &len, &rc);
  if (role == XF_SHARE_SERVED)
    return xf__flow_local(f, rc, data, len);
  if (role == XF_SHARE_LEAD) {
    fl->lead = 1;
  } else if (now_ms < fl->give_up_ms) { /* another caller's flight: poll */
    int64_t ms = (now_ms - fl->from_ms) / 4, left = fl->give_up_ms - now_ms;
    ms = ms < 2 ? 2 : ms > 50 ? 50 : ms;
    f->wake_ms = now_ms + (ms < left ? ms : left);
    fl->polling = 1;
    return XF_STEP_WAIT;
  } else {
    fl->alone = 1;
  }
  return XF_STEP_LOAD;
}

void xf__flight_end(xf__flow *f, xf__flight *fl, int loader_rc, int64_t now_ms) {
  if (!fl->lead)
    return;
  fl->lead = 0;
  xf__flow_share_end(f, f->c, loader_rc, now_ms);
}
