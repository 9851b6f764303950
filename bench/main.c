/* xfetch-bench: options, the Redis under test, the scenarios in order, then
 * the table, the JSON and the plots. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "drivers.h"
#include "goals.h"
#include "near_bench.h"
#include "scenarios.h"
#include "xfetch.h"

static arena *g_arena;
static volatile sig_atomic_t g_interrupted;

static void on_signal(int sig) {
  (void)sig;
  g_interrupted = 1;
  if (g_arena)
    g_arena->stop = 1;
}

static const struct {
  const char *name;
  int (*fn)(const bench_env *, scenario_out *);
} SCENARIOS[] = {{"hot_key", sc_hot_key},
                 {"cold_start", sc_cold_start},
                 {"mass_expiry", sc_mass_expiry},
                 {"hit_overhead", sc_hit_overhead},
                 {"beta_sweep", sc_beta_sweep},
                 {"batch", sc_batch},
                 {"async", sc_async},
                 {"tls", sc_tls}, /* its own TLS redis-server */
                 {"near", sc_near},
                 {"write_cost", sc_write_cost},
                 {"tags", sc_tags},
                 /* Last: on a throwaway server it flushes the db between its
                  * memory measurements. */
                 {"hit_cost", sc_hit_cost}};
#define NSCENARIOS 12

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: xfetch-bench [options]\n"
      "  --quick             small sizes for a CI smoke run (< 60 s)\n"
      "  --redis URL         use redis://[:password@]host:port[/db] instead of starting\n"
      "                      a throwaway redis-server on a free loopback port\n"
      "  --json FILE         write all results as JSON\n"
      "  --out DIR           PNG plots and their data (default: xfetch-bench-out)\n"
      "  --no-plots          skip gnuplot\n"
      "  --scenarios LIST    comma-separated subset of hot_key,cold_start,mass_expiry,\n"
      "                      hit_overhead,beta_sweep,batch,async,tls,near,\n"
      "                      write_cost,tags,hit_cost\n"
      "                      (default: all)\n"
      "  --clients N         hot_key clients (default 32, quick 16)\n"
      "  --hot-ttl-ms MS     hot_key ttl (default 2000, quick 1200)\n"
      "  --think-us N        closed-loop think time per request (default 1000)\n"
      "  --open-loop RPS     hot_key in open loop: Poisson arrivals at RPS in total\n"
      "  --entry-format N    the entries xfetch writes: 1 a hash, 2 a string (default 2)\n"
      "  --cluster           instead: hit_overhead and hot_key on a throwaway Redis\n"
      "                      Cluster (3 masters + 3 replicas) next to a standalone server\n"
      "  -h, --help\n");
}

static void cpu_model(char *buf, size_t n) {
  snprintf(buf, n, "unknown");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
      snprintf(buf, n, "%s", strchr(line, ':') + 2);
      buf[strcspn(buf, "\n")] = '\0';
      break;
    }
  if (f)
    fclose(f);
}

static void redis_version(redisContext *rc, char *buf, size_t n) {
  snprintf(buf, n, "unknown");
  redisReply *r = redisCommand(rc, "INFO server");
  char *v = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "redis_version:") : NULL;
  if (v)
    snprintf(buf, n, "%.*s", (int)strcspn(v + 14, "\r\n"), v + 14);
  if (r)
    freeReplyObject(r);
}

static void loadavg(char *buf, size_t n) {
  snprintf(buf, n, "unknown");
  FILE *f = fopen("/proc/loadavg", "r");
  if (f && fgets(buf, (int)n, f))
    buf[strcspn(buf, " ")] = '\0';
  if (f)
    fclose(f);
}

