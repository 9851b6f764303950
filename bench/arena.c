/* The shared arena (MAP_SHARED, so forked workers write where the parent
 * reads), the clock and the bench's own PCG32. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "bench.h"

int64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void sleep_us(int64_t us) {
  if (us <= 0)
    return;
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

static size_t arena_bytes(size_t cap_samples, size_t cap_loads) {
  return sizeof(arena) + 64 + cap_samples * sizeof(sample) + cap_loads * sizeof(load_event);
}

arena *arena_create(size_t cap_samples, size_t cap_loads) {
  size_t n = arena_bytes(cap_samples, cap_loads);
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    return NULL;
  arena *a = p;
  a->cap_samples = cap_samples;
  a->cap_loads = cap_loads;
  a->samples = (sample *)((char *)p + sizeof(arena) + 64);
  a->loads = (load_event *)(a->samples + cap_samples);
  arena_reset(a);
  return a;
}

void arena_reset(arena *a) {
  a->stop = a->arrived = a->go = 0;
  a->nsamples = a->nloads = a->dropped = a->not_opened = 0;
  memset(&a->errs, 0, sizeof a->errs);
  a->inflight = a->peak_inflight = a->handshakes = 0;
  a->epoch_us = now_us();
}

void arena_destroy(arena *a) {
  if (a)
    munmap(a, arena_bytes(a->cap_samples, a->cap_loads));
}

void arena_add_sample(arena *a, int64_t t_us, int64_t lat_us, unsigned flags) {
  uint64_t i = __atomic_fetch_add(&a->nsamples, 1, __ATOMIC_RELAXED);
  if (flags & RQ_ERROR)
    __atomic_fetch_add(&a->errs.n, 1, __ATOMIC_RELAXED);
  if (i >= a->cap_samples) {
    __atomic_fetch_add(&a->dropped, 1, __ATOMIC_RELAXED);
    return;
  }
  sample *s = &a->samples[i];
  s->t_us = t_us;
  s->lat_us = lat_us < 0 ? 0 : lat_us > UINT32_MAX ? UINT32_MAX : (uint32_t)lat_us;
  s->flags = (uint16_t)flags;
}

long arena_load_begin(arena *a, uint32_t key, int32_t remaining_ms) {
  uint64_t in = __atomic_add_fetch(&a->inflight, 1, __ATOMIC_RELAXED);
  uint64_t peak = __atomic_load_n(&a->peak_inflight, __ATOMIC_RELAXED);
  while (in > peak && !__atomic_compare_exchange_n(&a->peak_inflight, &peak, in, 0,
                                                   __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    ;
  uint64_t i = __atomic_fetch_add(&a->nloads, 1, __ATOMIC_RELAXED);
  if (i >= a->cap_loads)
    return -1;
  load_event *e = &a->loads[i];
  e->start_us = now_us() - a->epoch_us;
  e->end_us = 0;
  e->key = key;
  e->remaining_ms = remaining_ms;
  return (long)i;
}

void arena_load_end(arena *a, long slot) {
  __atomic_sub_fetch(&a->inflight, 1, __ATOMIC_RELAXED);
  if (slot >= 0)
    a->loads[slot].end_us = now_us() - a->epoch_us;
}
