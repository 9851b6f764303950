/* The share's refresh workers and the owners' gates (refresh.h). Workers are
 * detached threads; the worker set is freed by whichever of its closer and
 * its threads lets go of it last, so a close never waits past its drain time
 * and a refresh left running frees itself. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "now.h"
#include "refresh.h"

struct xf__refreshers {
  pthread_mutex_t mu;
  pthread_cond_t work;
  xf__refresh_job *head, *tail;
  /* The jobs the workers run now: kept reachable from the set, so a child
   * forked meanwhile (which keeps its parents' sets, left_by_parents) does
   * not leak them. A slot is cleared after its job freed itself. */
  xf__refresh_job *in_hand[XF_REFRESH_THREADS];
  size_t queued, running, threads;
  int closing;
  int refs; /* the share's, and one per live thread */
  pid_t pid;
  xf_refresh_info info;
  struct xf__refresh_gate *gate; /* the share's own (xf__refresh_share_gate) */
  xf__idle_clients *idle;        /* the blocking clients' refresh clients */
  struct xf__refreshers *left;   /* in a forked child: the parents' sets left behind */
};

struct xf__refresh_gate {
  pthread_mutex_t mu;
  pthread_cond_t changed;
  int refs;   /* the owner's, and one per job */
  int jobs;   /* submitted, not over */
  int inside; /* jobs touching the owner now */
  int closing, closed;
};

/* Creation of every share's worker set (rare: once per share and process). */
static pthread_mutex_t make_mu = PTHREAD_MUTEX_INITIALIZER;

/* A forked child's parents' worker sets, never touched again (a lock may be
 * held forever) nor freed: kept reachable here. */
static struct xf__refreshers *left_by_parents;

/* fork() holds make_mu across, so that a child never inherits it locked. */
static void make_lock(void) { pthread_mutex_lock(&make_mu); }
static void make_unlock(void) { pthread_mutex_unlock(&make_mu); }
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(make_lock, make_unlock, make_unlock); }

static void unref(struct xf__refreshers *w) { /* lock held; unlocks */
  int last = --w->refs == 0;
  pthread_mutex_unlock(&w->mu);
  if (last) {
    pthread_cond_destroy(&w->work);
    pthread_mutex_destroy(&w->mu);
    xf__idle_free(w->idle);
    free(w);
  }
}

static void *worker(void *arg) {
  struct xf__refreshers *w = arg;
  pthread_mutex_lock(&w->mu);
  for (;;) {
    while (!w->head && !w->closing)
      pthread_cond_wait(&w->work, &w->mu);
    if (!w->head)
      break;
    xf__refresh_job *j = w->head;
    if (!(w->head = j->next))
      w->tail = NULL;
    w->queued--;
    w->running++;
    size_t slot = 0; /* one is free: the other workers hold < XF_REFRESH_THREADS */
    while (w->in_hand[slot])
      slot++;
    w->in_hand[slot] = j;
    pthread_mutex_unlock(&w->mu);
    int outcome = j->run(j);
    pthread_mutex_lock(&w->mu);
    w->in_hand[slot] = NULL;
    w->running--;
    if (outcome == XF_REFRESH_ABANDONED)
      w->info.abandoned++;
    else
      w->info.done++, w->info.failed += outcome == XF_REFRESH_FAILED;
  }
  w->threads--;
  unref(w);
  return NULL;
}

/* s's worker set in this process, made if needed (NULL: out of memory). A
 * forked child's is new: the parent's threads are not there (its set is
 * left as it was: its lock may be held forever). */
static struct xf__refreshers *workers_of(xf_share *s) {
  struct xf__refreshers **at = xf__share_refreshers(s);
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&make_mu);
  if (*at && (*at)->pid != getpid()) {
    (*at)->left = left_by_parents;
    left_by_parents = *at;
    *at = NULL;
  }
  if (!*at) {
    struct xf__refreshers *w = calloc(1, sizeof *w);
    if (w && (!(w->gate = xf__gate_open()) || !(w->idle = xf__idle_new()))) {
      if (w->gate) /* never held: freed by its close */
        xf__gate_close(w->gate, 0);
      free(w);
      w = NULL;
    }
    if (w) {
      pthread_mutex_init(&w->mu, NULL);
      pthread_cond_init(&w->work, NULL);
      w->refs = 1;
      w->pid = getpid();
    }
    *at = w;
  }
  struct xf__refreshers *w = *at;
  pthread_mutex_unlock(&make_mu);
  return w;
}

