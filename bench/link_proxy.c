/* The emulated link (see link_proxy.h): one thread accepts, two per
 * connection carry its directions. */
#include "link_proxy.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (64 * 1024)
#define QLEN 32 /* chunks on the wire or waiting for it, per direction */
#define MAXCONN 16
/* A chunk due within EARLY_NS leaves at once: on a busy machine a sleep that
 * short costs tens of us, far more than it waits. The last SPIN_NS before a
 * chunk is due are polled without a timeout, not slept: a timed wake-up on a
 * busy machine comes that late (at 10 Gbit/s this took the raw GET's p50 from
 * about 420 to 310 us of its 164 on the wire). */
#define EARLY_NS 2000
#define SPIN_NS 60000

typedef struct wire {
  int in, out;
  double ns_per_byte;
  int64_t delay_ns;
  pthread_t thread;
} wire;

struct link_proxy {
  int listen_fd, port, to_port;
  double ns_per_byte;
  int64_t delay_ns;
  pthread_t acceptor;
  int nconn; /* written by the acceptor only, read after it is joined */
  struct {
    int client, server;
    wire up, down;
  } conn[MAXCONN];
};

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int send_all(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return -1;
    p += w, n -= (size_t)w;
  }
  return 0;
}

/* One direction. A ring of chunks, each with the time it is due at the far
 * end; one ppoll waits for the next input or the next due chunk, whichever
 * comes first, so the wire keeps filling while earlier chunks are delayed. */
static void *wire_run(void *arg) {
  wire *w = arg;
  prctl(PR_SET_TIMERSLACK, 1UL); /* the default 50 us would be 30% of 10 Gbit/s' 164 */
  char(*buf)[CHUNK] = malloc((size_t)QLEN * CHUNK);
  size_t len[QLEN];
  int64_t due[QLEN], wire_free = 0;
  int head = 0, n = 0, eof = 0;
  while (buf && (!eof || n)) {
    int64_t now = now_ns();
    for (; n && due[head] <= now + EARLY_NS; head = (head + 1) % QLEN, n--)
      if (send_all(w->out, buf[head], len[head]) != 0)
        goto done;
    int reading = !eof && n < QLEN;
    struct pollfd pfd = {.fd = reading ? w->in : -1, .events = POLLIN};
    struct timespec wait, *until = NULL;
    if (n) {
      int64_t d = due[head] - now > SPIN_NS ? due[head] - now - SPIN_NS : 0;
      wait = (struct timespec){d / 1000000000, d % 1000000000};
      until = &wait;
    }
    if (ppoll(&pfd, 1, until, NULL) <= 0 || !reading)
      continue;
    int slot = (head + n) % QLEN;
    ssize_t got = read(w->in, buf[slot], CHUNK);
    if (got <= 0) {
      eof = got == 0 || errno != EINTR;
      continue;
    }
    now = now_ns();
    wire_free =
        (now > wire_free ? now : wire_free) + (int64_t)((double)got * w->ns_per_byte);
    len[slot] = (size_t)got;
    due[slot] = wire_free + w->delay_ns;
    n++;
  }
done:
  shutdown(w->out, SHUT_WR); /* the far end sees this side's close */
  free(buf);
  return NULL;
}

static int connect_upstream(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
    return fd;
  if (fd >= 0)
    close(fd);
  return -1;
}

static void start_wire(wire *w, const link_proxy *p, int in, int out) {
  *w = (wire){.in = in, .out = out, .ns_per_byte = p->ns_per_byte, .delay_ns = p->delay_ns};
  int one = 1; /* a chunk leaves when it is due, not when Nagle allows */
  setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  pthread_create(&w->thread, NULL, wire_run, w);
}

static void *accept_run(void *arg) {
  link_proxy *p = arg;
  for (;;) {
    int client = accept(p->listen_fd, NULL, NULL);
    if (client < 0 && errno == EINTR)
      continue;
    if (client < 0)
      return NULL; /* link_proxy_stop shut the listener */
    int server = p->nconn < MAXCONN ? connect_upstream(p->to_port) : -1;
    if (server < 0) {
      fprintf(stderr, "link_proxy: connection refused (%s)\n",
              p->nconn < MAXCONN ? strerror(errno) : "16 already");
      close(client);
      continue;
    }
    p->conn[p->nconn].client = client, p->conn[p->nconn].server = server;
    start_wire(&p->conn[p->nconn].up, p, client, server);
    start_wire(&p->conn[p->nconn].down, p, server, client);
    p->nconn++;
  }
}

link_proxy *link_proxy_start(int to_port, double mbit, int64_t delay_us) {
  link_proxy *p = calloc(1, sizeof *p);
  struct sockaddr_in sa = {.sin_family = AF_INET};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t sl = sizeof sa;
  if (!p || mbit <= 0 || delay_us < 0) {
    fprintf(stderr, "link_proxy: wants a rate > 0 and a delay >= 0\n");
    free(p);
    return NULL;
  }
  p->to_port = to_port;
  p->ns_per_byte = 8000.0 / mbit; /* 8 bits at mbit * 1e6 bit/s, in ns */
  p->delay_ns = delay_us * 1000;
  p->listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  if (p->listen_fd < 0 || bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa) != 0 ||
      listen(p->listen_fd, MAXCONN) != 0 ||
      getsockname(p->listen_fd, (struct sockaddr *)&sa, &sl) != 0 ||
      pthread_create(&p->acceptor, NULL, accept_run, p) != 0) {
    fprintf(stderr, "link_proxy: cannot listen: %s\n", strerror(errno));
    if (p->listen_fd >= 0)
      close(p->listen_fd);
    free(p);
    return NULL;
  }
  p->port = ntohs(sa.sin_port);
  return p;
}

int link_proxy_port(const link_proxy *p) { return p->port; }

void link_proxy_stop(link_proxy *p) {
  if (!p)
    return;
  shutdown(p->listen_fd, SHUT_RDWR); /* wakes the acceptor's accept */
  pthread_join(p->acceptor, NULL);
  close(p->listen_fd);
  for (int i = 0; i < p->nconn; i++) {
    shutdown(p->conn[i].client, SHUT_RDWR);
    shutdown(p->conn[i].server, SHUT_RDWR);
    pthread_join(p->conn[i].up.thread, NULL);
    pthread_join(p->conn[i].down.thread, NULL);
    close(p->conn[i].client);
    close(p->conn[i].server);
  }
  free(p);
}
