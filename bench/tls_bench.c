/* The tls scenario (issue 23): what a hit costs over TLS. A throwaway
 * redis-server listening on a plain and a TLS port at once (certificates by
 * the openssl CLI, tests/tls_certs.c), one warm key, and three ways taking
 * turns so that a drift of the shared machine falls on all: a raw GET over
 * TLS (on the library's own connection: bench/strategies.c), the xfetch hit
 * over TLS and the hit over plain TCP, at 1 connection (p50) and 50
 * (throughput). The goals are hit / raw GET, both over TLS (the server's TLS
 * work is the same for every client); TLS / plain is kept for context. The
 * ratios and the handshakes per connection (xf__tls_handshakes, summed by the
 * workers) go to the params, the goals and the table, with the CPU time a hit
 * costs the server (INFO cpu) and the clients (the workers' rusage), plain and
 * TLS: CPU time, unlike latency, hardly moves with the machine's load. Then,
 * not in --quick, the same again with the server pinned to CPU 0 and the
 * clients to CPU 1 (a second, labelled line: what is protocol cost and what is
 * two processes sharing cores; on a machine shared with other work a pinned
 * core may be busier). Needs redis-server built with TLS and the openssl CLI:
 * skipped (no results, "skipped" in params) otherwise. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "goals.h"
#include "scenarios.h"
#include "tls_certs.h"

/* A TLS redis-server (also on a plain port) presenting certs/server.crt. */
static int start(target *t, const char *certs) {
  char crt[300], key[300], ca[300], port[16];
  snprintf(crt, sizeof crt, "%s/server.crt", certs);
  snprintf(key, sizeof key, "%s/server.key", certs);
  snprintf(ca, sizeof ca, "%s/ca.crt", certs);
  for (int attempt = 0; attempt < 5; attempt++) {
    int tls_port = target_free_port();
    snprintf(port, sizeof port, "%d", tls_port);
    const char *extra[] = {"--tls-port",
                           port,
                           "--tls-cert-file",
                           crt,
                           "--tls-key-file",
                           key,
                           "--tls-ca-cert-file",
                           ca,
                           "--tls-auth-clients",
                           "no",
                           NULL};
    if (target_start_server_with(t, extra) == 0)
      return tls_port;
  }
  return -1;
}

/* The server's CPU seconds so far (INFO cpu: user + sys), or -1. */
static double server_cpu_s(redisContext *rc) {
  redisReply *r = redisCommand(rc, "INFO cpu");
  double s = -1;
  const char *u =
      r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "used_cpu_user:") : NULL;
  const char *y =
      r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "used_cpu_sys:") : NULL;
  if (u && y)
    s = atof(u + strlen("used_cpu_user:")) + atof(y + strlen("used_cpu_sys:"));
  if (r)
    freeReplyObject(r);
  return s;
}

/* The reaped workers' CPU seconds so far (user + sys). */
static double workers_cpu_s(void) {
  struct rusage u;
  getrusage(RUSAGE_CHILDREN, &u);
  return (double)u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + (double)u.ru_stime.tv_sec +
         u.ru_stime.tv_usec / 1e6;
}

/* CPU microseconds per hit of each run: the server's, the clients'. */
typedef struct cpu_cost {
  double server_us[8], client_us[8];
} cpu_cost;

/* Pins the server to CPU 0 and this process (and so the workers it forks)
 * to CPU 1, keeping the masks to put back; 0, or -1 (fewer than 2 CPUs, or
 * refused: nothing pinned). */
static int pin(int server_pid, cpu_set_t *mine, cpu_set_t *server) {
  cpu_set_t one;
  if (sched_getaffinity(0, sizeof *mine, mine) != 0 ||
      sched_getaffinity(server_pid, sizeof *server, server) != 0 || CPU_COUNT(mine) < 2 ||
      !CPU_ISSET(0, mine) || !CPU_ISSET(1, mine))
    return -1;
  CPU_ZERO(&one);
  CPU_SET(0, &one);
  if (sched_setaffinity(server_pid, sizeof one, &one) != 0)
    return -1;
  CPU_ZERO(&one);
  CPU_SET(1, &one);
  if (sched_setaffinity(0, sizeof one, &one) != 0) {
    sched_setaffinity(server_pid, sizeof *server, server);
    return -1;
  }
  return 0;
}

static void unpin(int server_pid, const cpu_set_t *mine, const cpu_set_t *server) {
  sched_setaffinity(0, sizeof *mine, mine);
  sched_setaffinity(server_pid, sizeof *server, server);
}

/* The ways, in turn within each round: a raw GET over TLS (on an xf_client's
 * own connection: the same TLS stream as the hit, bench/strategies.c), the
 * xfetch hit over TLS (the goals: hit / raw GET, both over TLS), and the hit
 * over plain TCP (what TLS itself costs, for context). */