int xf__refresh_submit(xf_share *s, xf__refresh_job *j) {
  struct xf__refreshers *w = s ? workers_of(s) : NULL;
  if (!w)
    return XF_EBUSY;
  pthread_mutex_lock(&w->mu);
  int rc = XF_OK;
  if (w->closing || w->queued >= XF_REFRESH_QUEUE) {
    rc = XF_EBUSY;
  } else if (w->threads < XF_REFRESH_THREADS && w->queued + w->running >= w->threads) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, worker, w) == 0) {
      w->threads++;
      w->refs++;
    } else if (w->threads == 0) {
      rc = XF_EBUSY;
    }
    pthread_attr_destroy(&attr);
  }
  if (rc == XF_OK) {
    j->next = NULL;
    if (w->tail)
      w->tail->next = j;
    else
      w->head = j;
    w->tail = j;
    w->queued++;
    w->info.started++;
    pthread_cond_signal(&w->work);
  } else {
    w->info.skipped++;
  }
  pthread_mutex_unlock(&w->mu);
  return rc;
}

void xf__refreshers_close(struct xf__refreshers *w, int drain_ms) {
  if (!w || w->pid != getpid())
    return; /* none, or the parent's (a forked child never touches it) */
  pthread_mutex_lock(&w->mu);
  w->closing = 1;
  xf__refresh_job *queued = w->head;
  w->head = w->tail = NULL;
  w->info.abandoned += w->queued;
  w->queued = 0;
  pthread_cond_broadcast(&w->work);
  pthread_mutex_unlock(&w->mu);
  while (queued) {
    xf__refresh_job *next = queued->next;
    queued->drop(queued);
    queued = next;
  }
  /* The jobs that write through the share: drained, then shut out. (A
   * pool's were, by its own gate, when it closed.) */
  xf__gate_close(w->gate, drain_ms);
  xf__idle_close(w->idle); /* no job is inside the gate now */
  pthread_mutex_lock(&w->mu);
  w->gate = NULL;
  unref(w);
}

xf__idle_clients *xf__refresh_share_idle(xf_share *s) {
  struct xf__refreshers *w = workers_of(s);
  return w ? w->idle : NULL;
}

xf__refresh_gate *xf__refresh_share_gate(xf_share *s) {
  struct xf__refreshers *w = workers_of(s);
  return w ? w->gate : NULL;
}

void xf_share_refresh_stats(xf_share *s, xf_refresh_info *out) {
  if (!out)
    return;
  memset(out, 0, sizeof *out);
  if (!s)
    return;
  pthread_mutex_lock(&make_mu);
  struct xf__refreshers *w = *xf__share_refreshers(s);
  pthread_mutex_unlock(&make_mu);
  if (!w || w->pid != getpid())
    return;
  pthread_mutex_lock(&w->mu);
  *out = w->info;
  pthread_mutex_unlock(&w->mu);
  xf__idle_stats(w->idle, &out->clients);
}

/* ---- gates --------------------------------------------------------------------- */

xf__refresh_gate *xf__gate_open(void) {
  xf__refresh_gate *g = calloc(1, sizeof *g);
  if (!g)
    return NULL;
  pthread_mutex_init(&g->mu, NULL);
  xf__cond_init_monotonic(&g->changed);
  g->refs = 1;
  return g;
}

static void gate_unref(xf__refresh_gate *g) { /* lock held; unlocks */
  int last = --g->refs == 0;
  pthread_mutex_unlock(&g->mu);
  if (last) {
    pthread_cond_destroy(&g->changed);
    pthread_mutex_destroy(&g->mu);
    free(g);
  }
}

void xf__gate_hold(xf__refresh_gate *g) {
  if (!g)
    return;
  pthread_mutex_lock(&g->mu);
  g->refs++;
  g->jobs++;
  pthread_mutex_unlock(&g->mu);
}

void xf__gate_release(xf__refresh_gate *g) {
  if (!g)
    return;
  pthread_mutex_lock(&g->mu);
  g->jobs--;
  pthread_cond_broadcast(&g->changed);
  gate_unref(g);
}

int xf__gate_enter(xf__refresh_gate *g, int before_loader) {
  if (!g)
    return 1;
  pthread_mutex_lock(&g->mu);
  int ok = !g->closed && !(before_loader && g->closing);
  g->inside += ok;
  pthread_mutex_unlock(&g->mu);
  return ok;
}

void xf__gate_leave(xf__refresh_gate *g) {
  if (!g)
    return;
  pthread_mutex_lock(&g->mu);
  g->inside--;
  pthread_cond_broadcast(&g->changed);
  pthread_mutex_unlock(&g->mu);
}

void xf__gate_close(xf__refresh_gate *g, int drain_ms) {
  if (!g)
    return;
  pthread_mutex_lock(&g->mu);
  g->closing = 1;
  struct timespec until = xf__deadline_in(drain_ms);
  while (g->jobs > 0)
    if (pthread_cond_timedwait(&g->changed, &g->mu, &until) == ETIMEDOUT)
      break;
  g->closed = 1;
  while (g->inside > 0) /* one command each, bounded by its timeouts */
    pthread_cond_wait(&g->changed, &g->mu);
  gate_unref(g);
}
