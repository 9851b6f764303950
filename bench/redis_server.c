/* The Redis under test: a throwaway redis-server on a free loopback port (temp
 * dir, no persistence), or a server named by --redis URL. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

/* redis://[[user:]password@]host[:port][/db] */
int target_parse_url(target *t, const char *url) {
  memset(t, 0, sizeof *t);
  t->port = 6379;
  if (strncmp(url, "redis://", 8) != 0) {
    fprintf(stderr, "xfetch-bench: --redis wants redis://host:port[/db], got %s\n", url);
    return -1;
  }
  const char *p = url + 8, *at = strrchr(p, '@');
  if (at) {
    const char *colon = memchr(p, ':', (size_t)(at - p));
    const char *pw = colon ? colon + 1 : p;
    snprintf(t->password, sizeof t->password, "%.*s", (int)(at - pw), pw);
    p = at + 1;
  }
  size_t hl = strcspn(p, ":/");
  snprintf(t->host, sizeof t->host, "%.*s", (int)hl, p);
  p += hl;
  if (*p == ':')
    t->port = (int)strtol(p + 1, (char **)&p, 10);
  if (*p == '/')
    t->db = atoi(p + 1);
  if (!t->host[0])
    snprintf(t->host, sizeof t->host, "127.0.0.1");
  return 0;
}

/* A loopback port that was free a moment ago, drawn below the kernel's
 * ephemeral range (32768 and up on Linux), where an outgoing connection may
 * take a port before the server binds it. */
int target_free_port(void) {
  static unsigned seed;
  if (!seed)
    seed = (unsigned)getpid() ^ (unsigned)time(NULL);
  for (int attempt = 0; attempt < 100; attempt++) {
    int port = 10000 + (int)(rand_r(&seed) % 22000);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    if (fd >= 0)
      close(fd);
    if (ok)
      return port;
  }
  return -1;
}

static int spawn(target *t, const char *const *extra) {
  char port[16], log[300], sock[300];
  snprintf(port, sizeof port, "%d", t->port);
  snprintf(log, sizeof log, "%s/redis.log", t->dir);
  snprintf(sock, sizeof sock, "%s/redis.sock", t->dir);
  pid_t pid = fork();
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    dup2(null, 0), dup2(null, 1);
    setpgid(0, 0); /* Ctrl-C reaches the bench, which stops the server itself */
#ifdef __linux__
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* and if the bench is killed outright */
#endif
    const char *argv[48] = {"redis-server",
                            "--port",
                            port,
                            "--bind",
                            "127.0.0.1",
                            "--save",
                            "",
                            "--appendonly",
                            "no",
                            "--dir",
                            t->dir,
                            "--logfile",
                            log,
                            "--daemonize",
                            "no",
                            "--maxclients",
                            "4000",
                            "--unixsocket",
                            sock,
                            "--unixsocketperm",
                            "700"};
    int n = 21;
    for (; extra && *extra && n < 47; extra++)
      argv[n++] = *extra;
    argv[n] = NULL;
    execvp("redis-server", (char *const *)argv);
    fprintf(stderr, "xfetch-bench: cannot run redis-server: %s\n", strerror(errno));
    _exit(127);
  }
  return pid;
}

/* Waits until the server answers PING on its own Unix socket (another
 * server that took the port would answer on TCP; redis-server opens its Unix
 * socket after its TCP and TLS ports); 0 when it does. */
static int await_ready(target *t) {
  char sock[300];
  snprintf(sock, sizeof sock, "%s/redis.sock", t->dir);
  for (int i = 0; i < 250; i++) {
    int status;
    if (waitpid(t->pid, &status, WNOHANG) == t->pid)
      return -1; /* exited: port taken, or no redis-server */
    struct timeval tv = {0, 200000};
    redisContext *c = redisConnectUnixWithTimeout(sock, tv);
    if (c && !c->err) {
      redisReply *r = redisCommand(c, "PING");
      int ok = r && r->type == REDIS_REPLY_STATUS;
      if (r)
        freeReplyObject(r);
      redisFree(c);
      if (ok)
        return 0;
    } else if (c) {
      redisFree(c);
    }
    sleep_us(20000);
  }
  return -1;
}

