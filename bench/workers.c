/* Worker processes: fork one per client so nothing is shared in-process; each
 * has its own connection and plays a closed loop (with think time), an open
 * loop (Poisson arrivals; latency counted from the intended send time, so no
 * coordinated omission) or cold-start rounds. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

#define START_LEAD_US 10000     /* from the last worker's open to the epoch */
#define ARRIVE_WAIT_US 30000000 /* the longest wait for the workers' opens */
/* A worker's exit code: its connection did not open (counted and described
 * in the arena's errs). */
#define NOT_OPENED 3

typedef struct keys {
  int n;
  double *cdf; /* Zipf, or NULL for uniform */
} keys;

static void keys_init(keys *k, const run_spec *s) {
  k->n = s->nkeys > 0 ? s->nkeys : 1;
  k->cdf = NULL;
  if (s->zipf_s <= 0 || k->n == 1)
    return;
  k->cdf = malloc(sizeof(double) * (size_t)k->n);
  double sum = 0;
  for (int i = 0; i < k->n; i++)
    k->cdf[i] = sum += 1.0 / pow(i + 1, s->zipf_s);
  for (int i = 0; i < k->n; i++)
    k->cdf[i] /= sum;
}

static uint32_t keys_pick(const keys *k, pcg *r) {
  if (k->n == 1)
    return 0;
  if (!k->cdf)
    return pcg_next(r) % (uint32_t)k->n;
  double u = pcg_unit(r);
  int lo = 0, hi = k->n - 1;
  while (lo < hi) {
    int mid = (lo + hi) / 2;
    if (k->cdf[mid] < u)
      lo = mid + 1;
    else
      hi = mid;
  }
  return (uint32_t)lo;
}

static void one(strat_ctx *c, arena *a, uint32_t key, int64_t t_abs) {
  unsigned flags;
  if (strat_get(c, key, &flags) != 0)
    flags |= RQ_ERROR;
  arena_add_sample(a, t_abs - a->epoch_us, now_us() - t_abs, flags);
}

static void worker(const target *t, const run_spec *s, arena *a, const keys *k, int id) {
  strat_ctx *c = strat_open(t, s, a, id);
  __atomic_add_fetch(&a->arrived, 1, __ATOMIC_ACQ_REL);
  if (!c)
    _exit(NOT_OPENED);
  /* The run starts once every worker has its connection (a TLS handshake on a
   * loaded machine can take longer than a short run lasts). */
  while (!__atomic_load_n(&a->go, __ATOMIC_ACQUIRE))
    sleep_us(1000);
  pcg r;
  pcg_seed(&r, (uint64_t)now_us() * 2654435761u ^ (uint64_t)getpid(), (uint64_t)id + 100);
  int64_t start = a->epoch_us, end = start + (int64_t)(s->duration_s * 1e6);
  sleep_us(start - now_us());
  if (s->rounds > 0) {
    for (int i = 0; i < s->rounds && !a->stop; i++) {
      int64_t go = start + (int64_t)i * s->round_gap_ms * 1000;
      sleep_us(go - now_us());
      one(c, a, (uint32_t)i, go);
    }
  } else if (s->open_rate > 0) {
    double per_worker = s->open_rate / s->clients;
    int64_t next = start;
    for (;;) {
      next += (int64_t)(-log(pcg_unit(&r)) / per_worker * 1e6);
      if (next >= end || a->stop)
        break;
      sleep_us(next - now_us());
      one(c, a, keys_pick(k, &r), next);
    }
  } else {
    while (!a->stop) {
      int64_t t0 = now_us();
      if (t0 >= end)
        break;
      one(c, a, keys_pick(k, &r), t0);
      sleep_us(s->think_us);
    }
  }
  strat_close(c);
  _exit(0);
}

static void progress(const run_spec *s, arena *a, const char *label) {
  double el = (double)(now_us() - a->epoch_us) / 1e6;
  double total = s->rounds > 0 ? s->rounds * s->round_gap_ms / 1000.0 : s->duration_s;
  uint64_t n = __atomic_load_n(&a->nsamples, __ATOMIC_RELAXED);
  double rps = el > 0 ? (double)n / el : 0;
  fprintf(stderr, "\r\033[K%-24s %-15s %5.1f/%.1f s  %8llu req  %7.0f req/s  %6llu loads",
          label, strategy_name(s->strat), el < 0 ? 0 : el, total, (unsigned long long)n,
          rps, (unsigned long long)__atomic_load_n(&a->nloads, __ATOMIC_RELAXED));
}

double workers_run(const target *t, const run_spec *s, arena *a, const char *label) {
  keys k;
  keys_init(&k, s);
  arena_reset(a);
  a->epoch_us = INT64_MAX / 2; /* no run time before the go */
  pid_t *pids = calloc((size_t)s->clients, sizeof *pids);
  int failed = 0, tty = isatty(2), ticks = 0, status_of_failed = 0, fork_errno = 0;
  fflush(NULL);
  for (int i = 0; i < s->clients; i++) {
    pids[i] = fork();
    if (pids[i] == 0) {
      signal(SIGINT, SIG_DFL);
      worker(t, s, a, &k, i);
    }
    if (pids[i] < 0)
      failed++, fork_errno = errno;
  }
  /* The epoch once every worker that started has opened (or failed to). */
  for (int64_t t0 = now_us();
       __atomic_load_n(&a->arrived, __ATOMIC_ACQUIRE) < s->clients - failed &&
       now_us() - t0 < ARRIVE_WAIT_US && !a->stop;)
    sleep_us(1000);
  a->epoch_us = now_us() + START_LEAD_US;
  __atomic_store_n(&a->go, 1, __ATOMIC_RELEASE);
  for (int left = s->clients - failed; left > 0;) {
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      for (int i = 0; i < s->clients; i++)
        if (pids[i] == p) {
          left--;
          if (WIFEXITED(status) && WEXITSTATUS(status) == NOT_OPENED)
            a->not_opened++;
          else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failed++, status_of_failed = status;
        }
      continue;
    }
    if (tty && ++ticks % 4 == 0)
      progress(s, a, label);
    sleep_us(50000);
  }
  if (tty)
    fprintf(stderr, "\r\033[K");
  free(pids);
  free(k.cdf);
  /* 0 when every worker ended before the epoch (none could connect) */
  double wall = now_us() > a->epoch_us ? (double)(now_us() - a->epoch_us) / 1e6 : 0;
  if (failed) {
    char why[160];
    if (fork_errno)
      snprintf(why, sizeof why, "%d of %d worker processes could not start (fork: %s)",
               failed, s->clients, strerror(fork_errno));
    else if (WIFSIGNALED(status_of_failed))
      snprintf(why, sizeof why,
               "%d of %d worker processes ended abnormally (signal %d: %s)", failed,
               s->clients, WTERMSIG(status_of_failed),
               strsignal(WTERMSIG(status_of_failed)));
    else
      snprintf(why, sizeof why, "%d of %d worker processes ended abnormally (exit code %d)",
               failed, s->clients, WEXITSTATUS(status_of_failed));
    char step[80];
    snprintf(step, sizeof step, "%s: workers", s->label);
    step_failed_because(step, why);
    return -1;
  }
  return wall;
}
