/* The near cache's tracker (near_track.c: its thread, the connections it
 * reads and watches) as its arming (near_arm.c) sees it. Private to the two. */
#ifndef XF_NEAR_TRACK_H
#define XF_NEAR_TRACK_H

#include <poll.h>
#include <pthread.h>

#include "near_impl.h"

typedef struct watch { /* a tracked data connection's socket */
  struct watch *next;
  int fd;
  struct xf__track_node *node;
} watch;

/* What one poll() watches: the wake pipe, every node's invalidation
 * connection, every tracked data connection; grown as they come. */
typedef struct poll_set {
  struct pollfd *pf;
  struct xf__track_node **who;
  xf__inval **ctxs; /* the invalidation connection polled; NULL: a watched one */
  size_t n, cap;
} poll_set;

struct xf__near_tracker {
  struct xf__ncache *near;
  pthread_mutex_t mu;
  pthread_cond_t opened; /* a node's open was tried (xf__near_arm waits) */
  struct xf__track_node *nodes;
  watch *watches;
  int wake[2]; /* a byte: the thread rebuilds its poll set */
  pthread_t thread;
  int running, stopping;
  poll_set ps; /* the thread's; here, not on its stack: a forked child (which
                  has no such thread) still frees it */
};

/* A byte on the wake pipe: the thread rebuilds its poll set (and opens what
 * was asked for). */
void xf__tracker_wake(struct xf__near_tracker *t);

/* Starts the thread (every signal blocked in it): 1, or 0 when it cannot. */
int xf__tracker_start(struct xf__near_tracker *t);

/* Starts a thread running fn(arg) with every signal blocked (the tracker,
 * an opener): 1, or 0 when it cannot. */
int xf__tracker_spawn(pthread_t *th, void *(*fn)(void *), void *arg);

/* On the thread, under t->mu: joins each opener thread whose open is done
 * (its wake byte brings the thread here: none is left unjoined until the
 * close), and starts one for each node whose invalidation connection is
 * asked for (near_arm.c; opened on this thread, t->mu released meanwhile,
 * when no thread can start); 1 when it started one. */
int xf__tracker_open_wanted(struct xf__near_tracker *t);

#endif
