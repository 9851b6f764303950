/* A loader's lease renewed from a thread of its own (lease_keeper.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "drive.h"
#include "lease_keeper.h"
#include "now.h"
#include "refresh.h"

/* One lease kept: a flow's key, token and renewal times. */
typedef struct kept {
  xf__renewal rn;
  const xf__flow *flow; /* whose (xf__keeper_drop), never read */
  size_t keylen;
  char *key; /* the user's key */
} kept;

struct xf__keeper {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t stopped;
  int stop;
  const xf_options *like; /* valid until xf__keeper_stop */
  xf_share *share;
  xf_options *opts; /* the renewals' client's, from its first renewal */
  xf_client *client;
  xf_stats seen;
  size_t n;
  kept keys[];
};

xf_options *xf__options_helper(const xf_options *mine) {
  xf_options *o = xf__options_dup(mine);
  if (!o)
    return NULL;
  o->lazy_connect = 1;
  o->interrupt = NULL; /* the per-call fields: clients opened alike match */
  o->interrupt_ud = NULL;
  o->seed = 0;
  o->refresh_executor = NULL;
  o->refresh_executor_ud = NULL;
  return o;
}

/* One renewal of key j's lease by len ms: the renew flow on the keeper's
 * client. */
static int renew(xf__keeper *k, const kept *kp, int64_t len) {
  if (!k->client) {
    if (!k->opts && !(k->opts = xf__options_helper(k->like)))
      return XF_ENOMEM;
    k->opts->share = k->share;
    xf__idle_clients *idle = k->share ? xf__refresh_share_idle(k->share) : NULL;
    if (!(k->client = xf__idle_take(idle, k->opts, &k->seen)))
      return XF_ECONNECT;
  }
  xf__flow r;
  xf__step step = xf__flow_start_renew(&r, k->client, kp->key, kp->keylen, kp->rn.token,
                                       len, xf__now_ms());
  while (step == XF_STEP_SEND)
    step = xf__drive_send(&r);
  return r.rc;
}

/* The earliest renewal due among the keys kept (INT64_MAX: none left). */
static int64_t next_due(const xf__keeper *k) {
  int64_t next = INT64_MAX;
  for (size_t j = 0; j < k->n; j++)
    if (k->keys[j].rn.next_ms < next)
      next = k->keys[j].rn.next_ms;
  return next;
}

static void *keep(void *arg) {
  xf__keeper *k = arg;
  pthread_mutex_lock(&k->mu);
  int64_t next;
  while (!k->stop && (next = next_due(k)) != INT64_MAX) {
    int64_t now = xf__now_ms();
    if (now < next) {
      int64_t ms = next - now;
      struct timespec until = xf__deadline_in(ms > 1000000 ? 1000000 : (int)ms);
      pthread_cond_timedwait(&k->stopped, &k->mu, &until);
      continue;
    }
    for (size_t j = 0; j < k->n && !k->stop; j++) {
      kept *kp = &k->keys[j];
      if (kp->rn.next_ms > now)
        continue;
      int64_t len = xf__renewal_take(&kp->rn, now);
      if (len <= 0)
        continue;
      kept copy = *kp; /* xf__keeper_drop may end kp's renewals meanwhile */
      pthread_mutex_unlock(&k->mu);
      int rc = renew(k, &copy, len);
      pthread_mutex_lock(&k->mu);
      if (kp->rn.next_ms != INT64_MAX)
        xf__renewal_done(&kp->rn, rc);
    }
  }
  pthread_mutex_unlock(&k->mu);
  return NULL;
}

xf__keeper *xf__keeper_start_many(xf__flow *const *flows, size_t n, const xf_options *like,
                                  xf_share *share) {
  if (!like)
    return NULL;
  size_t m = 0, bytes = 0;
  xf__renewal rn;
  for (size_t i = 0; i < n; i++)
    if (xf__flow_renewal(flows[i], &rn))
      m++, bytes += flows[i]->user_keylen + 1;
  if (m == 0)
    return NULL;
  xf__keeper *k = calloc(1, sizeof *k + m * sizeof(kept) + bytes);
  if (!k)
    return NULL;
  char *key = (char *)&k->keys[m];
  for (size_t i = 0; i < n; i++) {
    kept *kp = &k->keys[k->n];
    if (!xf__flow_renewal(flows[i], &kp->rn))
      continue;
    kp->flow = flows[i];
    kp->keylen = flows[i]->user_keylen;
    kp->key = key;
    memcpy(key, flows[i]->user_key, kp->keylen);
    key += kp->keylen + 1;
    k->n++;
  }
  k->like = like;
  k->share = share;
  pthread_mutex_init(&k->mu, NULL);
  xf__cond_init_monotonic(&k->stopped);
  if (pthread_create(&k->thread, NULL, keep, k) != 0) {
    pthread_cond_destroy(&k->stopped);
    pthread_mutex_destroy(&k->mu);
    free(k);
    return NULL;
  }
  return k;
}

xf__keeper *xf__keeper_start(const xf__flow *f, const xf_options *like, xf_share *share) {
  xf__flow *one = (xf__flow *)f; /* only read */
  return xf__keeper_start_many(&one, 1, like, share);
}

void xf__keeper_drop(xf__keeper *k, const xf__flow *f) {
  if (!k)
    return;
  pthread_mutex_lock(&k->mu);
  for (size_t j = 0; j < k->n; j++)
    if (k->keys[j].flow == f)
      k->keys[j].rn.next_ms = INT64_MAX;
  pthread_mutex_unlock(&k->mu);
}

void xf__keeper_stop(xf__keeper *k) {
  if (!k)
    return;
  pthread_mutex_lock(&k->mu);
  k->stop = 1;
  pthread_cond_signal(&k->stopped);
  pthread_mutex_unlock(&k->mu);
  pthread_join(k->thread, NULL);
  if (k->client)
    xf__idle_give(k->share ? xf__refresh_share_idle(k->share) : NULL, k->client, &k->seen);
  pthread_cond_destroy(&k->stopped);
  pthread_mutex_destroy(&k->mu);
  free(k->opts);
  free(k);
}
