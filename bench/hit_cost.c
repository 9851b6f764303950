/* hit_cost (issue 19): what a cache hit costs against a plain GET of the same
 * value, and what an entry costs in Redis memory against a plain SET.
 *
 *   per value size (16 B, 1 KiB, 100 KiB, 1 MiB; --quick 16 B and 100 KiB),
 *   one connection each, one warm key each:
 *     server us per hit: the time of the commands the client sent, from
 *       SLOWLOG (logging every command during the pass); a script's time
 *       already holds the commands it runs, so those are not added again.
 *       INFO commandstats' sum over every command (inner ones counted twice)
 *       is given next to it, as hit_overhead and batch count;
 *     client us per hit: p50 of each hit's wall time, GET and xfetch
 *       interleaved in blocks so that a load change on the shared machine
 *       falls on both;
 *   per value size (16 B, 100 B, 1 KiB, 100 KiB; --quick 100 B and 100 KiB),
 *   in bench/hit_memory.c:
 *     bytes per entry: INFO memory's used_memory less the client buffers,
 *     before and after writing N entries, on a flushed db: plain SET, SET PX
 *     (a plain key with a TTL, as a cache would write it) and xf_set.
 *
 * The figures go to the JSON's params and the ratios to goals.c. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "goals.h"
#include "hit_cost.h"

#define BLOCK 50 /* client pass: hits of one way before switching to the other */

typedef struct hit_size {
  size_t len;
  const char *label; /* for goal ids */
  int server_hits;   /* server pass, per way */
  int client_hits;   /* client pass, per way */
  int quick;         /* also measured with --quick */
} hit_size;

static const hit_size HIT_SIZES[] = {{16, "16B", 2000, 5000, 1},
                                     {1024, "1KiB", 2000, 5000, 0},
                                     {100 << 10, "100KiB", 1000, 2000, 1},
                                     {1 << 20, "1MiB", 300, 500, 0}};

redisReply *hc_cmd(redisContext *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  return r;
}

/* A command whose answer does not matter (a failure shows in what follows). */
void hc_cmd_free(redisContext *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  redisReply *r = redisvCommand(c, fmt, ap);
  va_end(ap);
  if (r)
    freeReplyObject(r);
}

/* A GET of the plain key; a failure is counted in h->errs. 0 or -1. */
static int get_hit(hc *h) {
  if (!h->g && !(h->g = target_connect(h->e->t, 10000))) {
    step_count_because(&h->errs, "GET", "no connection (it could not be opened again)");
    return -1;
  }
  redisReply *r = hc_cmd(h->g, "GET %s", h->gkey);
  int ok = r && r->type == REDIS_REPLY_STRING && (size_t)r->len == h->len;
  if (!ok)
    step_count_redis(&h->errs, "GET", h->g, r);
  if (r)
    freeReplyObject(r);
  if (!ok && h->g->err) { /* a hiredis context in error cannot be used again */
    redisFree(h->g);
    h->g = NULL; /* opened again by the next request */
  }
  return ok ? 0 : -1;
}

/* A hit on the entry; a failure is counted in h->errs. 0 or -1. */
static int xf_hit(hc *h) {
  xf_value v;
  int rc = xf_get_or_compute(h->x, h->xkey, strlen(h->xkey), &h->p, drv_loader, NULL, &v);
  int bad = drv_count_bad_hit(&h->errs, "xf_get_or_compute", rc, &v, xf_errmsg(h->x));
  if (!bad && v.len != h->len)
    step_count_because(&h->errs, "xf_get_or_compute", "a value of another size"), bad = 1;
  xf_value_free(&v);
  return bad ? -1 : 0;
}

/* ---- server time: commandstats and the slowlog ----------------------------------- */

typedef struct srv_cost {
  double top_us, all_us; /* per hit */
  char cmds[160]; /* the commands per hit, e.g. "evalsha_ro 1.00 (in scripts: ...)" */
} srv_cost;

typedef struct name_count {
  char name[32];
  double n;
} name_count;

