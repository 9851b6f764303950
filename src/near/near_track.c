/* The near cache's tracker (near_impl.h): per Redis node one invalidation
 * connection (RESP2: CLIENT ID, then SUBSCRIBE __redis__:invalidate; named
 * xfetch-invalidate), which the data connections' CLIENT TRACKING on
 * REDIRECT <id> points to, and one thread that reads them all, with the
 * tracked data connections' sockets watched for their loss:
 *
 *   - a message naming keys invalidates them (near.c);
 *   - a message with no keys (FLUSHALL, FLUSHDB) drops the node;
 *   - the invalidation connection lost drops the node and bumps its
 *     generation: data connections armed under the old one reconnect
 *     (conn.c) or re-arm (async_conn.c), asking for a new one;
 *   - a tracked data connection closed by the server (CLIENT KILL, timeout)
 *     drops the node at once, before the client notices on its next call:
 *     Redis no longer invalidates what it tracked (redis#13082).
 *
 * The thread also starts the opener threads (near_arm.c), one per node
 * whose invalidation connection the armings ask for, and keeps reading the
 * nodes already open while they open.
 *
 * Lock order: the share's, the tracker's, then a shard's (near.c). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "near_impl.h"
#include "near_track.h"
#include "reply.h"

static int open_pipe(int fds[2]) {
  if (pipe(fds) != 0)
    return -1;
  for (int i = 0; i < 2; i++)
    fcntl(fds[i], F_SETFL, O_NONBLOCK), fcntl(fds[i], F_SETFD, FD_CLOEXEC);
  return 0;
}

struct xf__near_tracker *xf__tracker_open(struct xf__ncache *n) {
  struct xf__near_tracker *t = calloc(1, sizeof *t);
  if (!t)
    return NULL;
  if (open_pipe(t->wake) != 0) {
    free(t);
    return NULL;
  }
  t->near = n;
  pthread_mutex_init(&t->mu, NULL);
  pthread_cond_init(&t->opened, NULL);
  return t;
}

void xf__tracker_wake(struct xf__near_tracker *t) {
  char b = 1;
  ssize_t r = write(t->wake[1], &b, 1); /* full: the thread will wake anyway */
  (void)r;
}

/* The node's invalidation connection is gone (or broke): its entries go,
 * and tracking armed under it is stale. Under t->mu. */
static void lose(struct xf__near_tracker *t, struct xf__track_node *node) {
  __atomic_add_fetch(&node->gen, 1, __ATOMIC_ACQ_REL);
  xf__near_drop_node(t->near, node, XF_EIO); /* before its socket closes (a hit polls it) */
  __atomic_store_n(&node->inval_fd, -1, __ATOMIC_RELEASE);
  xf__inval_close(node->ctx);
  node->ctx = NULL;
}

void (*xf__near_test_before_apply)(void);

typedef struct reading { /* what on_message is told */
  struct xf__near_tracker *t;
  struct xf__track_node *node;
} reading;

/* One message from node's invalidation connection. */
static void on_message(void *ud, const xf__reply *r) {
  struct xf__near_tracker *t = ((reading *)ud)->t;
  struct xf__track_node *node = ((reading *)ud)->node;
  if (r->type != XF_REPLY_ARRAY || r->elements < 3 ||
      r->element[0]->type != XF_REPLY_STRING || strcmp(r->element[0]->str, "message"))
    return; /* the subscription's confirmation */
  if (xf__near_test_before_apply)
    xf__near_test_before_apply();
  const xf__reply *keys = r->element[2];
  if (keys->type != XF_REPLY_ARRAY) { /* nil: everything (FLUSHALL, FLUSHDB) */
    xf__near_drop_node(t->near, node, 0);
    return;
  }
  for (size_t i = 0; i < keys->elements; i++)
    if (keys->element[i]->type == XF_REPLY_STRING)
      xf__near_invalidate(t->near, keys->element[i]->str, keys->element[i]->len);
}

/* Reads what node's connection has (poll said readable) and applies it,
 * node->reading odd from before the first byte is taken off the socket
 * (or out of OpenSSL's buffers) until all of it is applied, or while a
 * message's start is held waiting for its rest. A near hit that sees it
 * even and unchanged across its lookup and its poll of the socket saw
 * either the bytes still there or their effect (near.c). Under t->mu. */