static void machine_json(char *buf, size_t n, const target *t, int quick,
                         const char *load0) {
  char cpu[256], date[64], load1[64];
  loadavg(load1, sizeof load1);
  struct utsname u;
  uname(&u);
  cpu_model(cpu, sizeof cpu);
  time_t now = time(NULL);
  strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
  snprintf(
      buf, n,
      "{\"cpu\": \"%s\", \"nproc\": %ld, \"kernel\": \"%s %s\", \"redis_version\": "
      "\"%s\", \"redis\": \"%s\", \"hiredis\": \"%d.%d.%d\", \"xfetch\": \"%d.%d.%d\", "
      "\"date\": \"%s\", \"entry_format\": %d, \"quick\": %s, \"loadavg_1m_start\": %s, "
      "\"loadavg_1m_end\": %s}",
      cpu, sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release, t->version,
      t->pid ? "throwaway redis-server on 127.0.0.1" : "external (--redis)", HIREDIS_MAJOR,
      HIREDIS_MINOR, HIREDIS_PATCH, XF_VERSION_MAJOR, XF_VERSION_MINOR, XF_VERSION_PATCH,
      date, t->entry_format, quick ? "true" : "false", load0, load1);
}

/* On a server we did not start, remove every key this run wrote. */
static void cleanup_keys(redisContext *rc, unsigned run_id) {
  const char *fmt[] = {"xfb:%x:*", "lock:xfb:%x:*"};
  for (int p = 0; p < 2; p++) {
    char pattern[64], cursor[32] = "0";
    snprintf(pattern, sizeof pattern, fmt[p], run_id);
    do {
      redisReply *r = redisCommand(rc, "SCAN %s MATCH %s COUNT 1000", cursor, pattern);
      if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
        if (r)
          freeReplyObject(r);
        return;
      }
      snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
      for (size_t i = 0; i < r->element[1]->elements; i++) {
        redisReply *d = redisCommand(rc, "UNLINK %s", r->element[1]->element[i]->str);
        if (d)
          freeReplyObject(d);
      }
      freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
  }
}

/* mkdir -p */
static int make_dirs(const char *path) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", path);
  for (char *p = buf + 1; *p; p++)
    if (*p == '/') {
      *p = '\0';
      if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return -1;
      *p = '/';
    }
  return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

/* Fail before a run of minutes, not after it, when an output cannot be written. */
static int prepare_outputs(const char *json, const char *out, int plots) {
  if (plots && make_dirs(out) != 0) {
    fprintf(stderr, "xfetch-bench: cannot create %s: %s\n", out, strerror(errno));
    return -1;
  }
  if (!json)
    return 0;
  char dir[1024];
  snprintf(dir, sizeof dir, "%s", json);
  char *slash = strrchr(dir, '/');
  if (slash && slash != dir) {
    *slash = '\0';
    make_dirs(dir);
  }
  FILE *f = fopen(json, "a");
  if (!f) {
    fprintf(stderr, "xfetch-bench: cannot write %s: %s\n", json, strerror(errno));
    return -1;
  }
  fclose(f);
  return 0;
}

static int wanted(const char *list, const char *name) {
  if (!list)
    return 1;
  size_t n = strlen(name);
  for (const char *p = list; (p = strstr(p, name)); p += n)
    if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
      return 1;
  return 0;
}

