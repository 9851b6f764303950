/* The near scenario's Zipf trace and waiters (bench/near_bench.h).
 *
 * zipf: 10,000 keys (quick: 2,000), drawn Zipf(1) by 2 threads through one
 * share whose near cache holds ~1/8 of them; the same trace (one seed) run
 * through LRU (what near.c does, per shard), CLOCK and S3-FIFO (a 10% small
 * FIFO, a main FIFO, a ghost queue; Yang et al., SOSP '23) at the same
 * capacity in entries, so the policy is chosen on a measured hit ratio.
 *
 * wake: a leader process loads a key for 200 ms; 4 other processes wait for
 * it; each records when its call returned, the leader when its loader did.
 * Its write is sent right after: a waiter's time from there is an upper
 * bound on its time after the write (the leader's call returns later, after
 * the write's reply and the fence's PING, and a woken waiter may be back
 * before that). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "drivers.h"
#include "near_bench.h"

#define ENTRY_BYTES 230 /* near.c's entry for a ~25-byte key and 64-byte value */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* The trace: len key indices drawn Zipf(1) over n keys. */
static int *make_trace(int n, size_t len, uint64_t seed) {
  double *cdf = malloc((size_t)n * sizeof *cdf);
  int *t = malloc(len * sizeof *t);
  if (!cdf || !t) {
    free(cdf), free(t);
    return NULL;
  }
  double sum = 0;
  for (int i = 0; i < n; i++)
    cdf[i] = sum += 1.0 / (i + 1);
  for (size_t j = 0; j < len; j++) {
    double u = (double)(rng_next(&seed) >> 11) / 9007199254740992.0 * sum;
    int lo = 0, hi = n - 1;
    while (lo < hi) {
      int mid = (lo + hi) / 2;
      if (cdf[mid] < u)
        lo = mid + 1;
      else
        hi = mid;
    }
    t[j] = lo;
  }
  free(cdf);
  return t;
}

/* ---- the policies, simulated ---- */

static double sim_lru(const int *t, size_t len, int n, int cap) {
  int *prev = malloc(n * sizeof *prev), *next = malloc(n * sizeof *next);
  char *in = calloc(n, 1);
  int head = -1, tail = -1, size = 0;
  size_t hits = 0;
  for (size_t j = 0; prev && next && in && j < len; j++) {
    int k = t[j];
    if (in[k]) {
      hits++;
      if (head == k)
        continue;
      next[prev[k]] = next[k];
      if (next[k] >= 0)
        prev[next[k]] = prev[k];
      else
        tail = prev[k];
    } else if (size == cap) {
      in[tail] = 0;
      int p = prev[tail];
      if (p >= 0)
        next[p] = -1;
      else
        head = -1;
      tail = p;
      size--;
    }
    if (!in[k])
      in[k] = 1, size++;
    prev[k] = -1, next[k] = head;
    if (head >= 0)
      prev[head] = k;
    head = k;
    if (tail < 0)
      tail = k;
  }
  free(prev), free(next), free(in);
  return (double)hits / (double)len;
}

static double sim_clock(const int *t, size_t len, int n, int cap) {
  int *ring = malloc(cap * sizeof *ring), *slot = malloc(n * sizeof *slot);
  char *ref = calloc(cap, 1);
  int hand = 0, size = 0;
  size_t hits = 0;
  for (int i = 0; slot && i < n; i++)
    slot[i] = -1;
  for (size_t j = 0; ring && slot && ref && j < len; j++) {
    int k = t[j];
    if (slot[k] >= 0) {
      hits++, ref[slot[k]] = 1;
      continue;
    }
    if (size < cap) {
      ring[size] = k, slot[k] = size, ref[size++] = 0;
      continue;
    }
    while (ref[hand])
      ref[hand] = 0, hand = (hand + 1) % cap;
    slot[ring[hand]] = -1;
    ring[hand] = k, slot[k] = hand, ref[hand] = 0;
    hand = (hand + 1) % cap;
  }
  free(ring), free(slot), free(ref);
  return (double)hits / (double)len;
}

/* A FIFO of key indices (a ring). */
typedef struct fifo {
  int *q, cap, head, n;
} fifo;

static void fifo_push(fifo *f, int k) { f->q[(f->head + f->n++) % f->cap] = k; }
static int fifo_pop(fifo *f) {
  int k = f->q[f->head];
  f->head = (f->head + 1) % f->cap, f->n--;
  return k;
}