static void read_node(struct xf__near_tracker *t, struct xf__track_node *node) {
  uint64_t seq = __atomic_load_n(&node->reading, __ATOMIC_RELAXED);
  if (!(seq & 1)) {
    __atomic_store_n(&node->reading, ++seq, __ATOMIC_RELAXED);
    XF__NEAR_FENCE(); /* odd before the recv */
  }
  reading rd = {t, node};
  int rc = xf__inval_read(node->ctx, on_message, &rd);
  if (rc < 0)
    lose(t, node);
  if (rc != 1) /* applied: even (release: after what was applied) */
    __atomic_store_n(&node->reading, seq + 1, __ATOMIC_RELEASE);
}

/* A watched data connection's socket hung up: drop its node. Under t->mu;
 * the watch goes (the connection is closed by its owner later). */
static void hung_up(struct xf__near_tracker *t, int fd, struct xf__track_node *node) {
  for (watch **at = &t->watches; *at; at = &(*at)->next)
    if ((*at)->fd == fd && (*at)->node == node) {
      watch *w = *at;
      *at = w->next;
      free(w);
      xf__near_drop_node(t->near, node, XF_EIO);
      return;
    }
}

static int fit(poll_set *ps, size_t need) {
  if (need <= ps->cap)
    return 1;
  size_t cap = need * 2;
  struct pollfd *pf = realloc(ps->pf, cap * sizeof *pf);
  if (pf)
    ps->pf = pf;
  struct xf__track_node **who = realloc(ps->who, cap * sizeof *who);
  if (who)
    ps->who = who;
  xf__inval **ctxs = realloc(ps->ctxs, cap * sizeof *ctxs);
  if (ctxs)
    ps->ctxs = ctxs;
  if (!pf || !who || !ctxs)
    return 0;
  ps->cap = cap;
  return 1;
}

static int add(poll_set *ps, int fd, short events, struct xf__track_node *who,
               xf__inval *ctx) {
  if (!fit(ps, ps->n + 1))
    return 0;
  ps->pf[ps->n] = (struct pollfd){.fd = fd, .events = events};
  ps->who[ps->n] = who;
  ps->ctxs[ps->n++] = ctx;
  return 1;
}

/* Builds the set under t->mu. Out of memory for a connection's place: its
 * node keeps nothing (what is not watched could go stale unseen). */
static void build(struct xf__near_tracker *t, poll_set *ps) {
  ps->n = 0;
  add(ps, t->wake[0], POLLIN, NULL, NULL);
  for (struct xf__track_node *node = t->nodes; node; node = node->next)
    if (node->ctx && !add(ps, xf__inval_fd(node->ctx), POLLIN, node, node->ctx))
      xf__near_drop_node(t->near, node, XF_EIO);
  for (watch *w = t->watches; w; w = w->next)
    if (!add(ps, w->fd, POLLRDHUP, w->node, NULL))
      xf__near_drop_node(t->near, w->node, XF_EIO);
}

static void *run(void *arg) {
  struct xf__near_tracker *t = arg;
  poll_set ps = t->ps; /* a previous thread's (before a fork), or none */
  for (;;) {
    pthread_mutex_lock(&t->mu);
    while (xf__tracker_open_wanted(t))
      ;
    if (t->stopping) {
      pthread_mutex_unlock(&t->mu);
      break;
    }
    build(t, &ps);
    t->ps = ps;
    pthread_mutex_unlock(&t->mu);
    if (poll(ps.pf, (nfds_t)ps.n, ps.n ? -1 : 10) < 0 && errno != EINTR)
      continue;
    char buf[64];
    if (ps.pf[0].revents)
      while (read(t->wake[0], buf, sizeof buf) > 0)
        ;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 1; i < ps.n; i++) {
      if (!ps.pf[i].revents)
        continue;
      if (ps.ctxs[i]) { /* still that connection: not lost and reopened meanwhile */
        if (ps.who[i]->ctx == ps.ctxs[i])
          read_node(t, ps.who[i]);
      } else {
        hung_up(t, ps.pf[i].fd, ps.who[i]);
      }
    }
    pthread_mutex_unlock(&t->mu);
  }
  return NULL; /* t->ps is freed with t */
}

/* Signals are the application's threads' to take (a Python process's
 * Ctrl-C among them): every one is blocked in the near cache's threads. */
int xf__tracker_spawn(pthread_t *th, void *(*fn)(void *), void *arg) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(th, NULL, fn, arg);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc == 0;
}

int xf__tracker_start(struct xf__near_tracker *t) {
  return xf__tracker_spawn(&t->thread, run, t);
}

