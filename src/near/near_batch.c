/* A batch's near hits (near_impl.h): the batch driver's calls, or a
 * binding's many keys, look up every key first and check each node's news
 * once, instead of one poll() per hit (~0.3 us each: most of a near hit).
 *
 * The argument is a single hit's (near.c, news_pending), stretched over the
 * batch: each node's sequence is loaded when its first entry is found (even,
 * or its hits go to Redis), so before the lookups of its other entries;
 * after the last lookup, one poll() of every node's invalidation socket and
 * of the entries' data connections, a fence, and each node's sequence again.
 * An invalidation that reached a socket before that poll is still there (the
 * poll sees it), or was taken by the tracker thread: before the node's first
 * load (the sequence then even only once it was applied: its entry was gone
 * before any of the node's lookups), or after it (the sequence then moved).
 * Either way the node's hits go to Redis. */
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "near_impl.h"

void (*xf__near_test_batch_looked_up)(void);

struct xf__ncache_batch {
  size_t count, next;
  const char *const *keys; /* the user's: c's prefix not included */
  const size_t *lens;
  xf__port_hit *hits;
  unsigned char *found;
};

typedef struct seen_node {
  const struct xf__track_node *node;
  uint64_t reading; /* when its first entry was found */
  int bad;          /* news: its hits go to Redis */
} seen_node;

typedef struct check {
  seen_node *nodes;
  size_t nnodes;
  struct pollfd *pf;
  size_t *pf_node; /* whose node each pollfd is */
  size_t npf;
} check;

/* The node of seen (added with its sockets when new): its index, or -1
 * out of memory. count bounds every table (one entry per key at most). */
static long note(check *k, const xf__near_seen *seen) {
  size_t i = 0;
  while (i < k->nnodes && k->nodes[i].node != seen->node)
    i++;
  if (i == k->nnodes) {
    k->nodes[k->nnodes++] = (seen_node){.node = seen->node, .reading = seen->reading};
    k->pf[k->npf] = (struct pollfd){.fd = seen->inval_fd, .events = POLLIN};
    k->pf_node[k->npf++] = i;
  } else if (seen->reading != k->nodes[i].reading) {
    k->nodes[i].bad = 1; /* the thread applied something meanwhile */
  }
  for (size_t j = 0; j < k->npf; j++)
    if (k->pf[j].fd == seen->data_fd && k->pf[j].events == POLLRDHUP)
      return (long)i;
  k->pf[k->npf] = (struct pollfd){.fd = seen->data_fd, .events = POLLRDHUP};
  k->pf_node[k->npf++] = i;
  return (long)i;
}

/* One poll(), one fence, then every node's sequence again. */
static void check_news(check *k) {
  if (xf__near_test_on_check)
    xf__near_test_on_check();
  int rc = poll(k->pf, (nfds_t)k->npf, 0);
  for (size_t j = 0; j < k->npf; j++)
    if (rc < 0 || k->pf[j].revents)
      k->nodes[k->pf_node[j]].bad = 1;
  XF__NEAR_FENCE(); /* the poll before the loads: see near.c's news_pending */
  for (size_t i = 0; i < k->nnodes; i++)
    if (__atomic_load_n(&k->nodes[i].node->reading, __ATOMIC_RELAXED) !=
        k->nodes[i].reading)
      k->nodes[i].bad = 1;
}

/* c's prefix and key in buf (grown as needed): its length, 0 for a key no
 * call would look up (NULL, empty, too long: the call says why). */
static size_t full_key(const xf_client *c, const char *key, size_t len, char **buf,
                       size_t *cap) {
  if (!key || len == 0 || len > c->max_key_len)
    return 0;
  size_t need = c->prefix_len + len;
  if (need > *cap) {
    char *b = realloc(*buf, need);
    if (!b)
      return 0;
    *buf = b;
    *cap = need;
  }
  memcpy(*buf, c->prefix, c->prefix_len);
  memcpy(*buf + c->prefix_len, key, len);
  return need;
}

static void batch_free(struct xf__ncache_batch *b) {
  if (!b)
    return;
  for (size_t i = 0; b->found && i < b->count; i++)
    if (b->found[i])
      free(b->hits[i].data);
  free(b->hits);
  free(b->found);
  free(b);
}

void xf__near_batch_begin(struct xf__ncache *n, xf_client *c, size_t count,
                          const char *const *keys, const size_t *lens, int64_t now_ms) {
  struct xf__ncache_batch *b = calloc(1, sizeof *b);
  check k = {0};
  long *at = NULL;  /* each key's node in k, -1: none */
  char *buf = NULL; /* a key with c's prefix */
  size_t cap = 0;
  if (b) {
    *b = (struct xf__ncache_batch){.count = count, .keys = keys, .lens = lens};
    b->hits = malloc(count * sizeof *b->hits);
    b->found = calloc(count, 1);
    k.nodes = malloc(count * sizeof *k.nodes);
    k.pf = malloc(2 * count * sizeof *k.pf);
    k.pf_node = malloc(2 * count * sizeof *k.pf_node);
    at = malloc(count * sizeof *at);
  }
  if (!b || !b->hits || !b->found || !k.nodes || !k.pf || !k.pf_node || !at) {
    batch_free(b); /* the calls check one by one */
    b = NULL;
    goto out;
  }
  for (size_t i = 0; i < count; i++) {
    xf__near_seen seen;
    size_t len = full_key(c, keys[i], lens[i], &buf, &cap);
    at[i] = len && xf__near_find(n, c, buf, len, now_ms, &b->hits[i], &seen)
                ? note(&k, &seen)
                : -1;
    b->found[i] = at[i] >= 0;
    if (b->found[i]) /* a batch's check polls no stamp's connections */
      b->hits[i].stamp_names = 0;
  }
  free(buf);
  if (xf__near_test_batch_looked_up)
    xf__near_test_batch_looked_up();
  if (k.nnodes)
    check_news(&k);
  for (size_t i = 0; i < count; i++)
    if (b->found[i] && k.nodes[at[i]].bad) {
      free(b->hits[i].data);
      b->found[i] = 0;
    }
out:
  free(at);
  free(k.nodes);
  free(k.pf);
  free(k.pf_node);
  c->near_batch = b;
}

void xf__near_batch_end(xf_client *c) {
  batch_free(c->near_batch);
  c->near_batch = NULL;
}

int xf__near_batch_take(struct xf__ncache_batch *b, const xf_client *c, const char *key,
                        size_t keylen, xf__port_hit *hit) {
  if (keylen < c->prefix_len)
    return -1;
  const char *own = key + c->prefix_len;
  size_t ownlen = keylen - c->prefix_len;
  for (size_t i = b->next; i < b->count; i++) {
    if (!b->keys[i] || b->lens[i] != ownlen || memcmp(b->keys[i], own, ownlen) != 0)
      continue;
    b->next = i + 1;
    if (!b->found[i])
      return 0;
    *hit = b->hits[i];
    b->found[i] = 0; /* the caller's now */
    return 1;
  }
  return -1;
}
