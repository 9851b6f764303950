/* The staleness harness with tags, across processes: 4 processes, each a
 * reader and a writer, get-or-compute 8 tagged keys (2 tags of 4 each) whose
 * loader returns the data's generation as it reads it, and in between bump the
 * generation and invalidate one tag; each process runs every driver in turn
 * (op_drivers.h), so 4 drivers run at once. This process meanwhile cuts the
 * connections (CLIENT KILL of the data connections, of the tracking ones) or
 * flushes everything, tags' keys included, every 100 ms. The verdict: a call
 * that starts after the invalidation of generation g of one of its tags
 * returned is never served a value of a generation below g from the cache
 * (0 such reads), with the near cache off and on, and every process ends
 * (a call never hangs). With the policy's stale windows set, such a value
 * may be served as XF_SOURCE_STALE (counted and printed), never as fresh. A value the
 * client's share serves while Redis cannot be used (XF_SOURCE_LOCAL, fail open) is counted
 * apart and printed, not judged: the process cannot know of the invalidation then. No
 * timing in the verdict: the run's length only bounds how much it sees. Real redis-server.
 */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "near_env.h"
#include "op_drivers.h"

enum {
  PROCS = 4,
  KEYS = 8,
  TAGS = 4,
  PHASE_MS = 500,  /* per driver: 5 drivers, 2.5 s a process */
  FAULT_MS = 100,  /* between two faults */
  WRITE_EVERY = 4, /* one writer step per 4 reads */
  /* How long the children may take past their run: a call cut by a fault
   * waits its command timeout (1 s) at most, a driver's close a few ms;
   * 10 s leaves a busy machine (2 cores, 8 builds) ample room, and bounds a
   * run at 2.5 + 10 s (Criterion's timeout: 20 s). An idle run takes 3 s. */
  EXIT_MS = 10000,
};

typedef struct stale_log {
  long gen;        /* the data's generation, what loaders read */
  long done[TAGS]; /* the highest generation whose invalidation of tag t returned */
  int stop;
  long calls, cached, near, wrong, errors, invalidations, loads;
  long local_old;  /* XF_SOURCE_LOCAL (Redis unusable) of a value older than the floor */
  long stale_old;  /* XF_SOURCE_STALE of a value older than the floor (stale rules on) */
  int stale_rules; /* the policy's stale windows set: an invalidated value may be
                      served as XF_SOURCE_STALE, never as XF_SOURCE_CACHE */
  long driver_calls[XFT_NDRIVERS];
  char first_wrong[160];
  /* Held by a process opening or closing a driver and by the faults: an open
   * connects, and fails (XF_ECONNECT) when a fault cuts its connection's
   * setup, as documented; the faults are for what runs after. */
  pthread_mutex_t opening;
  int stage[PROCS]; /* where each process is: 10 * driver + 1 open, 2 run, 3 close; 99 done
                     */
} stale_log;

static stale_log *run;

static const char *tag_name(int t) {
  static const char *const names[TAGS] = {"st:a", "st:b", "st:c", "st:d"};
  return names[t];
}

/* Key k carries tags k % 4 and (k + 1) % 4. */
static void tags_of(int k, int *t) { t[0] = k % TAGS, t[1] = (k + 1) % TAGS; }

