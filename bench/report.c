/* The table on stdout and the JSON file. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "goals.h"
#include "report.h"

static void extra(char *buf, size_t n, const char *scenario, const result *r) {
  buf[0] = '\0';
  if (!strcmp(scenario, "mass_expiry"))
    snprintf(buf, n, "jitter %.1f  peak loads: %d at once, %d per 100ms  (%llu loads)",
             r->jitter, r->peak_concurrent_loads, r->peak_loads_per_100ms,
             (unsigned long long)r->loads);
  else if (!strcmp(scenario, "hit_overhead"))
    snprintf(buf, n, "%2d conn  server %.2f us/call", r->connections,
             r->server_usec_per_call);
  else if (!strcmp(scenario, "tls"))
    snprintf(buf, n, "%s %2d conn%s", r->tls ? "TLS  " : "plain", r->connections,
             r->pinned ? "  pinned: server cpu 0, clients cpu 1" : "");
  else if (!strcmp(scenario, "beta_sweep"))
    snprintf(buf, n,
             "beta %-3g loads/exp theory %5.2f  early ms theory %4.0f measured %4.0f",
             r->beta, r->theory_loads_per_expiry, r->theory_early_ms, r->early_ms);
  else if (r->strat == ST_RAW_GET)
    snprintf(buf, n, "the hit-path floor (no loader)");
  else if (!strcmp(scenario, "cold_start"))
    snprintf(buf, n, "max %d loads in a round; waiters waited %.0f ms (max %.0f)",
             r->cold_max, r->wait_mean_ms, r->wait_max_ms);
  else if (!strcmp(scenario, "hot_key"))
    snprintf(
        buf, n,
        "%d expiries; waits: %.1f%% at cold start, %.0f ms mean after; %.2f loads/ttl, "
        "%llu calls loaded in-request, max %.1f ms after cold start",
        r->expiries, r->cold_waited_pct, r->wait_mean_ms, r->loads_per_ttl,
        (unsigned long long)r->loaded_calls, r->warm_max_ms);
}

void report_table(FILE *f, const scenario_out *sc, int n) {
  for (int i = 0; i < n; i++) {
    if (sc[i].nresults == 0)
      continue; /* batch, async: printed their own table as they ran */
    fprintf(f, "\n%s %s\n", sc[i].name, sc[i].params);
    fprintf(f, "%-15s %8s %4s %5s %7s %6s %7s %7s %7s %7s %8s %8s %8s  %s\n", "strategy",
            "loads/ex", "max", "cold", "waited%", "stale%", "p50ms", "p99ms", "p999ms",
            "maxms", "winp99", "stdyp99", "req/s", "");
    for (int j = 0; j < sc[i].nresults; j++) {
      const result *r = &sc[i].results[j];
      char x[160];
      extra(x, sizeof x, sc[i].name, r);
      fprintf(
          f,
          "%-15s %8.2f %4d %5.1f %7.2f %6.2f %7.3f %7.3f %7.2f %7.1f %8.3f %8.3f %8.0f  "
          "%s\n",
          strategy_name(r->strat), r->loads_per_expiry, r->max_loads_per_expiry,
          r->cold_loads, r->waited_pct, r->stale_pct, r->p50_ms, r->p99_ms, r->p999_ms,
          r->max_ms, r->win_p99_ms, r->steady_p99_ms, r->throughput_rps, x);
      if (r->errors || r->dropped)
        fprintf(f,
                "                ^ %llu errors counted (%llu workers not connected), %llu "
                "samples dropped%s%s\n",
                (unsigned long long)r->errors, (unsigned long long)r->not_opened,
                (unsigned long long)r->dropped, r->first_error[0] ? "; first: " : "",
                r->first_error);
    }
  }
}

static const result *pick(const scenario_out *sc, int n, const char *name, strategy st,
                          int nth) {
  for (int i = 0; i < n; i++)
    for (int j = 0; !strcmp(sc[i].name, name) && j < sc[i].nresults; j++)
      if (sc[i].results[j].strat == st && nth-- == 0)
        return &sc[i].results[j];
  return NULL;
}

/* The figures people ask about, next to what XFetch + a lease should give. */
void report_summary(FILE *f, const scenario_out *sc, int n) {
  const result *x = pick(sc, n, "hot_key", ST_XFETCH, 0),
               *nv = pick(sc, n, "hot_key", ST_NAIVE, 0);
  fprintf(f, "\nsummary\n");
  if (x)
    fprintf(
        f,
        "  hot_key xfetch: %.2f loads/expiry (max %d) over %d expiries, cold start %.0f, "
        "waited %.2f%% after cold start, stale %.2f%%, p99 in expiry windows %.3f ms = "
        "%.2fx steady state (%.3f ms)\n",
        x->loads_per_expiry, x->max_loads_per_expiry, x->expiries, x->cold_loads,
        x->waited_pct, x->stale_pct, x->win_p99_ms,
        x->steady_p99_ms > 0 ? x->win_p99_ms / x->steady_p99_ms : 0, x->steady_p99_ms);
  if (nv)
    fprintf(f, "  hot_key naive: %.2f loads/expiry with %d clients\n", nv->loads_per_expiry,
            nv->connections);
  for (int k = 0; k < 2; k++) {
    const result *g = pick(sc, n, "hit_overhead", ST_RAW_GET, k);
    const result *h = pick(sc, n, "hit_overhead", ST_XFETCH, k);
    if (g && h && g->p50_ms > 0)
      fprintf(f,
              "  hit_overhead %d conn: xfetch/raw_get p50 %.3f/%.3f ms = %.2fx, throughput "
              "%.0f/%.0f req/s = %.2fx, server %.2f/%.2f us per request\n",
              g->connections, h->p50_ms, g->p50_ms, h->p50_ms / g->p50_ms,
              h->throughput_rps, g->throughput_rps, h->throughput_rps / g->throughput_rps,
              h->server_usec_per_call, g->server_usec_per_call);
  }
  for (int k = 0; k < 8; k++) {
    const result *b = pick(sc, n, "beta_sweep", ST_XFETCH_NOLEASE, k);
    if (b)
      fprintf(
          f,
          "  beta %-3g: loads/expiry %.2f (theory e^(1/beta) %.2f; %.2f given the "
          "measured first triggers), refresh %.0f ms before expiry (theory %.0f) over %d "
          "expiries\n",
          b->beta, b->loads_per_expiry, b->theory_loads_per_expiry, b->theory_given_r0,
          b->early_ms, b->theory_early_ms, b->expiries);
  }
}

