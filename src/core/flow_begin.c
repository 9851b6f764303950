/* Starting a flow (flow.h): every kind's begin sets the flow up, checks its
 * arguments and builds its key, then either serves it at once (a near hit)
 * or sends its first command. */
#include <string.h>

#include "client.h"
#include "flow_steps.h"
#include "policy.h"

/* What every kind starts with: sets up only what a step may read before
 * writing it (the flow is ~1 KiB, and a hit should not pay for clearing it),
 * checks p (NULL = none) and builds the key, unless rc already failed the
 * call (a bad argument of the kind's own: nothing of the key is read then). */
static inline __attribute__((always_inline)) int begin(xf__flow *f, xf__kind kind,
                                                       const char *key, size_t keylen,
                                                       const xf_policy *p, xf_value *out,
                                                       int rc, int64_t now_ms) {
  const xf__config *cfg = f->cfg;
  xf__runtime *rt = f->rt;
  f->kind = kind;
  f->input_ms = now_ms;
  f->began_ms = now_ms;
  f->clock = NULL;
  f->driver = rt->driver;
  f->pending = 0;
  f->p = p;
  f->user_key = key;
  f->user_keylen = keylen;
  f->out = out;
  f->interrupt = cfg->interrupt;
  f->interrupt_ud = cfg->interrupt_ud;
  if (out)
    memset(out, 0, sizeof *out);
  xf__sink_reset(&f->sink);
  memset(&f->e, 0, sizeof f->e);
  f->key.data = NULL;
  f->token[0] = '\0';
  f->load = XF_LOAD_LEASED;
  f->rc = XF_OK;
  f->state = XF__READ;
  f->script_loading = f->refresh = f->detached = f->round = f->had_value =
      f->found_nothing = f->lease_kept = 0;
  f->failsafe_hold_ms = 0;
  f->near_elected = 0;
  f->near_expiry_ms = f->near_delta_us = 0;
  f->near_served = 0;
  f->near_count = NULL;
  f->start_ms = f->delta_us = f->first_read_ms = 0;
  f->tag_copy = NULL; /* tag_names, tag_n, tag_ns: set by the kinds that read them */
  f->tag_rec_len = 0;
  f->tag_fast = f->tag_kept_all = f->tag_in_read = f->tag_all_at_once = f->tag_by_node = 0;
  f->tag_key.data = NULL;
  f->tag_read_keys = NULL;
  if (rc == XF_OK && (kind == XF_KIND_GET_OR_COMPUTE || kind == XF_KIND_SET))
    rc = xf__policy_check(rt, p);
  return rc == XF_OK ? xf__key_build(cfg, rt, key, keylen, &f->key) : rc;
}

/* Whether a loader on the calling thread is computing key (nest.h). */
static inline int loading(const xf__config *cfg, const xf__runtime *rt,
                          const xf__key *key) {
  return rt->ports.loading && rt->ports.loading(cfg->ns, cfg->ns_len, key->data, key->len);
}

xf__step xf__flow_begin(xf__flow *f, const char *key, size_t keylen, const xf_policy *p,
                        xf_value *out, int64_t now_ms) {
  const xf__config *cfg = f->cfg;
  xf__runtime *rt = f->rt;
  int rc = begin(f, XF_KIND_GET_OR_COMPUTE, key, keylen, p, out, XF_OK, now_ms);
  if (rc == XF_OK && loading(cfg, rt, &f->key)) {
    int shown = keylen > 60 ? 60 : (int)keylen; /* the message holds both */
    rc = xf__rt_fail(rt, XF_EINVAL,
                     "the loader for key %.*s asked for %.*s itself (a recursion: it would "
                     "wait on its own lease)",
                     shown, key, shown, key);
  }
  if (rc == XF_OK && rt->disabled)
    return xf__flow_bypass(f);
  xf__step step;
  if (rc == XF_OK && (p->ntags || cfg->namespace_tag) && rt->ports.near &&
      xf__flow_tags_near_fast(f, &step))
    return step; /* a near entry stamped current for its tags (flow_tags.c) */
  if (rc == XF_OK && (p->ntags || cfg->namespace_tag) &&
      xf__flow_tags_first(f, XF__READ, &step))
    return step; /* its versions first, then the near cache (flow_tags.c) */
  if (rc == XF_OK && rt->ports.near && xf__flow_near_first(f, now_ms, &step))
    return step;
  return rc == XF_OK ? xf__flow_send(f, XF__READ) : xf__flow_done(f, rc);
}

int xf__flow_begin_near(xf__flow *f, const char *key, size_t keylen, const xf_policy *p,
                        xf_value *out, uint64_t *count, int64_t now_ms) {
  const xf__config *cfg = f->cfg;
  xf__runtime *rt = f->rt;
  if (!rt->ports.near || rt->disabled || (!p && cfg->namespace_tag))
    return 0; /* a namespace client's get reads its namespace's version first */
  /* A tagged call: only an entry stamped current for its tags (else its
   * versions first: the call, not this path). */
  int tagged = p && (cfg->namespace_tag || p->ntags);
  xf__kind kind = p ? XF_KIND_GET_OR_COMPUTE : XF_KIND_GET;
  int rc = begin(f, kind, key, keylen, p, out, XF_OK, now_ms);
  f->near_count = count;
  xf__step step;
  if (rc == XF_OK && !(p && loading(cfg, rt, &f->key)) &&
      (tagged ? xf__flow_tags_near_fast(f, &step) : xf__flow_near_first(f, now_ms, &step)))
    return 1;
  if (f->near_elected)
    xf__flow_near_elect(f);
  xf__flow_abandon(f);
  rt->errstr[0] = '\0'; /* the call made as usual says what went wrong */
  return 0;
}

