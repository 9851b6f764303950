/* The pool driver: threads share at most max_connections clients. A call
 * holds a client only while the flow needs one (sending a command, or taking
 * in a reply or a loader's outcome) and gives it back while its loader runs
 * or it waits, so a loader that calls the pool again never deadlocks, even
 * with one client. The lease token lives in the flow, not on the client: a
 * call may continue on another client than the one it started on. A near hit
 * needs no client: with every one busy it is served on a spare (spares.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_io.h"
#include "drive.h"
#include "now.h"
#include "pool_impl.h"
#include "refresh.h"
#include "reply.h"
#include "share.h"
#include "spares.h"

#define DEFAULT_CHECKOUT_TIMEOUT_MS 1000

/* Arguments that are wrong whatever the client: refused before checking one
 * out, so a bad call never waits for a busy pool nor reports XF_EBUSY. The
 * client's own checks (max_key_len, the policy's values) still run. */
static int refuse(const char *key, size_t keylen, int check_policy,
                  const xf_policy *policy) {
  const char *why = !key            ? "key is NULL"
                    : keylen == 0   ? "key is empty"
                    : !check_policy ? NULL
                    : !policy       ? "policy is NULL"
                                    : NULL;
  snprintf(xf__pool_error, sizeof xf__pool_error, "%s", why ? why : "");
  return why ? XF_EINVAL : XF_OK;
}

/* ---- background refresh (policy.background_refresh) ---------------------------- */

/* A refresh detached from a call (refresh.h): its write goes through a
 * pooled client, taken once its loader is done. */
typedef struct pool_refresh {
  xf__detached d; /* first */
  xf_pool *pool;
} pool_refresh;

static int refresh_run(xf__refresh_job *j) {
  pool_refresh *r = (pool_refresh *)j;
  if (!xf__detached_load(&r->d))
    return XF_REFRESH_ABANDONED;
  xf_pool *p = r->pool;
  xf_client *c = NULL;
  xf__pool_checkout(p, -1, &c);
  xf__flow_rebind(&r->d.f, c);
  int outcome = xf__detached_finish(&r->d);
  xf__pool_checkin(p, c); /* inside the gate: the pool is not closed under it */
  xf__detached_end(&r->d);
  return outcome;
}

/* f's LOAD is a detachable early refresh: to the share's workers, so the
 * call returns the current value now; with no room there (or no memory),
 * it is skipped: its lease released, the next call in the window retries. */
static xf__step refresh_in_background(xf_pool *p, xf__flow *f, xf_loader_fn loader,
                                      void *ud) {
  xf_client *c = f->c;
  pool_refresh *r =
      (pool_refresh *)xf__detached_new(f, sizeof *r, p->gate, refresh_run, loader, ud);
  if (!r)
    return xf__flow_skip(f);
  r->pool = p;
  xf__detached_submit(&r->d, c->share, c);
  return XF_STEP_DONE;
}

int xf_pool_get_or_compute(xf_pool *p, const char *key, size_t keylen,
                           const xf_policy *policy, xf_loader_fn loader, void *ud,
                           xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  xf__pool_error[0] = '\0';
  if (!p || !out || !loader) {
    snprintf(xf__pool_error, sizeof xf__pool_error, "%s is NULL",
             !p     ? "pool"
             : !out ? "out"
                    : "loader");
    return XF_EINVAL;
  }
  if (refuse(key, keylen, 1, policy) != XF_OK)
    return XF_EINVAL;
  xf_client *c = NULL, *spare = NULL;
  int rc = xf__pool_checkout(p, 0, &c);
  if (rc == XF_EBUSY && p->spares) {
    int served = xf__spares_near_serve(p->spares, key, keylen, policy, out, &spare,
                                       xf__pool_error, sizeof xf__pool_error);
    if (served != XF_NEAR_NOT_SERVED)
      return served;
  }
  if (rc == XF_EBUSY)
    rc = xf__pool_checkout(p, p->checkout_timeout_ms, &c);
  if (spare) { /* an early refresh its draw elected is the call's */
    if (rc == XF_OK)
      xf_near_move_refresh(spare, c);
    xf__spares_give(p->spares, spare);
  }
  if (rc != XF_OK)
    return rc;
  xf__flow f;
  xf__step step = xf__flow_start(&f, c, key, keylen, policy, out, xf__now_ms());
  while (step != XF_STEP_DONE) {
    if (step == XF_STEP_SEND) {
      step = xf__drive_send(&f);
      continue;
    }
    if (step == XF_STEP_LOAD && xf__flow_detachable(&f, XF__OFF_PATH_READY)) {
      step = refresh_in_background(p, &f, loader, ud);
      continue;
    }
    if (step == XF_STEP_LOAD && xf__flow_load_deadline(&f) != INT64_MAX) {
      step = xf__blocking_bounded_load(&f, loader, ud); /* the client stays the call's */
      continue;
    }
    /* A load or a wait: the client goes back to the pool meanwhile. */
    xf__pool_checkin(p, c);
    xf__loaded l;
    int stop = 0;
    if (step == XF_STEP_LOAD) /* c only for its share and namespace (see share.h) */
      xf__flow_call_loader(&f, c, loader, ud, &l);
    else
      stop = xf__drive_sleep(&f, f.wake_ms);
    /* Never fails: it waits for a client (every holder gives its own back
     * after one command), which the call needs to end, even interrupted. */
    xf__pool_checkout(p, -1, &c);
    xf__flow_rebind(&f, c);
    step = step == XF_STEP_LOAD ? xf__flow_feed_loaded(&f, &l)
           : stop               ? xf__flow_cancel(&f)
                                : xf__flow_woke(&f, xf__now_ms());
  }
  return xf__pool_finish(p, c, f.rc);
}