static double sim_s3fifo(const int *t, size_t len, int n, int cap) {
  int small_cap = cap / 10 > 0 ? cap / 10 : 1, main_cap = cap - small_cap;
  fifo s = {malloc(cap * sizeof(int)), cap, 0, 0},
       m = {malloc(cap * sizeof(int)), cap, 0, 0},
       g = {malloc(cap * sizeof(int)), cap, 0, 0};
  char *where = calloc(n, 1), *freq = calloc(n, 1); /* 0 out, 1 small, 2 main, 3 ghost */
  size_t hits = 0;
  for (size_t j = 0; s.q && m.q && g.q && where && freq && j < len; j++) {
    int k = t[j];
    if (where[k] == 1 || where[k] == 2) {
      hits++;
      if (freq[k] < 3)
        freq[k]++;
      continue;
    }
    while (s.n + m.n >= cap) { /* evict */
      if (s.n >= small_cap || m.n == 0) {
        int v = fifo_pop(&s);
        if (freq[v] > 0) {
          where[v] = 2, freq[v] = 0;
          fifo_push(&m, v);
        } else {
          if (g.n == g.cap)
            where[fifo_pop(&g)] = 0;
          where[v] = 3;
          fifo_push(&g, v);
        }
      } else {
        int v = fifo_pop(&m);
        if (freq[v] > 0)
          freq[v]--, fifo_push(&m, v);
        else
          where[v] = 0;
      }
    }
    (void)main_cap;
    if (where[k] == 3) { /* in the ghost queue: straight to main (its slot stays: lazy) */
      where[k] = 2, freq[k] = 0;
      fifo_push(&m, k);
    } else {
      where[k] = 1, freq[k] = 0;
      fifo_push(&s, k);
    }
  }
  free(s.q), free(m.q), free(g.q), free(where), free(freq);
  return (double)hits / (double)len;
}

/* ---- the real thing ---- */

typedef struct zrun {
  xf_client *c;
  const int *trace;
  size_t from, len;
  unsigned run_id;
  step_errors *errs;
} zrun;

static void *zipf_thread(void *arg) {
  zrun *z = arg;
  xf_policy p = XF_POLICY_INIT;
  for (size_t j = z->from; j < z->from + z->len; j++) {
    char key[48];
    snprintf(key, sizeof key, "xfb:%u:near:z%d", z->run_id, z->trace[j]);
    xf_value v;
    int rc = xf_get_or_compute(z->c, key, strlen(key), &p, drv_loader, NULL, &v);
    if (rc != XF_OK)
      step_count(z->errs, "xf_get_or_compute (zipf)", rc, xf_errmsg(z->c));
    xf_value_free(&v);
  }
  return NULL;
}

int nb_zipf_run(const bench_env *e, int quick, nb_zipf *out, step_errors *errs) {
  int n = quick ? 2000 : 10000, threads = 2, cap = n / 8;
  size_t len = quick ? 200000 : 1000000;
  memset(out, 0, sizeof *out);
  int *t = make_trace(n, len, 42);
  if (!t)
    return step_failed("zipf: the trace", XF_ENOMEM, NULL);
  out->keys = n, out->threads = threads;
  out->sim_lru = sim_lru(t, len, n, cap);
  out->sim_clock = sim_clock(t, len, n, cap);
  out->sim_s3fifo = sim_s3fifo(t, len, n, cap);
  xf_share *s = nb_share((size_t)cap * ENTRY_BYTES);
  xf_client *far = drv_client_shared(e->t, NULL), *c[2] = {0};
  int rv = s && far ? 0 : -1;
  for (int i = 0; !rv && i < threads; i++)
    rv = (c[i] = drv_client_shared(e->t, s)) ? 0 : -1;
  if (!rv) { /* every key in Redis first: only the near cache's misses remain */
    int *all = malloc(n * sizeof *all);
    for (int i = 0; all && i < n; i++)
      all[i] = i;
    zrun w = {far, all, 0, all ? (size_t)n : 0, e->cfg->run_id, errs};
    zipf_thread(&w);
    free(all);
    rv = all ? 0 : step_failed("zipf: the keys", XF_ENOMEM, NULL);
  }
  pthread_t th[2];
  zrun z[2];
  long long c0 = nb_commands(e->rc);
  double t0 = now_s();
  for (int i = 0; !rv && i < threads; i++) {
    z[i] = (zrun){c[i], t, len / threads * i, len / threads, e->cfg->run_id, errs};
    int err = pthread_create(&th[i], NULL, zipf_thread, &z[i]);
    if (err) {
      rv = step_failed_because("zipf: pthread_create", strerror(err));
      for (int j = 0; j < i; j++)
        pthread_join(th[j], NULL);
    }
  }
  for (int i = 0; !rv && i < threads; i++)
    pthread_join(th[i], NULL);
  if (!rv) {
    double wall = now_s() - t0;
    long long c1 = nb_commands(e->rc);
    uint64_t near_hits = 0;
    for (int i = 0; i < threads; i++) {
      xf_stats st;
      xf_client_stats(c[i], &st);
      near_hits += st.near_hits;
      out->evictions += st.near_evictions;
    }
    if (__atomic_load_n(&errs->n, __ATOMIC_ACQUIRE) >= len)
      rv = step_meaningless("zipf", "hit ratio and calls/s", "no call succeeded", errs);
    out->hit_ratio = (double)near_hits / (double)len;
    out->rps = (double)len / wall;
    out->cmds_per_call = (double)(c1 - c0 - 1) / (double)len;
  }
  for (int i = 0; i < threads; i++)
    xf_client_close(c[i]);
  xf_client_close(far);
  xf_share_close(s);
  free(t);
  return rv;
}

