/* The blocking driver's load under a soft or hard timeout (flow.h,
 * xf__flow_load_deadline): the loader runs on the share's refresh workers
 * while the caller waits for it until the deadline. In time, the caller
 * takes the loader's result and goes on as with any load (its write on its
 * own client). Past it, the caller's flow ends with what the timeout gives
 * (xf__flow_time_out) and the load moves to the job, which writes it once
 * the loader returns, through one of the share's idle refresh clients, as a
 * background refresh does. The loader and loader_ud must then stay valid
 * until the share is closed: setting a timeout opts in (policy.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client_io.h"
#include "drive.h"
#include "flow_steps.h"
#include "lease_keeper.h"
#include "nesting.h"
#include "now.h"
#include "refresh.h"

typedef struct bounded {
  xf__refresh_job job; /* first */
  pthread_mutex_t mu;
  pthread_cond_t landed;
  int refs;    /* the caller's and the worker's */
  int loaded;  /* the loader returned (or the job was dropped: dropped) */
  int dropped; /* never run (the share is closing) */
  xf_loader_fn loader;
  void *ud;
  xf_share *share;
  xf__refresh_gate *gate; /* the share's: the write touches its clients */
  xf_options *opts;       /* the write's client's, and the renewals' */
  xf__keeper *keeper;     /* the lease renewed while the loader runs */
  struct xf_sink sink;    /* the loader's: moved into the flow that owns the load */
  int loader_rc;
  int64_t delta_us, end_ms;
  /* Copies for the loader, which may outlive the call. */
  char *key; /* the user's key, then the Redis key (the nest frame's) */
  size_t keylen, redis_keylen;
  char *ns; /* the client's namespace, for the loader's nest frame */
  size_t ns_len;
  /* Past the deadline: the load the caller left, the job's from then on. */
  xf__flow *bg;
  xf_policy policy;
  xf_value out;
} bounded;

static void unref(bounded *b) { /* lock held; unlocks */
  int last = --b->refs == 0;
  pthread_mutex_unlock(&b->mu);
  if (!last)
    return;
  pthread_cond_destroy(&b->landed);
  pthread_mutex_destroy(&b->mu);
  xf__keeper_stop(b->keeper);
  xf__sink_clear(&b->sink);
  xf__gate_release(b->gate);
  free(b->opts);
  free(b->ns);
  free(b->key);
  free(b->bg);
  free(b);
}

/* The load the caller left: the loader's outcome into it, then its write
 * (or release) on an idle refresh client; abandoned (its lease expires)
 * when the share is closing. */
static void finish_left(bounded *b) {
  xf__flow *f = b->bg;
  xf_client *c = NULL;
  xf__idle_clients *idle = NULL;
  xf_stats seen;
  if (!b->dropped && xf__gate_enter(b->gate, 0)) {
    idle = xf__refresh_share_idle(b->share);
    if ((c = xf__idle_take(idle, b->opts, &seen))) {
      xf__flow_rebind(f, c);
      f->sink = b->sink;
      memset(&b->sink, 0, sizeof b->sink);
      xf__step step = xf__flow_loaded(f, b->loader_rc, b->delta_us, b->end_ms);
      while (step == XF_STEP_SEND)
        step = xf__drive_send(f);
      xf_value_free(&b->out);
      xf__idle_give(idle, c, &seen);
    }
    xf__gate_leave(b->gate);
  }
  if (!c)
    xf__flow_abandon(f);
}

static void landed(bounded *b) {
  pthread_mutex_lock(&b->mu);
  b->loaded = 1;
  if (!b->bg) { /* the caller waits: it takes the outcome */
    pthread_cond_signal(&b->landed);
    unref(b);
    return;
  }
  pthread_mutex_unlock(&b->mu);
  finish_left(b);
  pthread_mutex_lock(&b->mu);
  unref(b);
}

static int run(xf__refresh_job *j) {
  bounded *b = (bounded *)j;
  xf__nest frame;
  int64_t t0 = xf__now_us();
  xf__nest_push_ns(&frame, b->ns, b->ns_len, b->key + b->keylen, b->redis_keylen);
  b->loader_rc = b->loader(b->ud, b->key, b->keylen, &b->sink);
  xf__nest_pop(&frame);
  int64_t t1 = xf__now_us();
  b->delta_us = t1 - t0;
  b->end_ms = t1 / 1000;
  pthread_mutex_lock(&b->mu);
  xf__keeper *k = b->keeper;
  b->keeper = NULL;
  pthread_mutex_unlock(&b->mu);
  xf__keeper_stop(k);
  int rc = b->loader_rc;
  landed(b); /* b may be gone after this */
  return rc == 0 ? XF_REFRESH_DONE : XF_REFRESH_FAILED;
}

