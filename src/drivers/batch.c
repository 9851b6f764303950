/* The batch driver: n calls stepped together, so that their commands travel
 * in one pipelined round trip per step (reads, then the misses' leases, then
 * the winners' writes) instead of one round trip each. The first round reads
 * every key with one read_many call (per slot in Redis Cluster): a hit then
 * costs the server one script run per batch, not one per key (see
 * batch_read.c). */
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "client_io.h"
#include "cluster.h"
#include "lease_keeper.h"
#include "refresh.h"

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
  b->fence_of = calloc(n ? n : 1, sizeof *b->fence_of);
  b->fence_at = malloc(n * sizeof *b->fence_at);
  b->fence_ok = malloc(n * sizeof *b->fence_ok);
  b->waiting = malloc(n * sizeof *b->waiting);
  return b->flows && b->steps && b->cmds && b->who && b->rcs && b->replies && b->keys &&
                 b->lens && b->sinks && b->parts && b->fence_of && b->fence_at &&
                 b->fence_ok && b->waiting
             ? XF_OK
             : XF_ENOMEM;
}

static void batch_close(batch *b) {
  xf__batch_wake_close(b);
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
  free(b->fence_of);
  free(b->fence_at);
  free(b->fence_ok);
  free(b->waiting);
  free(b->groups);
  free(b->many);
  free(b->read_keys);
  free(b->read_lens);
  free(b->tag_at);
  free(b->order);
  free(b->roles);
}

/* How many leases may be asked for now. The per-key loader runs the keys one
 * after the other: a lease taken for every miss at once runs out for the
 * keys whose turn comes after lease_ms of loads, and another caller then
 * loads them too (and its write refuses ours). So leases go to the next keys
 * only, once the keys leased before are loaded: as many as the loads seen so
 * far say will be loaded within half a lease, and no more than have been
 * loaded (a first fast load does not lease the whole batch). Their writes and
 * the next leases share a round trip. A key not leased yet is open to another
 * caller: its lease then finds that caller's value (newer) or its lease (and
 * waits for it). The batch loader loads every leased key in one call, right
 * after the leases: no limit. */
static size_t lease_budget(const batch *b, const batch_loaders *l) {
  if (!l->one)
    return SIZE_MAX;
  for (size_t i = 0; i < b->n; i++)
    if (b->steps[i] == XF_STEP_LOAD)
      return 0;
  if (b->loaded == 0)
    return 1;
  int64_t half_lease_us = b->lease_ms < INT64_MAX / 500 ? b->lease_ms * 500 : INT64_MAX;
  uint64_t fit = (uint64_t)(half_lease_us / (b->load_us / (int64_t)b->loaded + 1));
  return fit < 1 ? 1 : fit > b->loaded ? b->loaded : (size_t)fit;
}

/* The PING sent this round (of the first `fences`) on the connection flow
 * i's write went to: a PING answers for every write whose reply came before
 * it on its connection (flow.h, xf__flow_fencing). Standalone: the one
 * connection; a cluster: per slot (a slot's writes and PING go to its node). */
static size_t fence_sent(const batch *b, size_t i, size_t fences) {
  if (b->c->routes.mode == XF_ROUTE_STANDALONE)
    return fences ? 0 : fences;
  const xf__key *key = &b->flows[i].key;
  int slot = xf__cluster_keyslot(key->data, key->len);
  for (size_t f = 0; f < fences; f++) {
    const xf__key *other = &b->flows[b->who[b->fence_at[f]]].key;
    if (xf__cluster_keyslot(other->data, other->len) == slot)
      return f;
  }
  return fences;
}

/* Whether there is more to send than write fences while loads are
 * pending: a round of fences alone would cost a round trip before every
 * load of the per-key loader; held back, they go with the commands that
 * follow the loads (a PING's answer only needs to come after the write's
 * reply, and the batch returns after every one). */
