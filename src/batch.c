/* The batch driver: n calls stepped together, so that their commands travel
 * in one pipelined round trip per step (reads, then the misses' leases, then
 * the winners' writes) instead of one round trip each. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "flow.h"

typedef struct batch {
  xf_client *c;
  size_t n;
  xf__flow *flows;
  xf__step *steps;
  const xf__cmd **cmds; /* the pending SENDs, in the order sent */
  size_t *who;          /* which flow each pending SEND is */
  int *rcs;
  redisReply **replies;
} batch;

static int batch_open(batch *b, xf_client *c, size_t n) {
  b->c = c;
  b->n = n;
  b->flows = malloc(n * sizeof *b->flows);
  b->steps = malloc(n * sizeof *b->steps);
  b->cmds = malloc(n * sizeof *b->cmds);
  b->who = malloc(n * sizeof *b->who);
  b->rcs = malloc(n * sizeof *b->rcs);
  b->replies = malloc(n * sizeof *b->replies);
  return b->flows && b->steps && b->cmds && b->who && b->rcs && b->replies ? XF_OK
                                                                           : XF_ENOMEM;
}

static void batch_close(batch *b) {
  free(b->flows);
  free(b->steps);
  free(b->cmds);
  free(b->who);
  free(b->rcs);
  free(b->replies);
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

/* Every flow waiting for its loader, one after the other. */
static size_t load_all(batch *b, xf_loader_fn loader, void *ud) {
  size_t k = 0;
  for (size_t i = 0; i < b->n; i++) {
    if (b->steps[i] != XF_STEP_LOAD)
      continue;
    b->steps[i] = xf__flow_run_loader(&b->flows[i], loader, ud);
    k++;
  }
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
  int64_t ms = first - xf__now_ms();
  if (ms > 0) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
  }
  int64_t now_ms = xf__now_ms();
  size_t k = 0;
  for (size_t i = 0; i < b->n; i++)
    if (b->steps[i] == XF_STEP_WAIT && b->flows[i].wake_ms <= now_ms) {
      b->steps[i] = xf__flow_woke(&b->flows[i], now_ms);
      k++;
    }
  return k;
}

static int check_many(xf_client *c, size_t n, const char *const *keys,
                      const size_t *keylens, xf_loader_fn loader, xf_value *values,
                      int *rcs) {
  if (n > 0 && (!keys || !keylens))
    return xf__fail(c, XF_EINVAL, "keys or keylens is NULL");
  if (n > 0 && (!values || !rcs))
    return xf__fail(c, XF_EINVAL, "values or rcs is NULL");
  if (!loader)
    return xf__fail(c, XF_EINVAL, "loader is NULL");
  return XF_OK;
}

int xf_get_or_compute_many(xf_client *c, size_t n, const char *const *keys,
                           const size_t *keylens, const xf_policy *p, xf_loader_fn loader,
                           void *ud, xf_value *values, int *rcs) {
  if (!c)
    return XF_EINVAL;
  c->errstr[0] = '\0';
  c->loader_rc = 0;
  int rc = check_many(c, n, keys, keylens, loader, values, rcs);
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
  while (send_all(&b) || load_all(&b, loader, ud) || wake_due(&b))
    ;
  for (size_t i = 0; i < n; i++)
    rcs[i] = b.flows[i].rc;
  batch_close(&b);
  return XF_OK;
}