int target_start_server(target *t) { return target_start_server_with(t, NULL); }

int target_local_or_start(target *t, int port) {
  if (!port)
    return target_start_server(t);
  memset(t, 0, sizeof *t);
  snprintf(t->host, sizeof t->host, "127.0.0.1");
  t->port = port;
  return 0;
}

int target_start_server_with(target *t, const char *const *extra) {
  memset(t, 0, sizeof *t);
  snprintf(t->host, sizeof t->host, "127.0.0.1");
  snprintf(t->dir, sizeof t->dir, "/tmp/xfetch-bench-XXXXXX");
  if (!mkdtemp(t->dir)) {
    perror("xfetch-bench: mkdtemp");
    return -1;
  }
  for (int attempt = 0; attempt < 5; attempt++) {
    t->port = target_free_port();
    t->pid = spawn(t, extra);
    if (t->pid > 0 && await_ready(t) == 0)
      return 0;
    target_stop_server(t);
  }
  fprintf(stderr, "xfetch-bench: could not start redis-server (see %s/redis.log)\n",
          t->dir);
  return -1;
}

void target_stop_server(target *t) {
  if (t->pid > 0) {
    kill(t->pid, SIGTERM);
    int status;
    waitpid(t->pid, &status, 0);
    t->pid = 0;
  }
  if (t->dir[0]) {
    char path[300];
    snprintf(path, sizeof path, "%s/redis.log", t->dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/dump.rdb", t->dir);
    unlink(path);
    rmdir(t->dir);
  }
}

xf_options target_options(const target *t) {
  xf_options o = XF_OPTIONS_INIT;
  o.host = t->host;
  o.port = t->port;
  o.password = t->password[0] ? t->password : NULL;
  o.db = t->db;
  o.command_timeout_ms = 5000;
  o.entry_format = t->entry_format;
  if (t->tls_ca[0]) { /* rediss://: verified against the CA, for the host name */
    o.tls.enable = 1;
    o.tls.ca_file = t->tls_ca;
  }
  return o;
}

redisContext *target_open(const target *t, int timeout_ms, char *why, size_t cap) {
  struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  redisContext *c = redisConnectWithTimeout(t->host, t->port, tv);
  redisReply *r = NULL;
  const char *step = "connect";
  if (c && !c->err) {
    redisSetTimeout(c, tv); /* hiredis 0.14: the connect timeout does not cover commands */
    if (t->password[0])
      r = redisCommand(c, "AUTH %s", t->password), step = "AUTH";
    if ((!t->password[0] || (r && r->type == REDIS_REPLY_STATUS)) && t->db) {
      if (r)
        freeReplyObject(r);
      r = redisCommand(c, "SELECT %d", t->db), step = "SELECT";
    }
    if ((!t->password[0] && !t->db) || (r && r->type == REDIS_REPLY_STATUS)) {
      if (r)
        freeReplyObject(r);
      return c;
    }
  }
  char e[300];
  snprintf(why, cap, "%s %s:%d: %s", step, t->host, t->port,
           c ? step_redis_error(e, sizeof e, c, r) : "out of memory");
  if (r)
    freeReplyObject(r);
  if (c)
    redisFree(c);
  return NULL;
}

redisContext *target_connect(const target *t, int timeout_ms) {
  char why[400];
  redisContext *c = target_open(t, timeout_ms, why, sizeof why);
  if (!c)
    step_failed_because("a connection (hiredis)", why);
  return c;
}

int target_commandstats(redisContext *c, double *usec, double *calls) {
  *usec = *calls = 0;
  redisReply *r = redisCommand(c, "INFO commandstats");
  if (!r || r->type != REDIS_REPLY_STRING) {
    if (r)
      freeReplyObject(r);
    return -1;
  }
  for (char *line = strtok(r->str, "\r\n"); line; line = strtok(NULL, "\r\n")) {
    char name[64];
    double n, us;
    if (sscanf(line, "cmdstat_%63[^:]:calls=%lf,usec=%lf", name, &n, &us) != 3)
      continue;
    if (strcmp(name, "info") && strcmp(name, "config") && strcmp(name, "ping"))
      *usec += us, *calls += n;
  }
  freeReplyObject(r);
  return 0;
}