static int others_to_send(const batch *b, size_t leases) {
  int loading = 0, others = 0;
  for (size_t i = 0; i < b->n && !others; i++) {
    loading |= b->steps[i] == XF_STEP_LOAD;
    others = b->steps[i] == XF_STEP_SEND && !xf__flow_fencing(&b->flows[i]) &&
             !(leases == 0 && xf__flow_leasing(&b->flows[i]));
  }
  return others || !loading;
}

/* Every flow waiting to send, in one pipeline (leases within the budget;
 * one write fence per connection). Returns how many were sent. */
static size_t send_all(batch *b, const batch_loaders *l) {
  size_t k = 0, leases = lease_budget(b, l), fences = 0, shared = 0;
  if (!others_to_send(b, leases))
    return 0; /* fences only, loads pending: they go with the next round */
  for (size_t i = 0; i < b->n; i++)
    if (b->steps[i] == XF_STEP_SEND) {
      if (xf__flow_leasing(&b->flows[i])) {
        if (leases == 0)
          continue;
        leases--;
      }
      if (xf__flow_fencing(&b->flows[i])) {
        size_t f = fence_sent(b, i, fences);
        if (f < fences) { /* another flow's PING answers for this write too */
          b->fence_of[i] = b->fence_at[f] + 1;
          shared++;
          continue;
        }
        b->fence_at[fences++] = k;
      }
      b->cmds[k] = &b->flows[i].cmd;
      b->who[k++] = i;
    }
  if (k == 0)
    return 0;
  int grace = 1; /* releases after an interrupt only: sent within the grace */
  for (size_t j = 0; j < k && grace; j++)
    grace = xf__flow_canceled(&b->flows[b->who[j]]);
  b->c->grace_ms = grace ? XF_CANCEL_GRACE_MS : 0;
  xf__command_many(b->c, k, b->cmds, b->rcs, b->replies);
  b->c->grace_ms = 0;
  int64_t now_ms = xf__now_ms();
  for (size_t f = 0; f < fences; f++) { /* before the flows take the replies */
    size_t j = b->fence_at[f];
    b->fence_ok[j] = b->rcs[j] == XF_OK && b->replies[j]->type != XF_REPLY_ERROR;
  }
  for (size_t j = 0; j < k; j++)
    b->steps[b->who[j]] =
        xf__flow_reply(&b->flows[b->who[j]], b->rcs[j], b->replies[j], now_ms);
  for (size_t i = 0; shared && i < b->n; i++)
    if (b->fence_of[i]) {
      b->steps[i] =
          xf__flow_fence_shared(&b->flows[i], b->fence_ok[b->fence_of[i] - 1], now_ms);
      b->fence_of[i] = 0;
      shared--;
    }
  return k;
}

/* Keeps the leases of every flow at its LOAD renewed while the batch's
 * loads run, until their writes go (right after the last load): the per-key
 * loader loads them one after the other, so a key waiting for its turn, or
 * loaded and waiting for the group's writes, would lose its lease to another
 * caller when another key's load stalls (the batch leases only as many keys
 * as the loads seen say fit in half a lease); the batch loader's one call
 * may outlast the lease as a single key's loader may. Those flows' loads
 * start no keeper of their own. NULL: none to renew. */
static xf__keeper *keep_leases(batch *b) {
  size_t m = 0;
  for (size_t i = 0; i < b->n; i++)
    if (b->steps[i] == XF_STEP_LOAD && b->flows[i].load == XF_LOAD_LEASED)
      b->waiting[m++] = &b->flows[i];
  xf__keeper *keeper =
      m ? xf__keeper_start_many(b->waiting, m, b->c->opened_with, b->c->share) : NULL;
  for (size_t j = 0; keeper && j < m; j++)
    b->waiting[j]->lease_kept = 1;
  return keeper;
}

/* Every flow waiting for its loader: one after the other with the per-key
 * loader, or all in one call of the batch loader (batch_load.c). A per-key
 * early refresh with background_refresh is handed to the share's refresh
 * workers (or options.refresh_executor) as the blocking driver's is
 * (blocking_refresh.c): the key is served its current value now. */