/* ---- waiters woken by the write ---- */

typedef struct wake_log {
  double leader_started, leader_loaded, waiter_done[4];
  step_errors leader, waiters; /* their failed calls */
} wake_log;

/* ud: the log where the leader notes when its load started and ended (NULL
 * for a waiter). */
static int slow_loader(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key, (void)keylen;
  wake_log *log = ud;
  if (log)
    log->leader_started = now_s();
  struct timespec ts = {0, 200 * 1000000L};
  nanosleep(&ts, NULL);
  if (log)
    log->leader_loaded = now_s();
  return xf_sink_set(sink, "slow", 4);
}

/* One process's call: its own share (near on or off); a waiter's end time
 * to done, the leader's load to loaded (the leader's log). */
static void one_call(const target *t, const char *key, int near, wake_log *loaded,
                     double *done, step_errors *errs) {
  xf_share *s = near ? nb_share(1 << 20) : NULL;
  xf_client *c = !near || s ? drv_client_shared(t, s) : NULL;
  xf_policy p = XF_POLICY_INIT;
  xf_value v = {0};
  int rc =
      c ? xf_get_or_compute(c, key, strlen(key), &p, slow_loader, loaded, &v) : XF_ECONNECT;
  if (rc == XF_OK && done)
    *done = now_s();
  else if (rc != XF_OK)
    step_count(errs,
               loaded ? "the leader's xf_get_or_compute" : "a waiter's xf_get_or_compute",
               rc, c ? xf_errmsg(c) : "its client did not open (above)");
  xf_value_free(&v);
  xf_client_close(c);
  xf_share_close(s);
}

static int wake_pass(const bench_env *e, int near, double *max_ms, double *mean_ms,
                     uint64_t *errors) {
  wake_log *log =
      mmap(NULL, sizeof *log, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (log == MAP_FAILED)
    return -1;
  memset(log, 0, sizeof *log);
  char key[64];
  snprintf(key, sizeof key, "xfb:%u:near:wake%d", e->cfg->run_id, near);
  pid_t pid[5];
  for (int i = 0; i < 5; i++) {
    if ((pid[i] = fork()) < 0)
      step_failed_because("wake: fork", strerror(errno));
    else if (pid[i] == 0) {
      if (i == 0)
        one_call(e->t, key, near, log, NULL, &log->leader);
      else
        one_call(e->t, key, near, NULL, &log->waiter_done[i - 1], &log->waiters);
      _exit(0);
    }
    /* The waiters start once the leader's loader runs (it holds the lease),
     * however long a busy machine takes to get it there (10 s at most). */
    volatile double *started = &log->leader_started; /* another process writes it */
    for (double until = now_s() + 10;
         i == 0 && pid[0] > 0 && *started <= 0 && now_s() < until;)
      usleep(1000);
  }
  for (int i = 0; i < 5; i++)
    if (pid[i] > 0)
      waitpid(pid[i], NULL, 0);
  const char *what = near ? "wake (near cache on)" : "wake (polling)";
  int rv = 0, done = 0;
  if (pid[0] < 0 || log->leader_loaded <= 0) /* nothing was written to wake on */
    rv = step_meaningless(what, "the waiters' time after the write",
                          "the leader's load did not complete", &log->leader);
  *max_ms = -1e9, *mean_ms = 0;
  for (int i = 0; !rv && i < 4; i++)
    if (log->waiter_done[i] > 0) { /* a failed waiter is counted, left out */
      double lag = (log->waiter_done[i] - log->leader_loaded) * 1000;
      *max_ms = lag > *max_ms ? lag : *max_ms;
      *mean_ms += lag, done++;
    }
  if (!rv && !done)
    rv = step_meaningless(what, "the waiters' time after the write",
                          "no waiter's call succeeded", &log->waiters);
  if (!rv) {
    *mean_ms /= done;
    *errors += __atomic_load_n(&log->waiters.n, __ATOMIC_ACQUIRE);
    step_errors_report(what, &log->waiters, 4);
  }
  munmap(log, sizeof *log);
  return rv;
}

int nb_wake_run(const bench_env *e, nb_wake *out) {
  out->errors = 0;
  if (wake_pass(e, 1, &out->near_max_ms, &out->near_mean_ms, &out->errors) ||
      wake_pass(e, 0, &out->poll_max_ms, &out->poll_mean_ms, &out->errors))
    return -1;
  return 0;
}
