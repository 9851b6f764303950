/* The batch driver: n calls stepped together, so that their commands travel
 * in one pipelined round trip per step (reads, then the misses' leases, then
 * the winners' writes) instead of one round trip each. The first round reads
 * every key with one read_many call (per slot in Redis Cluster): a hit then
 * costs the server one script run per batch, not one per key (see
 * batch_read.c). */
#include <stdlib.h>
#include <string.h>

#include "batch.h"

static int batch_open(batch *b, xf_client *c, size_t n) {
  memset(b, 0, sizeof *b);
  b->c = c;
  b->n = n;
  b->flows = malloc(n * sizeof *b->flows);
  b->steps = malloc(n * sizeof *b->steps);
  b->cmds = malloc(n * sizeof *b->cmds);
  b->who = malloc(n * sizeof *b->who);
  b->rcs = malloc(n * sizeof *b->rcs);
  b->replies = malloc(n * sizeof *b->replies);
  b->keys = malloc(n * sizeof *b->keys);
  b->lens = malloc(n * sizeof *b->lens);
  b->sinks = malloc(n * sizeof *b->sinks);
  b->parts = malloc(n * sizeof *b->parts);
  return b->flows && b->steps && b->cmds && b->who && b->rcs && b->replies && b->keys &&
                 b->lens && b->sinks && b->parts
             ? XF_OK
             : XF_ENOMEM;
}

static void batch_close(batch *b) {
  free(b->flows);
  free(b->steps);
  free(b->cmds);
  free(b->who);
  free(b->rcs);
  free(b->replies);
  free(b->keys);
  free(b->lens);
  free(b->sinks);
  free(b->parts);
  free(b->groups);
  free(b->many);
}

/* Every flow waiting to send, in one pipeline. Returns how many were sent. */
static size_t send_all(batch *b) {
  size_t k = 0;
  for (size_t i = 0; i < b->n; i++)
    if (b->steps[i] == XF_STEP_SEND) {
      b->cmds[k] = &b->flows[i].cmd;
      b->who[k++] = i;
    }
  if (k == 0)
    return 0;
  xf__command_many(b->c, k, b->cmds, b->rcs, b->replies);
  int64_t now_ms = xf__now_ms();
  for (size_t j = 0; j < k; j++)
    b->steps[b->who[j]] =
        xf__flow_reply(&b->flows[b->who[j]], b->rcs[j], b->replies[j], now_ms);
  return k;
}

/* Every flow waiting for its loader: one after the other with the per-key
 * loader, or all in one call of the batch loader. */
static size_t load_all(batch *b, const batch_loaders *l) {
  size_t k = 0;
  for (size_t i = 0; i < b->n; i++) {
    if (b->steps[i] != XF_STEP_LOAD)
      continue;
    if (l->one)
      b->steps[i] = xf__flow_run_loader(&b->flows[i], l->one, l->ud);
    else
      b->who[k] = i;
    k++;
  }
  if (k == 0 || l->one)
    return k;
  for (size_t j = 0; j < k; j++) {
    xf__flow *f = &b->flows[b->who[j]];
    b->keys[j] = f->user_key;
    b->lens[j] = f->user_keylen;
    b->sinks[j] = &f->sink;
  }
  int64_t t0 = xf__now_us();
  int lrc = l->many(l->ud, k, b->keys, b->lens, b->sinks);
  int64_t t1 = xf__now_us();
  for (size_t j = 0; j < k; j++)
    b->steps[b->who[j]] = xf__flow_loaded(&b->flows[b->who[j]], lrc, t1 - t0, t1 / 1000);
  return k;
}

/* Sleeps until the earliest waiter is due and wakes every flow due by then. */
static size_t wake_due(batch *b) {
  int64_t first = INT64_MAX;
  for (size_t i = 0; i < b->n; i++)
    if (b->steps[i] == XF_STEP_WAIT && b->flows[i].wake_ms < first)
      first = b->flows[i].wake_ms;
  if (first == INT64_MAX)
    return 0;
  xf__sleep_until_ms(first);
  int64_t now_ms = xf__now_ms();
  int stop = xf__flow_interrupted(&b->flows[0]); /* ends every wait */
  size_t k = 0;
  for (size_t i = 0; i < b->n; i++)
    if (b->steps[i] == XF_STEP_WAIT && (stop || b->flows[i].wake_ms <= now_ms)) {
      b->steps[i] =
          stop ? xf__flow_cancel(&b->flows[i]) : xf__flow_woke(&b->flows[i], now_ms);
      k++;
    }
  return k;
}

static int check_many(xf_client *c, size_t n, const char *const *keys,
                      const size_t *keylens, int has_loader, xf_value *values, int *rcs) {
  if (n > 0 && (!keys || !keylens))
    return xf__fail(c, XF_EINVAL, "keys or keylens is NULL");
  if (n > 0 && (!values || !rcs))
    return xf__fail(c, XF_EINVAL, "values or rcs is NULL");
  if (!has_loader)
    return xf__fail(c, XF_EINVAL, "loader is NULL");
  return XF_OK;
}

static int run_many(xf_client *c, size_t n, const char *const *keys, const size_t *keylens,
                    const xf_policy *p, const batch_loaders *l, xf_value *values,
                    int *rcs) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  c->loader_rc = 0;
  int rc = check_many(c, n, keys, keylens, l->one || l->many, values, rcs);
  if (rc != XF_OK || n == 0)
    return rc;
  batch b;
  if (batch_open(&b, c, n) != XF_OK) {
    batch_close(&b);
    return xf__fail(c, XF_ENOMEM, "out of memory for a batch of %zu keys", n);
  }
  int64_t now_ms = xf__now_ms();
  for (size_t i = 0; i < n; i++)
    b.steps[i] = xf__flow_start(&b.flows[i], c, keys[i], keylens[i], p, &values[i], now_ms);
  xf__batch_read_all(&b);
  while (send_all(&b) || load_all(&b, l) || wake_due(&b))
    ;
  for (size_t i = 0; i < n; i++)
    rcs[i] = b.flows[i].rc;
  batch_close(&b);
  return XF_OK;
}

int xf_get_or_compute_many(xf_client *c, size_t n, const char *const *keys,
                           const size_t *keylens, const xf_policy *p, xf_loader_fn loader,
                           void *ud, xf_value *values, int *rcs) {
  batch_loaders l = {.one = loader, .ud = ud};
  return run_many(c, n, keys, keylens, p, &l, values, rcs);
}

int xf_get_or_compute_many_batch(xf_client *c, size_t n, const char *const *keys,
                                 const size_t *keylens, const xf_policy *p,
                                 xf_batch_loader_fn loader, void *ud, xf_value *values,
                                 int *rcs) {
  batch_loaders l = {.many = loader, .ud = ud};
  return run_many(c, n, keys, keylens, p, &l, values, rcs);
}