int xf__near_news_waiting(struct xf__ncache *n) {
  struct xf__near_tracker *t = xf__near_tracker(n);
  for (struct xf__track_node *node = __atomic_load_n(&t->nodes, __ATOMIC_ACQUIRE); node;
       node = node->next) {
    struct pollfd pf = {.fd = __atomic_load_n(&node->inval_fd, __ATOMIC_ACQUIRE),
                        .events = POLLIN};
    if ((__atomic_load_n(&node->reading, __ATOMIC_ACQUIRE) & 1) || poll(&pf, 1, 0) > 0)
      return 1;
  }
  return 0;
}

void xf__near_watch(xf__track *tk, int fd) {
  struct xf__near_tracker *t = tk->node->tracker;
  tk->fd = fd;
  watch *w = calloc(1, sizeof *w);
  pthread_mutex_lock(&t->mu);
  if (w) {
    *w = (watch){.next = t->watches, .fd = fd, .node = tk->node};
    t->watches = w;
  } else { /* not watched: its loss would go unseen, so keep nothing */
    xf__near_drop_node(t->near, tk->node, XF_EIO);
  }
  xf__tracker_wake(t);
  pthread_mutex_unlock(&t->mu);
}

void xf__near_lost(const xf__track *tk, int fd) {
  struct xf__near_tracker *t = tk->node->tracker;
  pthread_mutex_lock(&t->mu);
  for (watch **at = &t->watches; *at; at = &(*at)->next)
    if ((*at)->fd == fd && (*at)->node == tk->node) {
      watch *w = *at;
      *at = w->next;
      free(w);
      break;
    }
  xf__near_drop_node(t->near, tk->node, XF_EIO);
  xf__tracker_wake(t);
  pthread_mutex_unlock(&t->mu);
}

/* Stops the thread and the openers: an open connected and waiting for its
 * replies is shut down (it ends at once), one still connecting ends within
 * its connect timeout (or handshake); none starts after. */
void xf__tracker_close(struct xf__near_tracker *t) {
  pthread_mutex_lock(&t->mu);
  t->stopping = 1;
  for (struct xf__track_node *node = t->nodes; node; node = node->next)
    if (node->open_fd >= 0)
      shutdown(node->open_fd, SHUT_RDWR);
  xf__tracker_wake(t);
  pthread_mutex_unlock(&t->mu);
  if (t->running)
    pthread_join(t->thread, NULL);
  for (struct xf__track_node *node = t->nodes; node; node = node->next)
    if (node->has_opener)
      pthread_join(node->opener, NULL);
  while (t->nodes) {
    struct xf__track_node *node = t->nodes;
    t->nodes = node->next;
    xf__inval_close(node->ctx);
    xf__inval_who_free(node->want);
    free(node->host);
    free(node->unix_path);
    free(node);
  }
  while (t->watches) {
    watch *w = t->watches;
    t->watches = w->next;
    free(w);
  }
  close(t->wake[0]);
  close(t->wake[1]);
  free(t->ps.pf), free(t->ps.who), free(t->ps.ctxs);
  pthread_mutex_destroy(&t->mu);
  pthread_cond_destroy(&t->opened);
  free(t);
}

void xf__tracker_before_fork(struct xf__near_tracker *t) { pthread_mutex_lock(&t->mu); }

/* In the child: no thread reads the connections (they are the parent's:
 * only the child's copies of the sockets close); the nodes' generations
 * move on, so connections the child makes arm anew. */
void xf__tracker_after_fork(struct xf__near_tracker *t, int child) {
  if (child) {
    for (struct xf__track_node *node = t->nodes; node; node = node->next) {
      xf__inval_forget(node->ctx); /* the child's copy closes, nothing sent */
      node->ctx = NULL;
      node->inval_fd = -1;
      node->gen++;
      node->reading += node->reading & 1; /* a message begun: the parent's */
      xf__inval_who_free(node->want);     /* the parent's thread's to open */
      node->want = NULL;
      /* An open under way is the parent's opener's: the child keeps its copy
       * of neither the opener's credentials nor its socket. */
      xf__inval_who_free(node->as);
      node->as = NULL;
      if (node->open_fd >= 0)
        close(node->open_fd);
      node->open_fd = -1;
      node->has_opener = 0;
      node->opening = node->asked = 0;
      node->retry_ms = 0;
    }
    /* The parent's arms may be waiting on it: its state is theirs (glibc's
     * broadcast in the child would wait for them). */
    pthread_cond_init(&t->opened, NULL);
    while (t->watches) {
      watch *w = t->watches;
      t->watches = w->next;
      free(w);
    }
    t->running = 0;
    close(t->wake[0]);
    close(t->wake[1]);
    open_pipe(t->wake);
  }
  pthread_mutex_unlock(&t->mu);
}