int main(int argc, char **argv) {
  bench_cfg cfg = {0, 0, -1, 0, 0, 0};
  const char *url = NULL, *json = NULL, *out = "xfetch-bench-out", *only = NULL;
  int plots = 1, cluster = 0, entry_format = XF_ENTRY_STRING;
  static const struct option opts[] = {{"quick", no_argument, 0, 'q'},
                                       {"redis", required_argument, 0, 'r'},
                                       {"json", required_argument, 0, 'j'},
                                       {"out", required_argument, 0, 'o'},
                                       {"no-plots", no_argument, 0, 'P'},
                                       {"scenarios", required_argument, 0, 's'},
                                       {"clients", required_argument, 0, 'c'},
                                       {"think-us", required_argument, 0, 't'},
                                       {"open-loop", required_argument, 0, 'O'},
                                       {"hot-ttl-ms", required_argument, 0, 'T'},
                                       {"cluster", no_argument, 0, 'C'},
                                       {"entry-format", required_argument, 0, 'F'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  for (int ch; (ch = getopt_long(argc, argv, "h", opts, NULL)) != -1;) {
    switch (ch) {
    case 'q':
      cfg.quick = 1;
      break;
    case 'r':
      url = optarg;
      break;
    case 'j':
      json = optarg;
      break;
    case 'o':
      out = optarg;
      break;
    case 'P':
      plots = 0;
      break;
    case 's':
      only = optarg;
      break;
    case 'c':
      cfg.clients = atoi(optarg);
      break;
    case 't':
      cfg.think_us = atoi(optarg);
      break;
    case 'O':
      cfg.open_rate = atof(optarg);
      break;
    case 'T':
      cfg.ttl_ms = atoll(optarg);
      break;
    case 'C':
      cluster = 1;
      break;
    case 'F':
      entry_format = atoi(optarg);
      if (entry_format != 1 && entry_format != 2) {
        usage(stderr);
        return 2;
      }
      break;
    case 'h':
      usage(stdout);
      return 0;
    default:
      usage(stderr);
      return 2;
    }
  }
  if (cluster) {
    signal(SIGPIPE, SIG_IGN);
    return bench_cluster(cfg.quick);
  }
  if (prepare_outputs(json, out, plots) != 0)
    return 1;
  cfg.run_id = (unsigned)(now_us() ^ ((uint64_t)getpid() << 16));
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {.sa_handler = on_signal};
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  target t;
  if (url ? target_parse_url(&t, url) : target_start_server(&t))
    return 1;
  t.entry_format = entry_format;
  int rc = 1;
  redisContext *rcx = target_connect(&t, 5000);
  g_arena = arena_create(16u << 20, 4u << 20);
  if (!g_arena)
    step_failed_because("the shared arena", strerror(errno));
  if (!rcx || !g_arena)
    goto done;
  redis_version(rcx, t.version, sizeof t.version);
  static scenario_out sc[NSCENARIOS];
  int n = 0;
  bench_env env = {&cfg, &t, rcx, g_arena};
  int64_t t0 = now_us();
  char load0[64];
  loadavg(load0, sizeof load0);
  for (int i = 0; i < NSCENARIOS && !g_interrupted; i++) {
    if (!wanted(only, SCENARIOS[i].name))
      continue;
    step_scenario(SCENARIOS[i].name);
    if (SCENARIOS[i].fn(&env, &sc[n]) != 0 || g_interrupted) {
      fprintf(stderr, "xfetch-bench: scenario %s %s\n", SCENARIOS[i].name,
              g_interrupted ? "interrupted" : "failed (its failed step above)");
      goto done;
    }
    n++;
  }
  char load1[64];
  loadavg(load1, sizeof load1);
  printf("xfetch-bench: %d scenario(s) in %.1f s against redis %s (%s:%d), load average "
         "%s -> %s, entry format %d\n",
         n, (double)(now_us() - t0) / 1e6, t.version, t.host, t.port, load0, load1,
         t.entry_format);
  report_table(stdout, sc, n);
  report_summary(stdout, sc, n);
  goals_print(stdout);
  fflush(stdout);
  char machine[1024];
  machine_json(machine, sizeof machine, &t, cfg.quick, load0);
  rc = 0;
  if (json && report_json(json, machine, sc, n) != 0)
    rc = 1;
  if (plots && plot_all(out, sc, n) != 0)
    rc = 1;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < sc[i].nresults; j++)
      result_free(&sc[i].results[j]);
done:
  if (rcx && !t.pid)
    cleanup_keys(rcx, cfg.run_id);
  if (rcx)
    redisFree(rcx);
  arena_destroy(g_arena);
  if (t.pid)
    target_stop_server(&t);
  return rc;
}
