/* Test fixture: a real Redis Cluster of 3 masters + 3 replicas on loopback,
 * in a temp dir. A binary that calls xft_cluster_port gets one cluster shared
 * by its tests (cluster_shared.c: Criterion PRE_ALL hook), removed afterwards
 * (POST_ALL); xft_cluster_start gives a test its own. Every
 * redis-server dies with the runner (PR_SET_PDEATHSIG) if the run aborts.
 * Do not link it with fixture.c (that one starts a standalone server). */
#ifndef XF_TEST_CLUSTER_FIXTURE_H
#define XF_TEST_CLUSTER_FIXTURE_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

#define XFT_CLUSTER_NODES 6

/* Connect and command timeouts for the clients of tests that are not about
 * a timeout (10 s, not the library's 1 s defaults): a busy machine under a
 * sanitizer or valgrind can take past 1 s to answer an open or a batch. The
 * tests of faults (chaos) keep the defaults they are about. */
enum { XFT_CLUSTER_PATIENT_MS = 10000 };

typedef struct xft_cluster {
  pid_t pid[XFT_CLUSTER_NODES];
  int port[XFT_CLUSTER_NODES]; /* consecutive; each bus port is port + 10000 */
  char dir[64];                /* one subdirectory per node */
  char tls_dir[64];            /* "" = plain TCP; else every node is TLS only on
                                  the certificates there (tls_certs.h) */
  double start_s, stop_s;      /* how long start and stop took */
} xft_cluster;

/* Starts 6 cluster-enabled redis-servers on free ports below 32768 - 10000
 * (so neither they nor their bus ports meet the kernel's ephemeral ports),
 * joins them with `redis-cli --cluster create --cluster-replicas 1` and waits
 * until every node reports cluster_state:ok and sees all 16384 slots served
 * by 3 masters with one replica each. Returns 0, or -1 (all stopped, a
 * message on stderr). */
int xft_cluster_start(xft_cluster *c);

/* The same with TLS only on every node (--port 0: port[i] is its TLS port),
 * the cluster bus and replication over TLS too (tls-cluster, tls-replication),
 * on the certificates tls_certs.c made in certdir: the nodes present
 * server.crt, trust ca.crt and present client.crt to each other (the bus
 * demands one); clients need no certificate (--tls-auth-clients no). */
int xft_cluster_start_tls(xft_cluster *c, const char *certdir);

/* Runs one command (printf-style, as redisCommand) on the node at port of c
 * over a connection of its own, TLS when c is (trusting c->tls_dir's CA).
 * The reply (freeReplyObject) or NULL. */
redisReply *xft_cluster_node_cmd(const xft_cluster *c, int port, const char *fmt, ...);

/* SIGTERM to every node, waits for them, removes the dir. Safe to repeat. */
void xft_cluster_stop(xft_cluster *c);

/* The binary's shared cluster: the port of node i (0..5; which ones are
 * masters is the cluster's choice: ask CLUSTER SLOTS). */
int xft_cluster_port(int i);

/* The binary's shared cluster as an xft_cluster (its ports; plain TCP), for
 * the helpers that take one (cluster_failover.h). */
const xft_cluster *xft_cluster_shared(void);

/* A raw hiredis connection to the node at port (1 s timeouts), or NULL. */
redisContext *xft_cluster_connect(int port);

/* A raw hiredis connection to the node at port; asserts success. */
redisContext *xft_cluster_redis(int port);

/* Runs a command (printf-style) and returns its reply; asserts non-NULL. */
redisReply *xft_cluster_cmd(redisContext *r, const char *fmt, ...);

void xft_cluster_sleep_ms(int ms);

#endif