/* Runs fn on a checked-out client with the caller's own message kept; bad:
 * refuse()'s verdict (which also cleared or set the message). */
#define WITH_CLIENT(p, bad, call)                                                          \
  do {                                                                                     \
    if (!(p)) {                                                                            \
      snprintf(xf__pool_error, sizeof xf__pool_error, "pool is NULL");                     \
      return XF_EINVAL;                                                                    \
    }                                                                                      \
    if ((bad) != XF_OK)                                                                    \
      return XF_EINVAL;                                                                    \
    xf_client *c = NULL;                                                                   \
    int out_rc = xf__pool_checkout((p), (p)->checkout_timeout_ms, &c);                     \
    if (out_rc != XF_OK)                                                                   \
      return out_rc;                                                                       \
    return xf__pool_finish((p), c, (call));                                                \
  } while (0)

int xf_pool_set(xf_pool *p, const char *key, size_t keylen, const void *data, size_t len,
                const xf_policy *policy) {
  int bad = refuse(key, keylen, 1, policy);
  if (bad == XF_OK && !data && len > 0) {
    snprintf(xf__pool_error, sizeof xf__pool_error, "data is NULL");
    bad = XF_EINVAL;
  }
  WITH_CLIENT(p, bad, xf_set(c, key, keylen, data, len, policy));
}

int xf_pool_delete(xf_pool *p, const char *key, size_t keylen) {
  WITH_CLIENT(p, refuse(key, keylen, 0, NULL), xf_delete(c, key, keylen));
}

int xf_pool_invalidate_tags(xf_pool *p, const char *const *tags, size_t ntags) {
  WITH_CLIENT(p, XF_OK, xf_invalidate_tags(c, tags, ntags));
}

int xf_pool_clear_namespace(xf_pool *p) { WITH_CLIENT(p, XF_OK, xf_clear_namespace(c)); }

int xf_pool_get(xf_pool *p, const char *key, size_t keylen, xf_value *out) {
  if (out)
    memset(out, 0, sizeof *out);
  int bad = refuse(key, keylen, 0, NULL);
  if (bad == XF_OK && !out) {
    snprintf(xf__pool_error, sizeof xf__pool_error, "out is NULL");
    bad = XF_EINVAL;
  }
  WITH_CLIENT(p, bad, xf_get(c, key, keylen, out));
}

/* ---- batches: one client lent for the whole batch --------------------------------- */

/* What a batch's arguments must be before a client is checked out for it, as
 * the batch driver checks them (batch.c, check_many). */
static int refuse_many(size_t n, const char *const *keys, const size_t *keylens,
                       int has_loader, xf_value *values, int *rcs) {
  const char *why = n > 0 && (!keys || !keylens) ? "keys or keylens is NULL"
                    : n > 0 && (!values || !rcs) ? "values or rcs is NULL"
                    : !has_loader                ? "loader is NULL"
                                                 : NULL;
  snprintf(xf__pool_error, sizeof xf__pool_error, "%s", why ? why : "");
  return why ? XF_EINVAL : XF_OK;
}