static void num(FILE *f, const char *k, double v, int last) {
  if (isfinite(v))
    fprintf(f, "\"%s\": %.6g%s", k, v, last ? "" : ", ");
  else
    fprintf(f, "\"%s\": null%s", k, last ? "" : ", ");
}

static void result_json(FILE *f, const result *r) {
  fprintf(f, "        {\"strategy\": \"%s\", ", strategy_name(r->strat));
  num(f, "loads_per_expiry", r->loads_per_expiry, 0);
  num(f, "max_loads_per_expiry", r->max_loads_per_expiry, 0);
  num(f, "expiries", r->expiries, 0);
  num(f, "cold_loads", r->cold_loads, 0);
  num(f, "cold_max_loads", r->cold_max, 0);
  num(f, "waited_pct", r->waited_pct, 0);
  num(f, "wait_mean_ms", r->wait_mean_ms, 0);
  num(f, "wait_max_ms", r->wait_max_ms, 0);
  num(f, "cold_waited_pct", r->cold_waited_pct, 0);
  num(f, "loaded_pct", r->loaded_pct, 0);
  num(f, "loaded_calls", (double)r->loaded_calls, 0);
  num(f, "loads_per_ttl", r->loads_per_ttl, 0);
  num(f, "warm_max_ms", r->warm_max_ms, 0);
  num(f, "stale_pct", r->stale_pct, 0);
  num(f, "mean_ms", r->mean_ms, 0);
  num(f, "p50_ms", r->p50_ms, 0);
  num(f, "p99_ms", r->p99_ms, 0);
  num(f, "p999_ms", r->p999_ms, 0);
  num(f, "max_ms", r->max_ms, 0);
  num(f, "window_requests", (double)r->win_requests, 0);
  num(f, "window_p50_ms", r->win_p50_ms, 0);
  num(f, "window_p99_ms", r->win_p99_ms, 0);
  num(f, "window_p999_ms", r->win_p999_ms, 0);
  num(f, "window_max_ms", r->win_max_ms, 0);
  num(f, "steady_p50_ms", r->steady_p50_ms, 0);
  num(f, "steady_p99_ms", r->steady_p99_ms, 0);
  num(f, "throughput_rps", r->throughput_rps, 0);
  num(f, "requests", (double)r->requests, 0);
  num(f, "errors", (double)r->errors, 0);
  num(f, "loads", (double)r->loads, 0);
  num(f, "peak_concurrent_loads", r->peak_concurrent_loads, 0);
  num(f, "peak_loads_per_100ms", r->peak_loads_per_100ms, 0);
  num(f, "connections", r->connections, 0);
  num(f, "beta", r->beta, 0);
  num(f, "jitter", r->jitter, 0);
  num(f, "early_ms", r->early_ms, 0);
  num(f, "server_usec_per_call", r->server_usec_per_call, 0);
  num(f, "tls", r->tls, 0);
  num(f, "pinned", r->pinned, 0);
  num(f, "theory_loads_per_expiry", r->theory_loads_per_expiry, 0);
  num(f, "theory_early_ms", r->theory_early_ms, 0);
  num(f, "theory_given_first_trigger", r->theory_given_r0, 0);
  fprintf(f, "\"loads_per_expiry_hist\": {");
  int first = 1;
  for (int k = 1; k <= HIST_MAX; k++)
    if (r->hist[k]) {
      fprintf(f, "%s\"%d%s\": %d", first ? "" : ", ", k, k == HIST_MAX ? "+" : "",
              r->hist[k]);
      first = 0;
    }
  fprintf(f, "}}");
}

int report_json(const char *path, const char *machine, const scenario_out *sc, int n) {
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    return -1;
  }
  fprintf(f, "{\n  \"machine\": %s,\n  \"scenarios\": [\n", machine);
  for (int i = 0; i < n; i++) {
    fprintf(f, "    {\"name\": \"%s\", \"params\": %s, \"results\": [\n", sc[i].name,
            sc[i].params);
    for (int j = 0; j < sc[i].nresults; j++) {
      result_json(f, &sc[i].results[j]);
      fprintf(f, "%s\n", j + 1 < sc[i].nresults ? "," : "");
    }
    fprintf(f, "    ]}%s\n", i + 1 < n ? "," : "");
  }
  fprintf(f, "  ],\n  ");
  goals_json(f);
  fprintf(f, "\n}\n");
  return fclose(f) == 0 ? 0 : -1;
}
