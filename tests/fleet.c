/* A fleet on one hot key: see fleet.h. */
#include "fleet.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "fixture.h"

#define MAX_MEMBERS 16
#define MAX_LOADS 512

typedef struct fleet {
  pthread_mutex_t mu;
  int64_t start[MAX_LOADS], end[MAX_LOADS]; /* in the order the loads ended */
  int nloads;
  int64_t until_ms;
  const char *key;
} fleet;

typedef struct member {
  fleet *f;
  xf_client *c;
  uint64_t hits;
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
  return xf_sink_set(sink, "v", 1);
}

static void *run_member(void *arg) {
  member *m = arg;
  xf_policy p = XF_POLICY_INIT;
  p.ttl_ms = 600;
  p.stale_ms = 1000; /* waiters serve stale: an episode is the refresh alone */
  while (real_ms() < m->f->until_ms) {
    xf_value v;
    int rc = xf_get_or_compute(m->c, m->f->key, strlen(m->f->key), &p, load, m, &v);
    cr_assert_eq(rc, XF_OK, "%s", xf_errmsg(m->c));
    cr_assert_str_eq(v.data, "v");
    xf_value_free(&v);
  }
  xf_stats st;
  xf_client_stats(m->c, &st);
  m->hits = st.hits;
  return NULL;
}

void xft_fleet_run(const char *key, int members, int duration_ms, int min_loads,
                   xft_fleet_open open, void *ud, const char *(*label)(int i)) {
  cr_assert(members > 0 && members <= MAX_MEMBERS);
  fleet f = {.mu = PTHREAD_MUTEX_INITIALIZER, .key = key};
  pthread_t t[MAX_MEMBERS];
  member m[MAX_MEMBERS];
  for (int i = 0; i < members; i++)
    m[i] = (member){.f = &f, .c = open(i, ud)};
  f.until_ms = real_ms() + duration_ms;
  for (int i = 0; i < members; i++)
    pthread_create(&t[i], NULL, run_member, &m[i]);
  for (int i = 0; i < members; i++) {
    pthread_join(t[i], NULL);
    xf_client_close(m[i].c);
  }
  cr_assert(f.nloads >= min_loads && f.nloads < MAX_LOADS, "%d loads", f.nloads);
  /* One load per episode: no load starts before the one before it ended. */
  for (int i = 1; i < f.nloads; i++)
    cr_expect(f.start[i] >= f.end[i - 1], "loads %d and %d overlap", i - 1, i);
  /* XFetch refreshes ~delta * ln(rate * delta) (~160 ms here) before expiry. */
  cr_expect(f.nloads <= duration_ms / 300 + 2, "%d loads in %d ms of a 600 ms ttl",
            f.nloads, duration_ms);
  for (int i = 0; i < members; i++)
    cr_expect_gt(m[i].hits, 0, "member %d (%s) hit", i, label(i));
}