static void count_name(name_count *t, int *nt, const char *name, size_t len) {
  char low[32];
  size_t n = len < sizeof low - 1 ? len : sizeof low - 1;
  for (size_t i = 0; i < n; i++)
    low[i] = (char)tolower((unsigned char)name[i]);
  low[n] = '\0';
  for (int i = 0; i < *nt; i++)
    if (!strcmp(t[i].name, low)) {
      t[i].n++;
      return;
    }
  if (*nt < 8)
    snprintf(t[*nt].name, sizeof t[*nt].name, "%s", low), t[(*nt)++].n = 1;
}

static void names(char *buf, size_t cap, const name_count *t, int nt, int hits) {
  size_t at = strlen(buf);
  for (int i = 0; i < nt && at < cap; i++)
    at += (size_t)snprintf(buf + at, cap - at, "%s%s %.2f", i ? ", " : "", t[i].name,
                           t[i].n / hits);
}

/* Runs n hits of one way with every command logged, then reads both sources.
 * SLOWLOG entries are [id, time, us, argv, addr, name]; the commands a
 * script runs have the address "?:0". */
static int server_pass(hc *h, int (*hit)(hc *), const char *what, int n, srv_cost *out) {
  redisReply *r = hc_cmd(h->ctl, "CONFIG SET slowlog-max-len %d", 4 * n + 64);
  int ok = r && r->type == REDIS_REPLY_STATUS;
  if (!ok) {
    step_failed_redis("CONFIG SET slowlog-max-len", h->ctl, r);
    if (r)
      freeReplyObject(r);
    return -1;
  }
  freeReplyObject(r);
  hc_cmd_free(h->ctl, "CONFIG SET slowlog-log-slower-than %s", "0");
  hc_cmd_free(h->ctl, "SLOWLOG RESET");
  hc_cmd_free(h->ctl, "CONFIG RESETSTAT");
  memset(&h->errs, 0, sizeof h->errs);
  for (int i = 0; i < n; i++) /* failures counted: a transient one costs one hit */
    hit(h);
  char step[80];
  snprintf(step, sizeof step, "server pass, %s", what);
  if (h->errs.n >= (uint64_t)n)
    return step_meaningless(step, "server us per request", "no request succeeded",
                            &h->errs);
  step_errors_report(step, &h->errs, (uint64_t)n);
  double usec, calls;
  if (target_commandstats(h->ctl, &usec, &calls) != 0)
    return step_failed_redis("INFO commandstats", h->ctl, NULL);
  hc_cmd_free(h->ctl, "CONFIG SET slowlog-log-slower-than %s", "-1");
  r = hc_cmd(h->ctl, "SLOWLOG GET -1");
  if (!r || r->type != REDIS_REPLY_ARRAY) {
    step_failed_redis("SLOWLOG GET", h->ctl, r);
    if (r)
      freeReplyObject(r);
    return -1;
  }
  name_count top[8], inner[8];
  int ntop = 0, ninner = 0;
  double top_us = 0, ntop_calls = 0;
  for (size_t i = 0; i < r->elements; i++) {
    redisReply *en = r->element[i];
    if (en->type != REDIS_REPLY_ARRAY || en->elements < 6 || en->element[3]->elements == 0)
      continue;
    redisReply *argv0 = en->element[3]->element[0];
    if (!strcmp(en->element[5]->str, CTL_NAME))
      continue; /* CONFIG, INFO of this pass */
    if (!strcmp(en->element[4]->str, "?:0")) {
      count_name(inner, &ninner, argv0->str, argv0->len);
    } else {
      count_name(top, &ntop, argv0->str, argv0->len);
      top_us += (double)en->element[2]->integer, ntop_calls++;
    }
  }
  freeReplyObject(r);
  hc_cmd_free(h->ctl, "SLOWLOG RESET");
  if (ntop_calls < n - (double)h->errs.n) { /* the slowlog dropped entries */
    char why[120];
    snprintf(why, sizeof why,
             "the slowlog holds %.0f commands for %d requests: the sum would be short",
             ntop_calls, n);
    return step_meaningless(step, "server us per request", why, NULL);
  }
  out->top_us = top_us / n;
  out->all_us = usec / n;
  out->cmds[0] = '\0';
  names(out->cmds, sizeof out->cmds, top, ntop, n);
  if (ninner) {
    snprintf(out->cmds + strlen(out->cmds), sizeof out->cmds - strlen(out->cmds),
             " (in scripts: ");
    names(out->cmds, sizeof out->cmds, inner, ninner, n);
    snprintf(out->cmds + strlen(out->cmds), sizeof out->cmds - strlen(out->cmds), ")");
  }
  return 0;
}

