/* The drivers' clock and sleeps (now.h). */
#include "now.h"

static int64_t clock_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t xf__test_clock_skew_ms;

static int64_t skew_us(void) {
  return __atomic_load_n(&xf__test_clock_skew_ms, __ATOMIC_RELAXED) * 1000;
}

int64_t xf__now_us(void) { return clock_us() + skew_us(); }
int64_t xf__now_ms(void) { return (clock_us() + skew_us()) / 1000; }

void xf__sleep_until_ms(int64_t wake_ms) {
  int64_t ms = wake_ms - xf__now_ms();
  if (ms <= 0)
    return;
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
  nanosleep(&ts, NULL);
}

struct timespec xf__deadline_in(int ms) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if (ts.tv_nsec >= 1000000000L) {
    ts.tv_sec++;
    ts.tv_nsec -= 1000000000L;
  }
  return ts;
}

void xf__cond_init_monotonic(pthread_cond_t *cv) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(cv, &attr);
  pthread_condattr_destroy(&attr);
}
