/* The event-loop driver's starts: xf_async_get_or_compute, xf_async_get,
 * xf_async_set and xf_async_delete, each the flow of its kind (flow.h) on
 * the call's own copy of its key (and a set's data and policy), handed to
 * async.c to step from the loop. A set or a delete calls back with its code
 * only. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "async.h"
#include "async_start.h"
#include "client_io.h"

/* A set's or a delete's call: its callback takes the code only. */
typedef struct done_call {
  xf__acall k; /* first: released (freed) as any call */
  xf_async_done_fn done;
  void *privdata;
} done_call;

static void call_done(int rc, const xf_value *value, void *privdata) {
  (void)value;
  done_call *d = privdata;
  d->done(rc, d->privdata);
}

/* A new call of size bytes (an xf__acall, or a struct that starts with one)
 * with its own copy of *key and, after it, of a set's *data (data NULL: none),
 * *key and *data then pointing at the copies: the flow is started on them, so
 * nothing of the caller's is read once the start returns. Arguments whose
 * size the flow refuses stay as given (the flow refuses them at once). NULL
 * when out of memory, with the message on the core. */
static xf__acall *new_call(xf_async *ac, size_t size, const char **key, size_t keylen,
                           const void **data, size_t len) {
  xf_client *c = ac->core;
  int copy = *key && keylen <= c->max_key_len && keylen <= SIZE_MAX - c->prefix_len &&
             len <= c->max_value_len && len < SIZE_MAX / 2 && keylen < SIZE_MAX / 2 &&
             (len == 0 || (data && *data));
  xf__acall *k = calloc(1, size);
  char *buf = copy ? malloc(keylen + len + 1) : NULL;
  if (!k || (copy && !buf) || xf__aheap_reserve(ac, ac->ncalls + 1) != 0) {
    free(k);
    free(buf);
    xf__fail(c, XF_ENOMEM, "out of memory for a call on a %zu-byte key", keylen);
    return NULL;
  }
  if (copy) {
    memcpy(buf, *key, keylen);
    *key = buf;
    if (len)
      memcpy(buf + keylen, *data, len);
    if (data)
      *data = buf + keylen;
  }
  k->key = buf;
  k->keylen = keylen;
  k->ac = ac;
  k->heap_at = SIZE_MAX;
  return k;
}

/* The checks every start makes first; XF_OK or the refusal. */
static int may_start(xf_async *ac, int has_callback) {
  if (!ac || ac->closing)
    return XF_EINVAL;
  ac->core->errstr[0] = '\0';
  if (!has_callback)
    return xf__fail(ac->core, XF_EINVAL, "callback is NULL");
  /* The flow's lease tokens: never a parent's in a child. */
  xf__client_check_fork(ac->core);
  return XF_OK;
}

/* ---- the API ---------------------------------------------------------------- */

int xf_async_get_or_compute(xf_async *ac, const char *key, size_t keylen,
                            const xf_policy *policy, xf_async_loader_fn loader, void *ud,
                            xf_async_callback_fn callback, void *privdata) {
  int rc = may_start(ac, callback != NULL);
  if (rc != XF_OK)
    return rc;
  xf_client *c = ac->core;
  if (!loader)
    return xf__fail(c, XF_EINVAL, "loader is NULL");
  if (!policy)
    return xf__fail(c, XF_EINVAL, "policy is NULL");
  xf__acall *k = new_call(ac, sizeof *k, &key, keylen, NULL, 0);
  if (!k)
    return XF_ENOMEM;
  k->p = *policy;
  k->loader = loader;
  k->ud = ud;
  k->cb = callback;
  k->privdata = privdata;
  return xf__async_accept(
      ac, k, xf__flow_start(&k->f, c, key, keylen, &k->p, &k->out, xf__now_ms()));
}

int xf_async_get(xf_async *ac, const char *key, size_t keylen,
                 xf_async_callback_fn callback, void *privdata) {
  int rc = may_start(ac, callback != NULL);
  if (rc != XF_OK)
    return rc;
  xf__acall *k = new_call(ac, sizeof *k, &key, keylen, NULL, 0);
  if (!k)
    return XF_ENOMEM;
  k->cb = callback;
  k->privdata = privdata;
  return xf__async_accept(
      ac, k, xf__flow_start_get(&k->f, ac->core, key, keylen, &k->out, xf__now_ms()));
}

/* A set's or a delete's call, its callback done(rc, privdata). */
static done_call *new_done_call(xf_async *ac, const char **key, size_t keylen,
                                const void **data, size_t len, xf_async_done_fn done,
                                void *privdata) {
  done_call *d = (done_call *)new_call(ac, sizeof *d, key, keylen, data, len);
  if (!d)
    return NULL;
  d->done = done;
  d->privdata = privdata;
  d->k.cb = call_done;
  d->k.privdata = d;
  return d;
}

int xf_async_set(xf_async *ac, const char *key, size_t keylen, const void *data, size_t len,
                 const xf_policy *policy, xf_async_done_fn callback, void *privdata) {
  int rc = may_start(ac, callback != NULL);
  if (rc != XF_OK)
    return rc;
  if (!policy)
    return xf__fail(ac->core, XF_EINVAL, "policy is NULL");
  done_call *d = new_done_call(ac, &key, keylen, &data, len, callback, privdata);
  if (!d)
    return XF_ENOMEM;
  d->k.p = *policy;
  return xf__async_accept(
      ac, &d->k,
      xf__flow_start_set(&d->k.f, ac->core, key, keylen, data, len, &d->k.p, xf__now_ms()));
}

int xf_async_delete(xf_async *ac, const char *key, size_t keylen, xf_async_done_fn callback,
                    void *privdata) {
  int rc = may_start(ac, callback != NULL);
  if (rc != XF_OK)
    return rc;
  done_call *d = new_done_call(ac, &key, keylen, NULL, 0, callback, privdata);
  if (!d)
    return XF_ENOMEM;
  return xf__async_accept(
      ac, &d->k, xf__flow_start_delete(&d->k.f, ac->core, key, keylen, xf__now_ms()));
}

/* An invalidation's call (xf_async_invalidate_tags, xf_async_clear_namespace):
 * the names are copied by the flow as it starts. */
static int invalidate(xf_async *ac, const char *const *tags, size_t ntags, int ns,
                      xf_async_done_fn callback, void *privdata) {
  int rc = may_start(ac, callback != NULL);
  if (rc != XF_OK)
    return rc;
  const char *key = "";
  done_call *d = new_done_call(ac, &key, 0, NULL, 0, callback, privdata);
  if (!d)
    return XF_ENOMEM;
  return xf__async_accept(
      ac, &d->k,
      xf__flow_start_invalidate(&d->k.f, ac->core, tags, ntags, ns, xf__now_ms()));
}

int xf_async_invalidate_tags(xf_async *ac, const char *const *tags, size_t ntags,
                             xf_async_done_fn callback, void *privdata) {
  return invalidate(ac, tags, ntags, 0, callback, privdata);
}

int xf_async_clear_namespace(xf_async *ac, xf_async_done_fn callback, void *privdata) {
  return invalidate(ac, NULL, 0, 1, callback, privdata);
}