static void drop(xf__refresh_job *j) {
  bounded *b = (bounded *)j;
  b->dropped = 1;
  landed(b);
}

static bounded *bounded_new(xf__flow *f, xf_loader_fn loader, void *ud) {
  xf_client *c = f->c;
  bounded *b = calloc(1, sizeof *b);
  if (!b)
    return NULL;
  b->opts = xf__options_helper(c->opened_with);
  b->ns = malloc(c->ns_len + 1);
  b->key = malloc(f->user_keylen + f->key.len + 1);
  b->gate = xf__refresh_share_gate(c->share);
  if (!b->opts || !b->ns || !b->key || !b->gate) {
    free(b->opts);
    free(b->ns);
    free(b->key);
    free(b);
    return NULL;
  }
  memcpy(b->key, f->user_key, f->user_keylen);
  memcpy(b->key + f->user_keylen, f->key.data, f->key.len);
  b->key[f->user_keylen + f->key.len] = '\0';
  b->keylen = f->user_keylen;
  b->redis_keylen = f->key.len;
  memcpy(b->ns, c->ns, c->ns_len);
  b->ns[c->ns_len] = '\0';
  b->ns_len = c->ns_len;
  b->job.run = run;
  b->job.drop = drop;
  b->refs = 2;
  b->loader = loader;
  b->ud = ud;
  b->share = c->share;
  xf__sink_own_previous(&f->sink); /* the call may serve its entry's value meanwhile */
  b->sink = f->sink;        /* initialized by the LOAD step: at most the previous value */
  xf__sink_reset(&f->sink); /* b's until the outcome goes back to a flow */
  pthread_mutex_init(&b->mu, NULL);
  xf__cond_init_monotonic(&b->landed);
  xf__gate_hold(b->gate);
  return b;
}

/* Past the deadline: the caller's flow ends as the timeout says and its
 * load moves to b (lock held). Returns the caller's step (DONE), or LOAD
 * when there is no memory for the move (the caller waits for its loader). */
static xf__step leave(bounded *b, xf__flow *f, int64_t now_ms) {
  xf__flow *bg = malloc(sizeof *bg);
  if (!bg)
    return XF_STEP_LOAD;
  b->policy = *f->p;
  xf__flow_time_out(f, bg, &b->policy, b->key, &b->out, now_ms);
  bg->interrupt = NULL; /* nobody to ask on a worker */
  b->bg = bg;
  f->c->load_moved = 1;
  return XF_STEP_DONE;
}

xf__step xf__blocking_bounded_load(xf__flow *f, xf_loader_fn loader, void *ud) {
  int64_t deadline = xf__flow_load_deadline(f);
  bounded *b = deadline == INT64_MAX || !f->c->share ? NULL : bounded_new(f, loader, ud);
  if (!b)
    return xf__flow_run_loader(f, loader, ud);
  xf__flow_settle(f); /* the loader runs: what the call owes first */
  b->keeper = xf__keeper_start(f, b->opts, NULL);
  if (xf__refresh_submit(f->c->share, &b->job) != XF_OK) { /* no worker: in the call */
    xf__keeper_stop(b->keeper);
    b->keeper = NULL;
    f->sink = b->sink; /* the previous value back to the call */
    b->sink = (struct xf_sink){0};
    pthread_mutex_lock(&b->mu);
    b->refs = 1;
    unref(b);
    return xf__flow_run_loader(f, loader, ud);
  }
  xf__step step = XF_STEP_LOAD;
  pthread_mutex_lock(&b->mu);
  for (;;) {
    while (!b->loaded && xf__now_ms() < deadline) {
      int64_t ms = deadline - xf__now_ms();
      struct timespec until = xf__deadline_in(ms > 1000000 ? 1000000 : (int)ms);
      pthread_cond_timedwait(&b->landed, &b->mu, &until);
    }
    if (b->loaded || (step = leave(b, f, xf__now_ms())) == XF_STEP_DONE)
      break;
    deadline = INT64_MAX; /* no memory to leave it: wait for the loader */
  }
  if (step == XF_STEP_DONE) {
    unref(b);
    return step;
  }
  int dropped = b->dropped;
  f->sink = b->sink; /* the loader's outcome is the caller's */
  memset(&b->sink, 0, sizeof b->sink);
  int lrc = b->loader_rc;
  int64_t delta_us = b->delta_us, end_ms = b->end_ms;
  unref(b);
  if (dropped) /* the share is closing: the loader runs in the call */
    return xf__flow_run_loader(f, loader, ud);
  return xf__flow_loaded(f, lrc, delta_us, end_ms);
}