enum { W_RAW_TLS, W_HIT_TLS, W_HIT_PLAIN, NWAYS };

/* rounds x NWAYS runs into r[0..] (the ways in turn). */
static int runs(const bench_env *e, const target *plain, const target *tls, int conns,
                double dur, int rounds, result *r, uint64_t *handshakes, cpu_cost *cpu,
                int pinned) {
  for (int i = 0; i < NWAYS * rounds; i++) {
    int way = i % NWAYS, is_tls = way != W_HIT_PLAIN;
    bench_env env = *e;
    env.t = is_tls ? tls : plain;
    run_spec s;
    char variant[24];
    snprintf(variant, sizeof variant, "%s%d%s", is_tls ? "tls" : "plain", conns,
             pinned ? "pinned" : "");
    spec_init(&s, e, "tls", way == W_RAW_TLS ? ST_RAW_GET : ST_XFETCH, variant);
    s.clients = conns, s.think_us = 0, s.duration_s = dur, s.ttl_ms = 3600000;
    double s0 = server_cpu_s(e->rc), c0 = workers_cpu_s();
    if (run_one(&env, &s, 0, 1, s.ttl_ms, 0, 0, &r[i]))
      return -1;
    double hits = r[i].requests ? (double)r[i].requests : 1;
    cpu->server_us[i] = (server_cpu_s(e->rc) - s0) / hits * 1e6;
    cpu->client_us[i] = (workers_cpu_s() - c0) / hits * 1e6;
    r[i].tls = is_tls;
    r[i].pinned = pinned;
    if (is_tls && handshakes)
      *handshakes += __atomic_load_n(&e->a->handshakes, __ATOMIC_RELAXED);
  }
  return 0;
}

/* The mean of one way's values (v[way], v[way + NWAYS], ...) over n. */
static double mean_every_other(const double *v, int n, int way) {
  double sum = 0;
  for (int i = way; i < n; i += NWAYS)
    sum += v[i];
  return sum / (n / NWAYS);
}

/* `"server_cpu_us_per_hit": {...}, "client_cpu_us_per_hit": {...}`: the hit's,
 * plain and TLS, at 1 and 50 connections, into buf. */
static void cpu_json(char *buf, size_t cap, const cpu_cost *c1, const cpu_cost *c50,
                     int n) {
  const char *side[2] = {"server", "client"};
  size_t at = 0;
  for (int i = 0; i < 2; i++) {
    const double *v1 = i ? c1->client_us : c1->server_us;
    const double *v50 = i ? c50->client_us : c50->server_us;
    at += (size_t)snprintf(
        buf + at, cap - at,
        "%s\"%s_cpu_us_per_hit\": {\"plain1\": %.2f, \"tls1\": %.2f, \"plain50\": %.2f, "
        "\"tls50\": %.2f}",
        i ? ", " : "", side[i], mean_every_other(v1, n, W_HIT_PLAIN),
        mean_every_other(v1, n, W_HIT_TLS), mean_every_other(v50, n, W_HIT_PLAIN),
        mean_every_other(v50, n, W_HIT_TLS));
  }
}

/* The mean p50 (p50 = 1) or throughput of one way's results over n. */
static double mean_of(const result *r, int n, int way, int p50) {
  double sum = 0;
  for (int i = way; i < n; i += NWAYS)
    sum += p50 ? r[i].p50_ms : r[i].throughput_rps;
  return sum / (n / NWAYS);
}

