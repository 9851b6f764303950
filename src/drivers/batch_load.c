/* The batch loader's call: every key a batch must load, in one call of the
 * user's batch loader. While Redis cannot be used (fail open), the keys join
 * the client's share as the per-key loads do (blocking.c): a fresh fallback
 * value is served, a key another thread is loading waits for that load's
 * outcome, and the keys this call leads are loaded in its one loader call,
 * their outcomes then handed to the share for the threads waiting on them.
 * Without that, n threads asking for the same keys ran n loads of each. */
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "client_io.h"
#include "flow_steps.h"
#include "nesting.h"

/* How a key of the call gets its value. */
enum { LOADED, LEADS, SERVED, COPIED };

static int key_order(const void *pa, const void *pb) {
  const xf__key *a = &(*(xf__flow *const *)pa)->key, *b = &(*(xf__flow *const *)pb)->key;
  int c = memcmp(a->data, b->data, a->len < b->len ? a->len : b->len);
  return c ? c : (a->len > b->len) - (a->len < b->len);
}

/* Puts the failing-open flows of who[0..k) in b->order, by key, and joins
 * each key's flight. In key order, because a call holds the flights it leads
 * until its loader returns: two calls that each lead a key the other waits
 * for would wait for each other until wait_ms ran out; taking keys in one
 * order, whoever holds a key only ever waits for a later one, so the waits
 * cannot go round. A key twice in the call joins once; its copies take the
 * first's outcome (copy_outcomes). Returns how many flows b->order holds (0:
 * no memory for it, every flow loads as without a share). */
static size_t join(batch *b, size_t k) {
  if (!b->order && !(b->order = malloc(b->n * sizeof *b->order)))
    return 0;
  if (!b->roles && !(b->roles = malloc(b->n * sizeof *b->roles)))
    return 0;
  size_t m = 0;
  for (size_t j = 0; j < k; j++) {
    b->roles[b->who[j]] = LOADED;
    if (b->flows[b->who[j]].load == XF_LOAD_UNCACHED)
      b->order[m++] = &b->flows[b->who[j]];
  }
  qsort(b->order, m, sizeof *b->order, key_order);
  /* Before any flow is served: a served flow is done, its key freed. */
  for (size_t j = 1; j < m; j++)
    if (key_order(&b->order[j - 1], &b->order[j]) == 0)
      b->roles[b->order[j] - b->flows] = COPIED;
  for (size_t j = 0; j < m; j++) {
    xf__flow *f = b->order[j];
    size_t i = (size_t)(f - b->flows);
    if (b->roles[i] == COPIED)
      continue;
    char *data = NULL;
    size_t len = 0;
    int rc = XF_OK;
    switch (xf__flow_share_begin(f, b->c, &data, &len, &rc)) {
    case XF_SHARE_SERVED:
      b->roles[i] = SERVED;
      b->steps[i] = xf__flow_local(f, rc, data, len);
      break;
    case XF_SHARE_LEAD:
      b->roles[i] = LEADS;
      break;
    default: /* the wait ran out: loaded by this call, not shared */
      break;
    }
  }
  return m;
}

/* Each copy of a key gets what the key's first flow got. */
static void copy_outcomes(batch *b, size_t m) {
  const xf__flow *first = NULL;
  for (size_t j = 0; j < m; j++) {
    xf__flow *f = b->order[j];
    size_t i = (size_t)(f - b->flows);
    if (b->roles[i] != COPIED) {
      first = f;
      continue;
    }
    int rc = first->rc;
    size_t len = rc == XF_OK ? first->out->len : 0;
    char *data = NULL;
    if (rc == XF_OK && !(data = malloc(len + 1)))
      rc = xf__fail(b->c, XF_ENOMEM, "out of memory for a %zu-byte value", len);
    else if (rc == XF_OK)
      memcpy(data, first->out->data, len), data[len] = '\0';
    b->steps[i] = xf__flow_local(f, rc, data, len);
  }
}

void xf__batch_load_many(batch *b, const batch_loaders *l, size_t k) {
  size_t m = b->c->share ? join(b, k) : 0;
  size_t nl = 0; /* who[0..nl): the flows this call loads */
  for (size_t j = 0; j < k; j++) {
    size_t i = b->who[j];
    if (m && (b->steps[i] != XF_STEP_LOAD || b->roles[i] == COPIED))
      continue;
    xf__flow *f = &b->flows[i];
    xf__flow_settle(f); /* its loader runs: a fail-open's result and load_start */
    b->who[nl] = i;
    b->keys[nl] = f->user_key;
    b->lens[nl] = f->user_keylen;
    b->sinks[nl++] = &f->sink;
  }
  for (size_t j = 0; j < nl; j++) /* a nested call for one of them fails at once */
    xf__nest_push(&b->flows[b->who[j]].nest, b->c, b->flows[b->who[j]].key.data,
                  b->flows[b->who[j]].key.len);
  int lrc = 0;
  int64_t t0 = xf__now_us();
  if (nl)
    lrc = l->many(l->ud, nl, b->keys, b->lens, b->sinks);
  int64_t t1 = xf__now_us();
  for (size_t j = nl; j-- > 0;)
    xf__nest_pop(&b->flows[b->who[j]].nest);
  for (size_t j = 0; j < nl && m; j++)
    if (b->roles[b->who[j]] == LEADS)
      xf__flow_share_end(&b->flows[b->who[j]], b->c, lrc, t1 / 1000);
  for (size_t j = 0; j < nl; j++)
    b->steps[b->who[j]] = xf__flow_loaded(&b->flows[b->who[j]], lrc, t1 - t0, t1 / 1000);
  if (m)
    copy_outcomes(b, m);
}
