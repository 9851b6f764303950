/* A loader's lease renewed from a thread of its own (lease_keeper.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "drive.h"
#include "lease_keeper.h"
#include "now.h"
#include "refresh.h"

struct xf__keeper {
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t stopped;
  int stop;
  xf__renewal rn;
  const xf_options *like; /* valid until xf__keeper_stop */
  xf_share *share;
  xf_options *opts; /* the renewals' client's, from its first renewal */
  xf_client *client;
  xf_stats seen;
  size_t keylen;
  char key[]; /* the user's key */
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

/* One renewal of len ms: the renew flow on the keeper's client. */
static int renew(xf__keeper *k, int64_t len) {
  if (!k->client) {
    if (!k->opts && !(k->opts = xf__options_helper(k->like)))
      return XF_ENOMEM;
    k->opts->share = k->share;
    xf__idle_clients *idle = k->share ? xf__refresh_share_idle(k->share) : NULL;
    if (!(k->client = xf__idle_take(idle, k->opts, &k->seen)))
      return XF_ECONNECT;
  }
  xf__flow r;
  xf__step step = xf__flow_start_renew(&r, k->client, k->key, k->keylen, k->rn.token, len,
                                       xf__now_ms());
  while (step == XF_STEP_SEND)
    step = xf__drive_send(&r);
  return r.rc;
}

static void *keep(void *arg) {
  xf__keeper *k = arg;
  pthread_mutex_lock(&k->mu);
  while (!k->stop && k->rn.next_ms != INT64_MAX) {
    int64_t now = xf__now_ms();
    if (now < k->rn.next_ms) {
      int64_t ms = k->rn.next_ms - now;
      struct timespec until = xf__deadline_in(ms > 1000000 ? 1000000 : (int)ms);
      pthread_cond_timedwait(&k->stopped, &k->mu, &until);
      continue;
    }
    int64_t len = xf__renewal_take(&k->rn, now);
    if (len <= 0)
      break;
    pthread_mutex_unlock(&k->mu);
    int rc = renew(k, len);
    pthread_mutex_lock(&k->mu);
    xf__renewal_done(&k->rn, rc);
  }
  pthread_mutex_unlock(&k->mu);
  return NULL;
}

static void cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
}

xf__keeper *xf__keeper_start(const xf__flow *f, const xf_options *like, xf_share *share) {
  xf__renewal rn;
  if (!like || !xf__flow_renewal(f, &rn))
    return NULL;
  xf__keeper *k = calloc(1, sizeof *k + f->user_keylen + 1);
  if (!k)
    return NULL;
  k->rn = rn;
  k->like = like;
  k->share = share;
  k->keylen = f->user_keylen;
  memcpy(k->key, f->user_key, f->user_keylen);
  pthread_mutex_init(&k->mu, NULL);
  cond_init_monotonic(&k->stopped);
  if (pthread_create(&k->thread, NULL, keep, k) != 0) {
    pthread_cond_destroy(&k->stopped);
    pthread_mutex_destroy(&k->mu);
    free(k);
    return NULL;
  }
  return k;
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
