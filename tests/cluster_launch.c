/* A 3 masters + 3 replicas Redis Cluster on loopback, for the tests and the
 * benchmark (no Criterion here: cluster_fixture.c has the test helpers). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cluster.h"
#include "cluster_fixture.h"
#include "port_free.h"
#include "reader.h"
#include "reply.h"
#include "stream.h"
#include "tls.h"
#include "xfetch.h"

#define BUS_OFFSET 10000
#define PORT_LOW 10000
#define PORT_HIGH (32768 - BUS_OFFSET - XFT_CLUSTER_NODES) /* below the ephemeral range */
#define READY_TIMEOUT_S 20.0

void xft_cluster_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0)
    ;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A base port whose 6 client ports and 6 bus ports are all free now. */
static int pick_base(unsigned *seed) {
  for (int attempt = 0; attempt < 200; attempt++) {
    int base = PORT_LOW + (int)(rand_r(seed) % (PORT_HIGH - PORT_LOW));
    int ok = 1;
    for (int i = 0; ok && i < XFT_CLUSTER_NODES; i++)
      ok = xft_port_free(base + i) && xft_port_free(base + i + BUS_OFFSET);
    if (ok)
      return base;
  }
  return -1;
}

static pid_t spawn(char *const argv[], const char *log) {
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive an aborted test run */
    if (log) {
      int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
    }
    execvp(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static pid_t start_node(xft_cluster *c, int i) {
  char port[16], dir[96], crt[96], key[96], ca[96], ccrt[96], ckey[96];
  snprintf(port, sizeof port, "%d", c->port[i]);
  snprintf(dir, sizeof dir, "%s/node%d", c->dir, i);
  if (mkdir(dir, 0700) != 0)
    return -1;
  // clang-format off
  /* Replicas show in CLUSTER SLOTS once their replication offset is non-zero:
   * sync at once and ping them every second, or an idle cluster takes 10 s. */
  char *argv[] = {"redis-server", "--port", port, "--bind", "127.0.0.1", "--dir", dir,
                  "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel",
                  "warning", "--logfile", "redis.log", "--cluster-enabled", "yes",
                  "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000",
                  "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1", NULL};
  /* TLS only: no plain port; the bus and replication over TLS, each node
   * presenting the client certificate when it connects to another. */
  snprintf(crt, sizeof crt, "%s/server.crt", c->tls_dir);
  snprintf(key, sizeof key, "%s/server.key", c->tls_dir);
  snprintf(ca, sizeof ca, "%s/ca.crt", c->tls_dir);
  snprintf(ccrt, sizeof ccrt, "%s/client.crt", c->tls_dir);
  snprintf(ckey, sizeof ckey, "%s/client.key", c->tls_dir);
  char *tls_argv[] = {"redis-server", "--port", "0", "--tls-port", port, "--tls-cluster", "yes",
                      "--tls-replication", "yes", "--tls-cert-file", crt, "--tls-key-file", key,
                      "--tls-ca-cert-file", ca, "--tls-client-cert-file", ccrt,
                      "--tls-client-key-file", ckey, "--tls-auth-clients", "no",
                      "--bind", "127.0.0.1", "--dir", dir,
                      "--save", "", "--appendonly", "no", "--daemonize", "no", "--loglevel",
                      "warning", "--logfile", "redis.log", "--cluster-enabled", "yes",
                      "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000",
                      "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1", NULL};
  // clang-format on
  return spawn(c->tls_dir[0] ? tls_argv : argv, NULL);
}

/* The fixture's own commands wait up to 10 s: a node that is down refuses at
 * once, and a live one answered well within that under ASan at load average
 * 14 (1 s was too short there for a TLS handshake and CLUSTER SLOTS). */
#define ADMIN_TIMEOUT_MS 10000

redisContext *xft_cluster_connect(int port) {
  struct timeval tv = {ADMIN_TIMEOUT_MS / 1000, 0};
  redisContext *r = redisConnectWithTimeout("127.0.0.1", port, tv);
  if (r && !r->err && redisSetTimeout(r, tv) == REDIS_OK)
    return r;
  redisFree(r);
  return NULL;
}

/* One command over TLS on a stream of its own (hiredis here has no TLS):
 * hiredis' reply, or the core's (xf__reply) with core. NULL on any failure. */
static void *tls_vcmd(const char *certdir, int port, int core, const char *fmt,
                      va_list ap) {
  char ca[96], err[256], *cmd = NULL;
  snprintf(ca, sizeof ca, "%s/ca.crt", certdir);
  xf__tls_config cfg = {.enable = 1, .ca_file = ca};
  xf__tls *tls = NULL;
  if (xf__tls_new(&tls, &cfg, err, sizeof err) != XF_OK)
    return NULL;
  int len = redisvFormatCommand(&cmd, fmt, ap);
  redisReader *rd = core ? xf__reader_create() : redisReaderCreate();
  void *reply = NULL;
  xf__stream s;
  xf__stream_init(&s);
  int64_t deadline = xf__stream_now_ms() + ADMIN_TIMEOUT_MS;
  xf__stream_open_tcp(&s, "127.0.0.1", port, tls);
  if (len > 0 && rd && xf__stream_connect_blocking(&s, deadline) == XF_OK &&
      xf__stream_write_all(&s, cmd, (size_t)len, deadline) == XF_OK) {
    char buf[16384];
    size_t got;
    while (!reply && xf__stream_read_some(&s, buf, sizeof buf, &got, deadline) == XF_OK)
      if (redisReaderFeed(rd, buf, got) != REDIS_OK ||
          redisReaderGetReply(rd, &reply) != REDIS_OK)
        break;
  }
  xf__stream_close(&s);
  if (rd)
    redisReaderFree(rd);
  redisFreeCommand(cmd);
  xf__tls_free(tls);
  return reply;
}

/* A command to the node at port, plain or TLS as c; core: the reply is the
 * core's xf__reply (xf__reply_free), else hiredis' (freeReplyObject). */
static void *node_vcmd(const xft_cluster *c, int port, int core, const char *fmt,
                       va_list ap) {
  if (c->tls_dir[0])
    return tls_vcmd(c->tls_dir, port, core, fmt, ap);
  redisContext *r = xft_cluster_connect(port);
  if (!r)
    return NULL;
  if (core)
    xf__reader_adopt(r->reader);
  void *reply = redisvCommand(r, fmt, ap);
  redisFree(r);
  return reply;
}

static void *node_cmd(const xft_cluster *c, int port, int core, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  void *reply = node_vcmd(c, port, core, fmt, ap);
  va_end(ap);
  return reply;
}

redisReply *xft_cluster_node_cmd(const xft_cluster *c, int port, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *reply = node_vcmd(c, port, 0, fmt, ap);
  va_end(ap);
  return reply;
}

/* 1 when node i answers, as itself: its INFO names its process (another
 * test's server that took the port would answer too, while node i exits). */
static int answers(const xft_cluster *c, int i) {
  redisReply *rep = node_cmd(c, c->port[i], 0, "INFO server");
  char mine[32];
  snprintf(mine, sizeof mine, "process_id:%d\r", (int)c->pid[i]);
  int ok = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, mine);
  freeReplyObject(rep);
  return ok;
}

/* 1 when the node says cluster_state:ok and its CLUSTER SLOTS shows all
 * slots served by 3 masters with one replica each. */
static int node_ready(const xft_cluster *c, int i) {
  int port = c->port[i];
  redisReply *info = node_cmd(c, port, 0, "CLUSTER INFO");
  int ok = info && info->type == REDIS_REPLY_STRING &&
           strstr(info->str, "cluster_state:ok") &&
           strstr(info->str, "cluster_known_nodes:6\r");
  freeReplyObject(info);
  /* the CLUSTER SLOTS reply goes to the core's parser */
  xf__reply *slots = ok ? node_cmd(c, port, 1, "CLUSTER SLOTS") : NULL;
  xf__cluster_map m;
  xf__cluster_map_init(&m);
  ok = slots && xf__cluster_map_parse(&m, slots, "127.0.0.1", NULL, 0) == 0 &&
       xf__cluster_map_covered(&m) == XF_CLUSTER_SLOTS && m.nnodes == XFT_CLUSTER_NODES;
  for (int i = 0; ok && i < m.nnodes; i++) {
    int rep[2];
    ok = m.nodes[i].master >= 0 || xf__cluster_map_replicas(&m, i, rep, 2) == 1;
  }
  xf__cluster_map_free(&m);
  xf__reply_free(slots);
  return ok;
}

/* Runs redis-cli --cluster create; returns its exit status (or -1). */
static int create(xft_cluster *c, double deadline) {
  char eps[XFT_CLUSTER_NODES][32], log[96], ca[96];
  char *argv[XFT_CLUSTER_NODES + 12] = {"redis-cli"};
  int n = 1;
  if (c->tls_dir[0]) {
    snprintf(ca, sizeof ca, "%s/ca.crt", c->tls_dir);
    argv[n++] = "--tls";
    argv[n++] = "--cacert";
    argv[n++] = ca;
  }
  argv[n++] = "--cluster";
  argv[n++] = "create";
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    snprintf(eps[i], sizeof eps[i], "127.0.0.1:%d", c->port[i]);
    argv[n++] = eps[i];
  }
  argv[n++] = "--cluster-replicas";
  argv[n++] = "1";
  argv[n++] = "--cluster-yes";
  argv[n] = NULL;
  snprintf(log, sizeof log, "%s/create.log", c->dir);
  pid_t pid = spawn(argv, log);
  int status = -1;
  while (pid > 0 && waitpid(pid, &status, WNOHANG) == 0) {
    if (now_s() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    xft_cluster_sleep_ms(20);
  }
  return pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int wait_all(xft_cluster *c, int (*ready)(const xft_cluster *, int i),
                    double deadline) {
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    while (!ready(c, i)) {
      if (now_s() > deadline || waitpid(c->pid[i], NULL, WNOHANG) == c->pid[i])
        return -1;
      xft_cluster_sleep_ms(20);
    }
  }
  return 0;
}

static void stop_nodes(xft_cluster *c) {
  for (int i = 0; i < XFT_CLUSTER_NODES; i++)
    if (c->pid[i] > 0)
      kill(c->pid[i], SIGTERM);
  double deadline = now_s() + 5;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    while (c->pid[i] > 0 && waitpid(c->pid[i], NULL, WNOHANG) == 0) {
      if (now_s() > deadline) {
        kill(c->pid[i], SIGKILL);
        waitpid(c->pid[i], NULL, 0);
        break;
      }
      xft_cluster_sleep_ms(5);
    }
    c->pid[i] = 0;
  }
}

