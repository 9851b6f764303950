/* The event-loop driver's waiting calls: a binary min-heap on wake_ms, so the
 * handle's one loop timer is always armed for the earliest. */
#include <stdint.h>
#include <stdlib.h>

#include "async.h"

static void heap_set(xf_async *ac, size_t i, xf__acall *k) {
  ac->heap[i] = k;
  k->heap_at = i;
}

/* Where k goes at or above slot i: the slots on the way move down. */
static size_t sift_up(xf_async *ac, size_t i, const xf__acall *k) {
  while (i > 0 && ac->heap[(i - 1) / 2]->wake_ms > k->wake_ms) {
    heap_set(ac, i, ac->heap[(i - 1) / 2]);
    i = (i - 1) / 2;
  }
  return i;
}

void xf__aheap_push(xf_async *ac, xf__acall *k) {
  /* room was made when the call was accepted */
  heap_set(ac, sift_up(ac, ac->heap_len++, k), k);
}

/* Where last goes at or below slot i of the first n: the slots on the way
 * move up. */
static size_t sift_down(xf_async *ac, size_t i, size_t n, const xf__acall *last) {
  for (;;) {
    size_t child = 2 * i + 1;
    if (child >= n)
      break;
    if (child + 1 < n && ac->heap[child + 1]->wake_ms < ac->heap[child]->wake_ms)
      child++;
    if (ac->heap[child]->wake_ms >= last->wake_ms)
      break;
    heap_set(ac, i, ac->heap[child]);
    i = child;
  }
  return i;
}

xf__acall *xf__aheap_pop(xf_async *ac) {
  xf__acall *top = ac->heap[0], *last = ac->heap[--ac->heap_len];
  if (ac->heap_len > 0)
    heap_set(ac, sift_down(ac, 0, ac->heap_len, last), last);
  top->heap_at = SIZE_MAX;
  return top;
}

void xf__aheap_remove(xf_async *ac, xf__acall *k) {
  size_t i = k->heap_at, n = --ac->heap_len;
  if (i == SIZE_MAX) {
    ac->heap_len++;
    return;
  }
  xf__acall *last = ac->heap[n];
  k->heap_at = SIZE_MAX;
  if (last == k)
    return;
  i = sift_up(ac, i, last);
  heap_set(ac, sift_down(ac, i, n, last), last);
}

int xf__aheap_reserve(xf_async *ac, size_t need) {
  if (need <= ac->heap_cap)
    return 0;
  size_t cap = ac->heap_cap ? ac->heap_cap * 2 : 64;
  xf__acall **heap = realloc(ac->heap, cap * sizeof *heap);
  if (!heap)
    return -1;
  ac->heap = heap;
  ac->heap_cap = cap;
  return 0;
}
