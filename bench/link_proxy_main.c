/* link_proxy: the emulated link of link_proxy.h as a program of its own, for
 * the benches that are not C (bindings/python/bench_compress.py --link-mbit).
 *
 *   build/bench/link_proxy TO_PORT MBIT [DELAY_US]
 *
 * Listens on a free 127.0.0.1 port, prints "port N" on a line of its own,
 * and forwards every connection to 127.0.0.1:TO_PORT through a link of MBIT
 * Mbit/s each way (DELAY_US one way) until its standard input ends or it is
 * signalled (SIGTERM, SIGINT). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "link_proxy.h"

static sigset_t ends; /* SIGTERM, SIGINT: taken by sigwait, in main */

/* Reads standard input to its end, then ends the program as SIGTERM does. */
static void *stdin_watch(void *arg) {
  (void)arg;
  char buf[256];
  while (read(0, buf, sizeof buf) > 0) {
  }
  kill(getpid(), SIGTERM);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: %s TO_PORT MBIT [DELAY_US]\n", argv[0]);
    return 2;
  }
  int to_port = atoi(argv[1]);
  double mbit = atof(argv[2]);
  long long delay_us = argc == 4 ? atoll(argv[3]) : 0;
  if (to_port <= 0 || to_port > 65535 || mbit <= 0 || delay_us < 0) {
    fprintf(stderr, "%s: TO_PORT 1-65535, MBIT > 0, DELAY_US >= 0\n", argv[0]);
    return 2;
  }
  sigemptyset(&ends);
  sigaddset(&ends, SIGTERM);
  sigaddset(&ends, SIGINT);
  pthread_sigmask(SIG_BLOCK, &ends, NULL); /* every thread started from here on too */
  link_proxy *p = link_proxy_start(to_port, mbit, delay_us);
  if (!p)
    return 1;
  printf("port %d\n", link_proxy_port(p));
  fflush(stdout);
  pthread_t watch;
  pthread_create(&watch, NULL, stdin_watch, NULL);
  pthread_detach(watch);
  int sig;
  sigwait(&ends, &sig);
  link_proxy_stop(p);
  return 0;
}