int sc_tls(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick, rounds = q ? 1 : 2;
  double dur = q ? 0.5 : 2.0;
  out->name = "tls";
  char certs[64] = "";
  target plain;
  int tls_port = -1;
  if (xft_tls_make_certs(certs, sizeof certs) == 0)
    tls_port = start(&plain, certs);
  if (tls_port < 0) {
    fprintf(stderr, "xfetch-bench: tls skipped (needs the openssl CLI and a redis-server "
                    "built with TLS)\n");
    snprintf(out->params, sizeof out->params, "{\"skipped\": \"no TLS redis-server\"}");
    if (certs[0])
      xft_tls_remove_certs(certs);
    return 0;
  }
  target tls = plain;
  tls.port = tls_port;
  snprintf(tls.tls_ca, sizeof tls.tls_ca, "%s/ca.crt", certs);
  redisContext *rc = target_connect(&plain, 5000);
  int rv = -1;
  uint64_t hs1 = 0, hs50 = 0;
  cpu_cost cpu1, cpu50, pcpu1, pcpu50;
  memset(&cpu1, 0, sizeof cpu1);
  memset(&cpu50, 0, sizeof cpu50);
  memset(&pcpu1, 0, sizeof pcpu1);
  memset(&pcpu50, 0, sizeof pcpu50);
  bench_env env = *e;
  env.rc = rc; /* prefill on this server, and its INFO cpu */
  int n = NWAYS * rounds;
  if (rc && runs(&env, &plain, &tls, 1, dur, rounds, out->results, &hs1, &cpu1, 0) == 0 &&
      runs(&env, &plain, &tls, 50, dur, rounds, out->results + n, &hs50, &cpu50, 0) == 0)
    rv = 0;
  /* The second line: the same runs pinned (their handshakes not counted);
   * not in --quick (on a shared machine it measures the scheduler). */
  cpu_set_t mine, server;
  int pinned = rv == 0 && !q && pin(plain.pid, &mine, &server) == 0;
  if (pinned) {
    if (runs(&env, &plain, &tls, 1, dur, rounds, out->results + 2 * n, NULL, &pcpu1, 1) !=
            0 ||
        runs(&env, &plain, &tls, 50, dur, rounds, out->results + 3 * n, NULL, &pcpu50, 1) !=
            0)
      rv = -1;
    unpin(plain.pid, &mine, &server);
  }
  if (rc)
    redisFree(rc);
  target_stop_server(&plain);
  xft_tls_remove_certs(certs);
  if (rv)
    return -1;
  out->nresults = (pinned ? 4 : 2) * n;
  const result *r1 = out->results, *r50 = out->results + n;
  /* the goals: the hit against a raw GET, both over TLS */
  double p50 = mean_of(r1, n, W_HIT_TLS, 1) / mean_of(r1, n, W_RAW_TLS, 1);
  double rps1 = mean_of(r1, n, W_HIT_TLS, 0) / mean_of(r1, n, W_RAW_TLS, 0);
  double p50_50 = mean_of(r50, n, W_HIT_TLS, 1) / mean_of(r50, n, W_RAW_TLS, 1);
  double rps = mean_of(r50, n, W_HIT_TLS, 0) / mean_of(r50, n, W_RAW_TLS, 0);
  /* context: the hit over TLS against the hit over plain TCP */
  double tp50 = mean_of(r1, n, W_HIT_TLS, 1) / mean_of(r1, n, W_HIT_PLAIN, 1);
  double trps1 = mean_of(r1, n, W_HIT_TLS, 0) / mean_of(r1, n, W_HIT_PLAIN, 0);
  double tp50_50 = mean_of(r50, n, W_HIT_TLS, 1) / mean_of(r50, n, W_HIT_PLAIN, 1);
  double trps = mean_of(r50, n, W_HIT_TLS, 0) / mean_of(r50, n, W_HIT_PLAIN, 0);
  /* every TLS run's workers (2 ways): 1 connection each, rounds runs of 1 and of 50 */
  double per_conn = (double)(hs1 + hs50) / (double)(2 * rounds * (1 + 50));
  goal_set("tls_p50_1conn", p50);
  goal_set("tls_throughput_50conn", rps);
  goal_set("tls_handshakes_per_conn", per_conn);
  char cpu_all[300];
  cpu_json(cpu_all, sizeof cpu_all, &cpu1, &cpu50, n);
  char pinned_json[512] = "\"not run (--quick, fewer than 2 CPUs, or not allowed)\"";
  if (pinned) {
    const result *q1 = out->results + 2 * n, *q50 = out->results + 3 * n;
    char cpu[300];
    cpu_json(cpu, sizeof cpu, &pcpu1, &pcpu50, n);
    snprintf(pinned_json, sizeof pinned_json,
             "{\"xfetch_over_raw_get_tls_p50_1conn\": %.3g, "
             "\"xfetch_over_raw_get_tls_rps_50conn\": %.3g, %s}",
             mean_of(q1, n, W_HIT_TLS, 1) / mean_of(q1, n, W_RAW_TLS, 1),
             mean_of(q50, n, W_HIT_TLS, 0) / mean_of(q50, n, W_RAW_TLS, 0), cpu);
  }
  snprintf(out->params, sizeof out->params,
           "{\"connections\": [1, 50], \"duration_s\": %.1f, \"rounds\": %d, "
           "\"think_us\": 0, \"value_bytes\": 64, \"verify\": true, "
           "\"xfetch_over_raw_get_tls_p50_1conn\": %.3g, "
           "\"xfetch_over_raw_get_tls_rps_1conn\": %.3g, "
           "\"xfetch_over_raw_get_tls_p50_50conn\": %.3g, "
           "\"xfetch_over_raw_get_tls_rps_50conn\": %.3g, "
           "\"tls_over_plain_p50_1conn\": %.3g, \"tls_over_plain_rps_1conn\": %.3g, "
           "\"tls_over_plain_p50_50conn\": %.3g, \"tls_over_plain_rps_50conn\": %.3g, "
           "\"handshakes_per_connection\": %.3g, %s, \"pinned\": %s}",
           dur, rounds, p50, rps1, p50_50, rps, tp50, trps1, tp50_50, trps, per_conn,
           cpu_all, pinned_json);
  return 0;
}