xf__step xf__flow_begin_get(xf__flow *f, const char *key, size_t keylen, xf_value *out,
                            int64_t now_ms) {
  xf__runtime *rt = f->rt;
  int rc = begin(f, XF_KIND_GET, key, keylen, NULL, out, XF_OK, now_ms);
  if (rc == XF_OK && rt->disabled) {
    rt->stats.bypassed++;
    rc = xf__rt_fail(rt, XF_ENOTFOUND, "the client is disabled (bypass): nothing is read");
  }
  xf__step step;
  if (rc == XF_OK && f->cfg->namespace_tag) { /* the namespace's version first */
    f->tag_names = NULL;
    f->tag_n = 0;
    f->tag_ns = 1;
    if (xf__flow_tags_first(f, XF__READ, &step))
      return step; /* then the near cache (flow_tags.c) */
  }
  if (rc == XF_OK && rt->ports.near && xf__flow_near_first(f, now_ms, &step))
    return step;
  return rc == XF_OK ? xf__flow_send(f, XF__READ) : xf__flow_done(f, rc);
}

xf__step xf__flow_begin_set(xf__flow *f, const char *key, size_t keylen, const void *data,
                            size_t len, const xf_policy *p, int64_t now_ms) {
  const xf__config *cfg = f->cfg;
  xf__runtime *rt = f->rt;
  int rc = XF_OK;
  if (!data && len > 0)
    rc = xf__rt_fail(rt, XF_EINVAL, "data is NULL");
  else if (len > cfg->max_value_len)
    rc = xf__rt_fail(rt, XF_EINVAL, "value is %zu bytes, above max_value_len %zu", len,
                     cfg->max_value_len);
  rc = begin(f, XF_KIND_SET, key, keylen, p, NULL, rc, now_ms);
  if (rc != XF_OK || rt->disabled)
    return xf__flow_done(f, rc == XF_OK ? (rt->stats.bypassed++, XF_OK) : rc);
  /* As if a loader had produced it now: the entry keeps its delta, and the
   * server dates it (start_ms -1), so a computation that started earlier
   * cannot overwrite it. */
  f->w = (xf__write){.token = "",
                     .data = data,
                     .len = len,
                     .delta_us = -1,
                     .ttl_ms = xf__policy_ttl(rt, p),
                     .keep_ms = xf__policy_keep_ms(p),
                     .start_ms = -1,
                     .kind = XF_WRITE_VALUE};
  xf__flow_pack(f);
  xf__step step;
  if ((p->ntags || cfg->namespace_tag) && xf__flow_tags_first(f, XF__WRITE, &step))
    return step;
  return xf__flow_send(f, XF__WRITE);
}

xf__step xf__flow_begin_invalidate(xf__flow *f, const char *const *tags, size_t n, int ns,
                                   int64_t now_ms) {
  xf__runtime *rt = f->rt;
  int rc = begin(f, XF_KIND_INVALIDATE, "-", 1, NULL, NULL, XF_OK, now_ms);
  if (rc != XF_OK)
    return xf__flow_done(f, rc);
  if (ns && !f->cfg->namespace_tag)
    return xf__flow_done(f, xf__rt_fail(rt, XF_EINVAL,
                                        "the client's entries carry no namespace tag "
                                        "(options.namespace_tag)"));
  if (rt->disabled)
    return xf__flow_done(f, (rt->stats.bypassed++, XF_OK));
  f->tag_names = tags;
  f->tag_n = n;
  f->tag_ns = ns;
  xf__step step;
  if (xf__flow_tags_first(f, XF__DONE, &step))
    return step;
  return xf__flow_done(f, XF_OK); /* no tag: nothing to do */
}

xf__step xf__flow_begin_delete(xf__flow *f, const char *key, size_t keylen,
                               int64_t now_ms) {
  xf__runtime *rt = f->rt;
  int rc = begin(f, XF_KIND_DELETE, key, keylen, NULL, NULL, XF_OK, now_ms);
  if (rc == XF_OK && rt->disabled)
    return xf__flow_done(f, (rt->stats.bypassed++, XF_OK));
  return rc == XF_OK ? xf__flow_send(f, XF__DELETE) : xf__flow_done(f, rc);
}

xf__step xf__flow_begin_renew(xf__flow *f, const char *key, size_t keylen,
                              const char *token, int64_t lease_ms, int64_t now_ms) {
  int rc = begin(f, XF_KIND_RENEW, key, keylen, NULL, NULL, XF_OK, now_ms);
  if (rc != XF_OK)
    return xf__flow_done(f, rc);
  size_t n = strnlen(token, sizeof f->token - 1);
  memcpy(f->token, token, n);
  f->token[n] = '\0';
  f->lease_len_ms = lease_ms;
  return xf__flow_send(f, XF__RENEW);
}
