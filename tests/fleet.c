/* A fleet on one hot key: see fleet.h. */
#include "fleet.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "fixture.h"
#include "thread_fail.h"

#define MAX_MEMBERS 16
#define MAX_LOADS 512

typedef struct fleet {
  pthread_mutex_t mu;
  int64_t start[MAX_LOADS], end[MAX_LOADS]; /* in the order the loads ended */
  int nloads;                               /* under mu */
  int min_loads;      /* the members run on past until_ms until there are as many */
  int64_t until_ms;   /* at least until then */
  int64_t give_up_ms; /* at most until then */
  const char *key;
} fleet;

/* The value the loads write, and each member's policy.compress_min_bytes
 * (xft_fleet_value; default "v", none). */
static const char *value_data = "v";
static size_t value_len = 1;
static size_t (*value_compress)(int i);

void xft_fleet_value(const char *data, size_t len, size_t (*compress)(int i)) {
  value_data = data;
  value_len = len;
  value_compress = compress;
}

typedef struct member {
  int i;
  fleet *f;
  xf_client *c;
  uint64_t hits;
  xft_fail fail; /* what went wrong on its thread: it stops there */
} member;

static int64_t real_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int load(void *ud, const char *key, size_t keylen, xf_sink *sink) {
  (void)key;
  (void)keylen;
  fleet *f = ((member *)ud)->f;
  int64_t t0 = real_ms();
  xft_sleep_ms(20);
  pthread_mutex_lock(&f->mu);
  int i = f->nloads < MAX_LOADS ? f->nloads++ : MAX_LOADS - 1;
  f->start[i] = t0;
  f->end[i] = real_ms();
  pthread_mutex_unlock(&f->mu);
  return xf_sink_set(sink, value_data, value_len);
}

/* Whether the run goes on: until until_ms and min_loads loads, whichever is
 * later (a busy machine slows the calls and with them the early refreshes),
 * but not past give_up_ms. */
static int running(fleet *f) {
  int64_t now = real_ms();
  if (now >= f->give_up_ms)
    return 0;
  pthread_mutex_lock(&f->mu);
  int enough = f->nloads >= f->min_loads;
  pthread_mutex_unlock(&f->mu);
  return now < f->until_ms || !enough;
}

static void *run_member(void *arg) {
  member *m = arg;
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 600;
  p.stale_ms = 1000; /* waiters serve stale: an episode is the refresh alone */
  p.compress_min_bytes = value_compress ? value_compress(m->i) : 0;
  while (running(m->f)) {
    xf_value v;
    int rc = xf_get_or_compute(m->c, m->f->key, strlen(m->f->key), &p, load, m, &v);
    if (rc != XF_OK) {
      xft_fail_record(&m->fail, "xf_get_or_compute returned %d (%s): %s", rc,
                      xf_strerror(rc), xf_errmsg(m->c));
      break;
    }
    int right = v.len == value_len && memcmp(v.data, value_data, value_len) == 0;
    if (!right)
      xft_fail_record(&m->fail, "a value of %zu bytes", v.len);
    xf_value_free(&v);
    if (!right)
      break;
  }
  xf_stats st;
  xf_client_stats(m->c, &st);
  m->hits = st.hits;
  return NULL;
}

void xft_fleet_run(const char *key, int members, int duration_ms, int min_loads,
                   xft_fleet_open open, void *ud, const char *(*label)(int i)) {
  cr_assert(members > 0 && members <= MAX_MEMBERS);
  fleet f = {.mu = PTHREAD_MUTEX_INITIALIZER, .key = key, .min_loads = min_loads};
  pthread_t t[MAX_MEMBERS];
  member m[MAX_MEMBERS];
  for (int i = 0; i < members; i++)
    m[i] = (member){.i = i, .f = &f, .c = open(i, ud)};
  int64_t start_ms = real_ms();
  f.until_ms = start_ms + duration_ms;
  f.give_up_ms = start_ms + 10 * duration_ms;
  for (int i = 0; i < members; i++)
    pthread_create(&t[i], NULL, run_member, &m[i]);
  for (int i = 0; i < members; i++) {
    pthread_join(t[i], NULL);
    xf_client_close(m[i].c);
  }
  for (int i = 0; i < members; i++)
    cr_assert_eq(xft_fail_count(&m[i].fail), 0, "member %d (%s): %s", i, label(i),
                 xft_fail_msg(&m[i].fail));
  int64_t ran_ms = real_ms() - start_ms;
  cr_assert(f.nloads >= min_loads && f.nloads < MAX_LOADS, "%d loads", f.nloads);
  /* One load per episode: no load starts before the one before it ended. */
  for (int i = 1; i < f.nloads; i++)
    cr_expect(f.start[i] >= f.end[i - 1], "loads %d and %d overlap", i - 1, i);
  /* XFetch refreshes ~delta * ln(rate * delta) (~160 ms here) before expiry. */
  cr_expect(f.nloads <= ran_ms / 300 + 2, "%d loads in %lld ms of a 600 ms ttl", f.nloads,
            (long long)ran_ms);
  for (int i = 0; i < members; i++)
    cr_expect_gt(m[i].hits, 0, "member %d (%s) hit", i, label(i));
}