/* ---- client time ------------------------------------------------------------------ */

static int client_pass(hc *h, int n, double *get_p50, double *hit_p50, double *get_p99,
                       double *hit_p99) {
  uint32_t *us[2] = {malloc((size_t)n * sizeof(uint32_t)),
                     malloc((size_t)n * sizeof(uint32_t))};
  int (*way[2])(hc *) = {get_hit, xf_hit};
  int rc = us[0] && us[1] ? 0 : step_failed("client pass", XF_ENOMEM, NULL);
  memset(&h->errs, 0, sizeof h->errs);
  for (int done = 0, b = 0; rc == 0 && done < n; done += BLOCK, b++)
    for (int k = 0; k < 2; k++) {
      int w = (b + k) % 2; /* which way goes first alternates */
      for (int i = done; i < done + BLOCK && i < n; i++) {
        int64_t t0 = now_us();
        way[w](h); /* failures counted, their time kept */
        us[w][i] = (uint32_t)(now_us() - t0);
      }
    }
  if (rc == 0 && h->errs.n >= (uint64_t)n)
    rc = step_meaningless("client pass", "client p50 per request", "no request succeeded",
                          &h->errs);
  if (rc == 0) {
    step_errors_report("client pass", &h->errs, 2 * (uint64_t)n);
    *get_p50 = drv_pct(us[0], (size_t)n, 0.5), *get_p99 = drv_pct(us[0], (size_t)n, 0.99);
    *hit_p50 = drv_pct(us[1], (size_t)n, 0.5), *hit_p99 = drv_pct(us[1], (size_t)n, 0.99);
  }
  free(us[0]);
  free(us[1]);
  return rc;
}

/* ---- the scenario ----------------------------------------------------------------- */

static int sizes_pass(hc *h, scenario_out *out, int q) {
  printf("\nhit_cost: a hit (xf_get_or_compute, warm key) vs a GET of the same value, "
         "one connection each\n");
  printf("%-8s %6s %6s | %8s %8s %6s %9s | %8s %8s %6s | %s\n", "value", "srv n", "cli n",
         "GET us", "hit us", "ratio", "(all cmd)", "GET p50", "hit p50", "ratio",
         "the hit's commands");
  size_t at = strlen(out->params);
  at += (size_t)snprintf(out->params + at, sizeof out->params - at, "\"sizes\": [");
  int first = 1;
  for (size_t s = 0; s < sizeof HIT_SIZES / sizeof HIT_SIZES[0]; s++) {
    const hit_size *z = &HIT_SIZES[s];
    if (q && !z->quick)
      continue;
    int ns = q ? 100 : z->server_hits, nc = q ? 200 : z->client_hits;
    char *val = malloc(z->len);
    if (!val)
      return step_failed("sizes", XF_ENOMEM, NULL);
    memset(val, 'x', z->len);
    h->len = z->len;
    snprintf(h->gkey, sizeof h->gkey, "xfb:%x:hc:g:%zu", h->e->cfg->run_id, z->len);
    snprintf(h->xkey, sizeof h->xkey, "xfb:%x:hc:x:%zu", h->e->cfg->run_id, z->len);
    redisReply *r = hc_cmd(h->g, "SET %s %b", h->gkey, val, z->len);
    int ok = r && r->type == REDIS_REPLY_STATUS, rc = XF_OK;
    if (!ok)
      step_failed_redis("SET (the GET's key)", h->g, r);
    if (r)
      freeReplyObject(r);
    if (ok && (rc = xf_set(h->x, h->xkey, strlen(h->xkey), val, z->len, &h->p)) != XF_OK)
      ok = 0, step_failed("xf_set (the hit's key)", rc, xf_errmsg(h->x));
    free(val);
    memset(&h->errs, 0, sizeof h->errs);
    for (int i = 0; ok && i < 20; i++) /* warm-up: script cache, buffers */
      get_hit(h), xf_hit(h);
    if (ok)
      step_errors_report("warm-up", &h->errs, 40);
    srv_cost sg, sx;
    double g50, x50, g99, x99;
    if (!ok || server_pass(h, get_hit, "GET", ns, &sg) ||
        server_pass(h, xf_hit, "hit", ns, &sx) ||
        client_pass(h, nc, &g50, &x50, &g99, &x99))
      return step_failed_because(z->label,
                                 "this size's figures are not measured (the step above)");
    double srv_ratio = sx.top_us / sg.top_us, cli_ratio = x50 / g50;
    char id[32];
    snprintf(id, sizeof id, "hit_server_%s", z->label);
    goal_set(id, srv_ratio);
    if (z->len == 16)
      goal_set("p50_1conn_interleaved", cli_ratio);
    if (z->len >= (100u << 10)) {
      snprintf(id, sizeof id, "hit_client_%s", z->label);
      goal_set(id, cli_ratio);
    }
    printf("%-8s %6d %6d | %8.2f %8.2f %5.2fx %9.2f | %8.0f %8.0f %5.2fx | %s\n", z->label,
           ns, nc, sg.top_us, sx.top_us, srv_ratio, sx.all_us, g50, x50, cli_ratio,
           sx.cmds);
    at += (size_t)snprintf(
        out->params + at, sizeof out->params - at,
        "%s{\"value_bytes\": %zu, \"server_hits\": %d, \"client_hits\": %d, "
        "\"get_server_us\": %.3g, \"hit_server_us\": %.3g, \"hit_server_all_cmds_us\": "
        "%.3g, \"server_ratio\": %.3g, \"get_p50_us\": %.0f, \"hit_p50_us\": %.0f, "
        "\"get_p99_us\": %.0f, \"hit_p99_us\": %.0f, \"client_ratio\": %.3g, "
        "\"hit_commands\": \"%s\"}",
        first ? "" : ", ", z->len, ns, nc, sg.top_us, sx.top_us, sx.all_us, srv_ratio, g50,
        x50, g99, x99, cli_ratio, sx.cmds);
    first = 0;
  }
  snprintf(out->params + at, sizeof out->params - at, "], ");
  printf("  (server: us per request of the commands the client sent, from SLOWLOG; \"all "
         "cmd\": INFO commandstats summed over every command, a script's inner commands "
         "counted twice; client: p50 of the wall time per request, us)\n");
  return 0;
}