static int start_once(xft_cluster *c, unsigned *seed, double deadline) {
  int base = pick_base(seed);
  if (base < 0)
    return -1;
  for (int i = 0; i < XFT_CLUSTER_NODES; i++) {
    c->port[i] = base + i;
    if ((c->pid[i] = start_node(c, i)) < 0)
      return -1;
  }
  if (wait_all(c, answers, deadline) != 0)
    return -1; /* a node died: a port was taken meanwhile */
  int rc = create(c, deadline);
  if (rc != 0) {
    fprintf(stderr, "cluster fixture: redis-cli --cluster create exited %d (see %s)\n", rc,
            c->dir);
    return -2;
  }
  return wait_all(c, node_ready, deadline) == 0 ? 0 : -2;
}

static void remove_dir(const char *dir) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (dir[0] && system(cmd) != 0)
    fprintf(stderr, "cluster fixture: could not remove %s\n", dir);
}

int xft_cluster_start(xft_cluster *c) { return xft_cluster_start_tls(c, NULL); }

int xft_cluster_start_tls(xft_cluster *c, const char *certdir) {
  double t0 = now_s(), deadline = t0 + READY_TIMEOUT_S;
  unsigned seed = (unsigned)getpid() ^ (unsigned)(t0 * 1e6);
  memset(c, 0, sizeof *c);
  if (certdir)
    snprintf(c->tls_dir, sizeof c->tls_dir, "%s", certdir);
  for (int attempt = 0; attempt < 3; attempt++) {
    snprintf(c->dir, sizeof c->dir, "/tmp/xft-cluster-XXXXXX");
    if (!mkdtemp(c->dir))
      return -1;
    int rc = start_once(c, &seed, deadline);
    if (rc == 0) {
      c->start_s = now_s() - t0;
      return 0;
    }
    stop_nodes(c);
    if (rc == -2) { /* a real failure, not a port race: keep the logs */
      fprintf(stderr, "cluster fixture: not ready after %.1f s; logs in %s\n", now_s() - t0,
              c->dir);
      return -1;
    }
    remove_dir(c->dir);
  }
  fprintf(stderr, "cluster fixture: no free ports\n");
  return -1;
}

void xft_cluster_stop(xft_cluster *c) {
  double t0 = now_s();
  stop_nodes(c);
  if (c->dir[0])
    remove_dir(c->dir);
  c->dir[0] = '\0';
  c->stop_s = now_s() - t0;
}