int xf_pool_get_or_compute_many(xf_pool *p, size_t n, const char *const *keys,
                                const size_t *keylens, const xf_policy *policy,
                                xf_loader_fn loader, void *ud, xf_value *values, int *rcs) {
  int bad = refuse_many(n, keys, keylens, loader != NULL, values, rcs);
  if (p && bad == XF_OK && n == 0)
    return XF_OK; /* nothing to look at: no client needed */
  WITH_CLIENT(p, bad,
              xf_get_or_compute_many(c, n, keys, keylens, policy, loader, ud, values, rcs));
}

int xf_pool_get_or_compute_many_batch(xf_pool *p, size_t n, const char *const *keys,
                                      const size_t *keylens, const xf_policy *policy,
                                      xf_batch_loader_fn loader, void *ud, xf_value *values,
                                      int *rcs) {
  int bad = refuse_many(n, keys, keylens, loader != NULL, values, rcs);
  if (p && bad == XF_OK && n == 0)
    return XF_OK;
  WITH_CLIENT(
      p, bad,
      xf_get_or_compute_many_batch(c, n, keys, keylens, policy, loader, ud, values, rcs));
}

int xf_pool_open(xf_pool **out, const xf_options *opts, size_t max_connections,
                 int checkout_timeout_ms) {
  if (!out)
    return XF_EINVAL;
  *out = NULL;
  if (max_connections == 0 || max_connections > 4096 || checkout_timeout_ms < 0)
    return XF_EINVAL;
  xf_pool *p = calloc(1, sizeof *p);
  if (!p)
    return XF_ENOMEM;
  xf_options defaults = XF_OPTIONS_INIT;
  p->opts = opts ? *opts : defaults;
  p->opts.lazy_connect = 1; /* clients connect on their first command */
  const char **fields[] = {&p->opts.host,         &p->opts.unix_path,
                           &p->opts.username,     &p->opts.password,
                           &p->opts.key_prefix,   &p->opts.tls.ca_file,
                           &p->opts.tls.ca_dir,   &p->opts.tls.cert_file,
                           &p->opts.tls.key_file, &p->opts.tls.server_name};
  int rc = XF_OK;
  for (int i = 0; i < 10; i++) /* clients made later copy them from here */
    if (*fields[i] && !(*fields[i] = p->strings[i] = strdup(*fields[i])))
      rc = XF_ENOMEM;
  p->max = max_connections;
  p->checkout_timeout_ms =
      checkout_timeout_ms ? checkout_timeout_ms : DEFAULT_CHECKOUT_TIMEOUT_MS;
  p->idle = calloc(max_connections, sizeof *p->idle);
  p->all = calloc(max_connections, sizeof *p->all);
  p->seen = calloc(max_connections, sizeof *p->seen);
  if (!p->idle || !p->all || !p->seen)
    rc = XF_ENOMEM;
  if (rc == XF_OK && !p->opts.share)
    rc = xf_share_open(&p->own_share, NULL);
  if (rc == XF_OK && !p->opts.share)
    p->opts.share = p->own_share;
  xf__cond_init_monotonic(&p->freed);
  pthread_mutex_init(&p->lock, NULL);
  if (rc == XF_OK && !(p->gate = xf__gate_open()))
    rc = XF_ENOMEM;
  if (rc == XF_OK && xf__share_near(p->opts.share) &&
      !(p->spares = xf__spares_open(&p->opts, max_connections)))
    rc = XF_ENOMEM;
  /* One client now: bad options fail here, not on the first call. */
  xf_client *first = NULL;
  if (rc == XF_OK && (rc = xf_client_open(&first, &p->opts)) == XF_OK) {
    first->driver = XF_DRIVER_POOL;
    p->all[0] = p->idle[0] = first;
    p->made = p->nidle = 1;
  }
  if (rc != XF_OK) {
    xf_pool_close(p);
    return rc;
  }
  *out = p;
  return XF_OK;
}

void xf_pool_close(xf_pool *p) {
  if (!p)
    return;
  xf__gate_close(p->gate, XF_REFRESH_DRAIN_MS); /* before the clients go */
  for (size_t i = 0; i < p->made; i++)
    xf_client_close(p->all[i]);
  xf__spares_close(p->spares);
  xf_share_close(p->own_share);
  pthread_cond_destroy(&p->freed);
  pthread_mutex_destroy(&p->lock);
  free(p->idle);
  free(p->all);
  free(p->seen);
  for (int i = 0; i < 10; i++)
    free(p->strings[i]);
  free(p);
}