/* Puts the server's slowlog settings back as they were (they matter on --redis). */
static void slowlog_settings(redisContext *c, char *thr, char *len, size_t cap,
                             int restore) {
  if (restore) {
    hc_cmd_free(c, "CONFIG SET slowlog-log-slower-than %s", thr);
    hc_cmd_free(c, "CONFIG SET slowlog-max-len %s", len);
    return;
  }
  const char *k[2] = {"slowlog-log-slower-than", "slowlog-max-len"};
  char *dst[2] = {thr, len};
  for (int i = 0; i < 2; i++) {
    redisReply *r = redisCommand(c, "CONFIG GET %s", k[i]);
    snprintf(dst[i], cap, "%s",
             r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? r->element[1]->str
             : i                                                   ? "128"
                                                                   : "10000");
    if (r)
      freeReplyObject(r);
  }
}

int sc_hit_cost(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick, rc = -1;
  hc h = {.e = e};
  h.p = (xf_policy)XF_POLICY_INIT;
  h.p.ttl_ms = 3600000; /* never expires during the run: every read is a hit */
  h.ctl = target_connect(e->t, 10000);
  h.g = target_connect(e->t, 10000);
  h.x = drv_client(e->t);
  char thr[32] = "", len[32] = "";
  out->name = "hit_cost";
  snprintf(out->params, sizeof out->params, "{");
  if (!h.ctl || !h.g || !h.x)
    goto done;
  hc_cmd_free(h.ctl, "CLIENT SETNAME %s", CTL_NAME);
  slowlog_settings(h.ctl, thr, len, sizeof thr, 0);
  rc = sizes_pass(&h, out, q);
  slowlog_settings(h.ctl, thr, len, sizeof thr, 1);
  if (rc == 0)
    rc = hc_hook_pass(&h, out, q);
  if (rc == 0)
    rc = hc_memory_pass(&h, out, q);
done:
  if (rc)
    snprintf(out->params, sizeof out->params, "{\"failed\": true}");
  xf_client_close(h.x);
  if (h.g)
    redisFree(h.g);
  if (h.ctl)
    redisFree(h.ctl);
  return rc;
}
