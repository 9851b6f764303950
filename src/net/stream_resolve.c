/* Host names resolved off the caller's thread (stream.h): getaddrinfo may
 * wait seconds on a slow DNS server, and an event loop's thread must never
 * wait. xf__stream_open_tcp hands a name to a short-lived resolver thread
 * and watches the read end of a pipe as the stream's descriptor (RESOLVING,
 * want READ); the thread stores the addresses and writes one byte. The loop
 * (async_wire.c) watches that pipe as it would the socket, the blocking use
 * polls it under the connect deadline (stream_wait.c): the connect timeout
 * covers resolution for every driver. A stream closed first (a timeout) just
 * lets go: the last of the stream and the thread frees the job.
 *
 * Numeric addresses never come here (resolved at once, AI_NUMERICHOST). When
 * no thread can be started the name is resolved on the caller's thread, as
 * before. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stream_impl.h"

unsigned xf__test_resolve_delay_ms;
int (*xf__test_getaddrinfo)(const char *host, const char *service,
                            const struct addrinfo *hints, struct addrinfo **res);

/* One name being resolved, shared by the stream and its thread. */
struct xf__resolve {
  int refs; /* the stream's and the thread's (__atomic_*) */
  int done; /* the thread has stored rc and res (__atomic_*, release) */
  int wfd;  /* the pipe's write end: the thread's */
  char *host;
  char service[16];
  struct addrinfo hints;
  struct addrinfo *res; /* freed by whoever drops the last reference, unless taken */
  int rc, sys_errno;
  pid_t pid; /* the thread's process: a fork's child has a copy, and no thread */
};

static void unref(xf__resolve *j) {
  if (__atomic_sub_fetch(&j->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  if (j->res)
    freeaddrinfo(j->res);
  free(j->host);
  free(j);
}

int xf__stream_getaddrinfo(const char *host, const char *service,
                           const struct addrinfo *hints, struct addrinfo **res) {
  unsigned ms = __atomic_load_n(&xf__test_resolve_delay_ms, __ATOMIC_RELAXED);
  if (ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
      ;
  }
  return xf__test_getaddrinfo ? xf__test_getaddrinfo(host, service, hints, res)
                              : getaddrinfo(host, service, hints, res);
}

static void *resolve(void *arg) {
  xf__resolve *j = arg;
  j->rc = xf__stream_getaddrinfo(j->host, j->service, &j->hints, &j->res);
  j->sys_errno = errno;
  __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
  ssize_t n;
  do
    n = write(j->wfd, "", 1);
  while (n < 0 && errno == EINTR);
  close(j->wfd);
  unref(j);
  return NULL;
}

/* Starts the thread on a new job; 0, or -1 (nothing started, s unchanged). */
static int start_thread(xf__stream *s, const char *host, const char *service,
                        const struct addrinfo *hints) {
  xf__resolve *j = calloc(1, sizeof *j);
  int p[2] = {-1, -1};
  if (!j || !(j->host = strdup(host)) || pipe2(p, O_CLOEXEC | O_NONBLOCK) != 0) {
    if (j)
      free(j->host);
    free(j);
    return -1;
  }
  snprintf(j->service, sizeof j->service, "%s", service);
  j->hints = *hints;
  j->wfd = p[1];
  j->refs = 2;
  j->pid = getpid();
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  /* The thread takes no signal: the application's handlers run where it
   * expects them (Python's on its main thread). */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pthread_t t;
  int rc = pthread_create(&t, &attr, resolve, j);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    close(p[0]);
    close(p[1]);
    free(j->host);
    free(j);
    return -1;
  }
  s->resolving = j;
  s->fd = p[0];
  s->fd_gen++;
  s->state = XF__STREAM_RESOLVING;
  s->want = XF__WANT_READ;
  return 0;
}

xf__io xf__stream_resolve_failed(xf__stream *s, const char *host, int rc, int sys_errno) {
  return xf__stream_fail(s, rc == EAI_MEMORY ? XF__SE_NOMEM : XF__SE_CONNECT,
                         "cannot resolve %s: %s", host,
                         rc == EAI_SYSTEM ? strerror(sys_errno) : gai_strerror(rc));
}

xf__io xf__stream_resolve_start(xf__stream *s, const char *host, const char *service,
                                const struct addrinfo *hints) {
  if (start_thread(s, host, service, hints) == 0)
    return XF__IO_AGAIN;
  int rc = xf__stream_getaddrinfo(host, service, hints, &s->addrs);
  if (rc != 0)
    return xf__stream_resolve_failed(s, host, rc, errno);
  s->addr = s->addrs;
  return xf__stream_try_addresses(s);
}

int xf__stream_resolved(const xf__stream *s) {
  return s->state != XF__STREAM_RESOLVING ||
         __atomic_load_n(&s->resolving->done, __ATOMIC_ACQUIRE);
}

xf__io xf__stream_resolve_step(xf__stream *s) {
  xf__resolve *j = s->resolving;
  if (!__atomic_load_n(&j->done, __ATOMIC_ACQUIRE)) {
    s->want = XF__WANT_READ;
    return XF__IO_AGAIN;
  }
  close(s->fd); /* the pipe: its one byte said what done says */
  s->fd = -1;
  s->resolving = NULL;
  if (j->rc != 0) {
    xf__io r = xf__stream_resolve_failed(s, j->host, j->rc, j->sys_errno);
    unref(j);
    return r;
  }
  s->addrs = s->addr = j->res;
  j->res = NULL;
  unref(j);
  return xf__stream_try_addresses(s);
}

void xf__stream_resolve_drop(xf__stream *s) {
  xf__resolve *j = s->resolving;
  if (!j)
    return;
  s->resolving = NULL;
  if (j->pid != getpid()) { /* a fork's child: the copy is the child's alone */
    if (!__atomic_load_n(&j->done, __ATOMIC_ACQUIRE))
      close(j->wfd); /* its copy of the thread's end (once done, it may be closed) */
    __atomic_store_n(&j->refs, 1, __ATOMIC_RELAXED);
  }
  unref(j); /* the thread frees it when it is the last */
}