static void raise_done(int t, long g) {
  long cur = __atomic_load_n(&run->done[t], __ATOMIC_ACQUIRE);
  while (cur < g && !__atomic_compare_exchange_n(&run->done[t], &cur, g, 0,
                                                 __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
    ;
}

/* The loader's value: the generation as the load reads it (after its call
 * read the tags' versions). */
typedef struct load_buf {
  char text[32];
} load_buf;

static void read_generation(xft_drv *d, void *arg) {
  (void)d;
  snprintf(((load_buf *)arg)->text, sizeof((load_buf *)arg)->text, "%ld",
           __atomic_load_n(&run->gen, __ATOMIC_ACQUIRE));
  __atomic_add_fetch(&run->loads, 1, __ATOMIC_RELAXED);
}

static void writer_step(xft_drv *d, unsigned *seed) {
  int t = (int)(rand_r(seed) % TAGS);
  long g = __atomic_add_fetch(&run->gen, 1, __ATOMIC_ACQ_REL);
  const char *tags[] = {tag_name(t)};
  if (xft_drv_invalidate_tags(d, tags, 1) == XF_OK) {
    raise_done(t, g);
    __atomic_add_fetch(&run->invalidations, 1, __ATOMIC_RELAXED);
  } else
    __atomic_add_fetch(&run->errors, 1, __ATOMIC_RELAXED);
}

static void reader_step(xft_drv *d, int driver, unsigned *seed) {
  int k = (int)(rand_r(seed) % KEYS), t[2];
  tags_of(k, t);
  char key[32];
  snprintf(key, sizeof key, "st:key:%d", k);
  const char *tags[] = {tag_name(t[0]), tag_name(t[1])};
  xf_policy p = XF_POLICY_INIT;
  p.tags = tags, p.ntags = 2;
  if (run->stale_rules)
    p.stale_ms = p.stale_if_error_ms = 60000;
  long f0 = __atomic_load_n(&run->done[t[0]], __ATOMIC_ACQUIRE),
       f1 = __atomic_load_n(&run->done[t[1]], __ATOMIC_ACQUIRE);
  long floor = f0 > f1 ? f0 : f1;
  load_buf buf = {"-1"};
  xft_op_loader l = {.value = buf.text, .during = read_generation, .arg = &buf};
  xf_value v;
  int rc = xft_drv_get_or_compute(d, key, &p, &l, &v);
  __atomic_add_fetch(&run->calls, 1, __ATOMIC_RELAXED);
  __atomic_add_fetch(&run->driver_calls[driver], 1, __ATOMIC_RELAXED);
  if (rc != XF_OK) {
    __atomic_add_fetch(&run->errors, 1, __ATOMIC_RELAXED);
    return;
  }
  if (v.source == XF_SOURCE_CACHE || v.source == XF_SOURCE_STALE)
    __atomic_add_fetch(&run->cached, 1, __ATOMIC_RELAXED);
  if (v.source == XF_SOURCE_LOCAL && atol(v.data) < floor)
    __atomic_add_fetch(&run->local_old, 1, __ATOMIC_RELAXED);
  else if (run->stale_rules && v.source == XF_SOURCE_STALE && atol(v.data) < floor)
    __atomic_add_fetch(&run->stale_old, 1, __ATOMIC_RELAXED);
  else if (v.source != XF_SOURCE_UNCACHED && atol(v.data) < floor &&
           __atomic_add_fetch(&run->wrong, 1, __ATOMIC_ACQ_REL) == 1)
    snprintf(run->first_wrong, sizeof run->first_wrong,
             "%s: %s served %s (source %d), invalidated at %ld", xft_driver_names[driver],
             key, v.data, v.source, floor);
  xf_value_free(&v);
}

/* One process: every driver in turn, from its own first one. */
static void child(int i, int port, int near) {
  xf_share *share = NULL;
  xf_share_options so = {.near_cache_bytes = NEAR_BYTES};
  if (near && xf_share_open(&share, &so) != XF_OK)
    _exit(3);
  unsigned seed = 31u + (unsigned)i;
  for (int phase = 0;
       phase < XFT_NDRIVERS && !__atomic_load_n(&run->stop, __ATOMIC_ACQUIRE); phase++) {
    int driver = (i + phase) % XFT_NDRIVERS;
    xf_options o = XF_OPTIONS_INIT;
    o.port = port;
    o.share = share;
    o.seed = seed;
    __atomic_store_n(&run->stage[i], 10 * driver + 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&run->opening);
    xft_drv *d = xft_drv_open(driver, &o);
    pthread_mutex_unlock(&run->opening);
    __atomic_store_n(&run->stage[i], 10 * driver + 2, __ATOMIC_RELEASE);
    int64_t until = xft_now_ms() + PHASE_MS;
    for (int n = 0; xft_now_ms() < until && !__atomic_load_n(&run->stop, __ATOMIC_ACQUIRE);
         n++) {
      if (n % WRITE_EVERY == WRITE_EVERY - 1)
        writer_step(d, &seed);
      else
        reader_step(d, driver, &seed);
    }
    xf_stats st;
    xft_drv_stats(d, &st);
    __atomic_add_fetch(&run->near, (long)st.near_hits, __ATOMIC_RELAXED);
    __atomic_store_n(&run->stage[i], 10 * driver + 3, __ATOMIC_RELEASE);
    xft_drv_close(d);
  }
  __atomic_store_n(&run->stage[i], 99, __ATOMIC_RELEASE);
  xf_share_close(share);
  _exit(0);
}

/* The near cache off (0), on (1), on with the policy's stale windows set (2). */
ParameterizedTestParameters(tags_stale, processes) {
  static int near[] = {0, 1, 2};
  return cr_make_param_array(int, near, 3);
}

ParameterizedTest(int *near, tags_stale, processes, .timeout = 20) {
  XFT_SKIP_THREADED_FORK(); /* each child runs every driver, threads included */
  run = mmap(NULL, sizeof *run, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(run, MAP_FAILED);
  memset(run, 0, sizeof *run);
  run->stale_rules = *near == 2;
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  cr_assert_eq(pthread_mutex_init(&run->opening, &ma), 0);
  pthread_mutexattr_destroy(&ma);
  xft_server srv;
  cr_assert_eq(xft_server_start(&srv, NULL), 0);
  pid_t pids[PROCS];
  for (int i = 0; i < PROCS; i++) {
    pids[i] = fork();
    cr_assert_neq(pids[i], -1);
    if (pids[i] == 0)
      child(i, srv.port, *near);
  }
  /* The faults, in turn, until the children are done with every driver. */
  static const char *const faults[] = {"CLIENT KILL TYPE normal SKIPME yes",
                                       "CLIENT KILL TYPE pubsub", "FLUSHALL"};
  redisContext *r = xft_redis_port(srv.port);
  int64_t end = xft_now_ms() + (int64_t)PHASE_MS * XFT_NDRIVERS, deadline = end + EXIT_MS;
  int left = PROCS, failed = 0, nfaults = 0;
  while (left > 0 && xft_now_ms() < deadline) {
    if (xft_now_ms() < end) {
      pthread_mutex_lock(&run->opening);
      freeReplyObject(xft_cmd(r, faults[nfaults++ % 3]));
      pthread_mutex_unlock(&run->opening);
    } else
      __atomic_store_n(&run->stop, 1, __ATOMIC_RELEASE);
    int64_t next = xft_now_ms() + FAULT_MS;
    while (left > 0 && xft_now_ms() < next) {
      for (int i = 0; i < PROCS; i++) {
        int status;
        if (pids[i] > 0 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
          left--, pids[i] = 0;
          failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        }
      }
      xft_sleep_ms(5);
    }
  }
  redisFree(r);
  for (int i = 0; i < PROCS; i++)
    if (pids[i] > 0)
      fprintf(stderr, "tags_stale: process %d hung at stage %d (%s %s)\n", i,
              __atomic_load_n(&run->stage[i], __ATOMIC_ACQUIRE),
              xft_driver_names[__atomic_load_n(&run->stage[i], __ATOMIC_ACQUIRE) / 10 %
                               XFT_NDRIVERS],
              (const char *[]){
                  "", "opening", "running",
                  "closing"}[__atomic_load_n(&run->stage[i], __ATOMIC_ACQUIRE) % 10 % 4]);
  for (int i = 0; i < PROCS; i++)
    if (pids[i] > 0)
      kill(pids[i], SIGKILL), waitpid(pids[i], NULL, 0);
  xft_server_stop(&srv);
  fprintf(stderr,
          "tags_stale (near %s): %ld calls (%ld from the cache, %ld near hits), %ld loads, "
          "%ld invalidations, %d faults, %ld errors, %ld wrong, %ld older local values, "
          "%ld older stale values\n",
          *near ? (*near == 2 ? "on, stale rules" : "on") : "off", run->calls, run->cached,
          run->near, run->loads, run->invalidations, nfaults, run->errors, run->wrong,
          run->local_old, run->stale_old);
  cr_assert_eq(left, 0, "%d processes still running %d ms after their run", left, EXIT_MS);
  cr_expect_eq(failed, 0, "%d processes failed", failed);
  cr_expect_eq(run->wrong, 0,
               "%ld of %ld calls served a value loaded before an invalidation that had "
               "returned; the first: %s",
               run->wrong, run->calls, run->first_wrong);
  /* What the run must have seen to say anything (a busy machine's run does
   * a few hundred calls at least, an idle one tens of thousands). */
  for (int d = 0; d < XFT_NDRIVERS; d++)
    cr_expect_gt(run->driver_calls[d], 10, "%s: %ld calls", xft_driver_names[d],
                 run->driver_calls[d]);
  cr_expect_gt(run->invalidations, 10, "%ld invalidations", run->invalidations);
  cr_expect_gt(run->cached, 10, "%ld calls served from the cache", run->cached);
  if (*near)
    cr_expect_gt(run->near, 0, "no near hit");
  munmap(run, sizeof *run);
}