static size_t load_all(batch *b, const batch_loaders *l) {
  xf__keeper *keeper = keep_leases(b);
  size_t k = 0;
  for (size_t i = 0; i < b->n; i++) {
    if (b->steps[i] != XF_STEP_LOAD)
      continue;
    if (l->one && xf__flow_detachable(&b->flows[i], xf__blocking_off_path(b->flows[i].c))) {
      b->flows[i].lease_kept = 0; /* the refresh's own keeper renews it */
      xf__keeper_drop(keeper, &b->flows[i]);
      b->steps[i] = xf__blocking_refresh(&b->flows[i], l->one, l->ud);
    } else if (l->one) {
      int64_t t0 = xf__now_us();
      b->steps[i] = xf__flow_run_loader(&b->flows[i], l->one, l->ud);
      b->load_us += xf__now_us() - t0;
      b->loaded++;
    } else {
      b->who[k] = i;
    }
    k++;
  }
  if (k && !l->one)
    xf__batch_load_many(b, l, k);
  xf__keeper_stop(keeper);
  for (size_t i = 0; i < b->n; i++)
    b->flows[i].lease_kept = 0;
  return k;
}

/* Sleeps until the earliest waiter is due (or, with a near cache, a waited
 * key is written: batch_wait.c) and wakes every flow due by then. */
static size_t wake_due(batch *b) {
  int64_t first = INT64_MAX;
  for (size_t i = 0; i < b->n; i++)
    if (b->steps[i] == XF_STEP_WAIT && b->flows[i].wake_ms < first)
      first = b->flows[i].wake_ms;
  if (first == INT64_MAX)
    return 0;
  int stop = xf__batch_sleep(b, first); /* ends every wait */
  int64_t now_ms = xf__now_ms();
  size_t k = 0;
  for (size_t i = 0; i < b->n; i++)
    if (b->steps[i] == XF_STEP_WAIT &&
        (stop || b->flows[i].wake_ms <= now_ms || xf__batch_woken(b, i))) {
      b->steps[i] =
          stop ? xf__flow_cancel(&b->flows[i]) : xf__flow_woke(&b->flows[i], now_ms);
      k++;
    }
  return k;
}

/* Once the interrupt ended one call (a reply wait it cut short), it ends
 * them all: no more loads, every lease held released. Only with an
 * interrupt set: a batch of hits pays nothing. */
static void stop_if_canceled(batch *b) {
  if (!b->c->interrupt)
    return;
  size_t i = 0;
  while (i < b->n && !(b->steps[i] == XF_STEP_DONE ? b->flows[i].rc == XF_ECANCELED
                                                   : xf__flow_canceled(&b->flows[i])))
    i++;
  for (size_t j = 0; i < b->n && j < b->n; j++)
    if (b->steps[j] != XF_STEP_DONE && !xf__flow_canceled(&b->flows[j]))
      b->steps[j] = xf__flow_cancel(&b->flows[j]);
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
  b.lease_ms = p ? p->lease_ms : 0;
  int64_t now_ms = xf__now_ms();
  xf_driver driver = c->driver; /* the flows' events name the batch driver */
  c->driver = XF_DRIVER_BATCH;
  const xf__port_near *near = c->ports.near;
  if (near && !c->disabled) /* the near hits checked once per node, not per key */
    near->batch_begin(c->ports.self, n, keys, keylens, now_ms);
  for (size_t i = 0; i < n; i++)
    b.steps[i] = xf__flow_start(&b.flows[i], c, keys[i], keylens[i], p, &values[i], now_ms);
  if (near)
    near->batch_end(c->ports.self);
  c->driver = driver;
  xf__batch_read_all(&b);
  while ((stop_if_canceled(&b), send_all(&b, l) || load_all(&b, l) || wake_due(&b)))
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
