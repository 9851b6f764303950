/* hot_key, cold_start, mass_expiry and hit_overhead (beta_sweep lives in
 * beta_sweep.c). Sizes are the issue's; --quick shrinks them for CI. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "goals.h"
#include "scenarios.h"

static const strategy LOADERS[] = {ST_NAIVE, ST_LOCK, ST_XFETCH_NOLEASE, ST_XFETCH};
#define NLOADERS 4

void spec_init(run_spec *s, const bench_env *e, const char *scenario, strategy st,
               const char *variant) {
  memset(s, 0, sizeof *s);
  s->scenario = scenario;
  s->strat = st;
  s->clients = 32;
  s->nkeys = 1;
  s->ttl_ms = 2000;
  s->loader_ms = 100;
  s->beta = 1.0;
  s->value_len = 64;
  s->entry_format = e->t->entry_format;
  s->think_us = e->cfg->think_us >= 0 ? e->cfg->think_us : 1000;
  snprintf(s->prefix, sizeof s->prefix, "xfb:%x:%s:%s%s%s:", e->cfg->run_id, scenario,
           strategy_name(st), variant ? ":" : "", variant ? variant : "");
  snprintf(s->label, sizeof s->label, "%s%s%s", strategy_name(st), variant ? "/" : "",
           variant ? variant : "");
}

int run_one(const bench_env *e, run_spec *s, int first, int count, int64_t ttl_ms,
            int cold_absent, int all_cold, result *r) {
  memset(r, 0, sizeof *r);
  char step[80];
  snprintf(step, sizeof step, "%s: prefill", s->label);
  if (count > 0 && strat_prefill(e->rc, s, first, count, ttl_ms, step) != 0)
    return -1; /* reported by strat_prefill */
  double wall = workers_run(e->t, s, e->a, s->scenario);
  if (wall < 0)
    return -1; /* reported by workers_run */
  analyze(s, e->a, wall, cold_absent, all_cold, r);
  /* Transient errors (a timeout on a busy machine) are counted in the run's
   * figures (the table's errors line); a run without one good request has no
   * figure at all. */
  snprintf(step, sizeof step, "%s: requests", s->label);
  if (r->requests <= r->errors - r->not_opened)
    return step_meaningless(step, "every figure of this run", "no request succeeded",
                            &e->a->errs);
  step_errors_report(step, &e->a->errs, r->requests + r->not_opened);
  return 0;
}

int sc_hot_key(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick;
  int clients = e->cfg->clients > 0 ? e->cfg->clients : q ? 16 : 32;
  /* The ttl must be long against how early XFetch refreshes (about
   * beta*delta*ln(rate*beta*delta), ~0.8 s at 10k req/s), or a refresh
   * would follow the previous one at once and blur what an expiry is. */
  int64_t ttl = e->cfg->ttl_ms > 0 ? e->cfg->ttl_ms : q ? 1200 : 2000;
  int expiries = q ? 1 : 10;
  double dur = 0.3 + (expiries + 0.6) * (double)ttl / 1000.0;
  out->name = "hot_key";
  snprintf(out->params, sizeof out->params,
           "{\"clients\": %d, \"ttl_ms\": %lld, \"loader_ms\": 100, \"beta\": 1, "
           "\"duration_s\": %.1f, \"think_us\": %d, \"open_loop_rps\": %.0f, "
           "\"raw_get_duration_s\": %.1f}",
           clients, (long long)ttl, dur, e->cfg->think_us >= 0 ? e->cfg->think_us : 1000,
           e->cfg->open_rate, q ? 1.0 : 3.0);
  for (int i = -1; i <= NLOADERS; i++) { /* raw_get, the loaders, xfetch_bg */
    run_spec s;
    spec_init(&s, e, "hot_key",
              i < 0          ? ST_RAW_GET
              : i < NLOADERS ? LOADERS[i]
                             : ST_XFETCH_BG,
              NULL);
    s.clients = clients, s.ttl_ms = ttl, s.duration_s = dur;
    s.open_rate = e->cfg->open_rate;
    int warm = i < 0; /* raw GET: the key never expires, a shorter run suffices */
    if (warm)
      s.duration_s = q ? 1.0 : 3.0;
    if (run_one(e, &s, 0, warm ? 1 : 0, ttl, !warm, 0, &out->results[out->nresults++]))
      return -1;
  }
  return 0;
}

int sc_cold_start(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick;
  int clients = q ? 16 : 32, rounds = q ? 2 : 5;
  out->name = "cold_start";
  snprintf(out->params, sizeof out->params,
           "{\"clients\": %d, \"rounds\": %d, \"round_gap_ms\": 500, \"loader_ms\": 100, "
           "\"ttl_ms\": 2000}",
           clients, rounds);
  for (int i = 0; i < NLOADERS; i++) {
    run_spec s;
    spec_init(&s, e, "cold_start", LOADERS[i], NULL);
    s.clients = clients, s.rounds = rounds, s.round_gap_ms = 500;
    s.nkeys = rounds; /* round r asks for key r: absent, all clients at once */
    if (run_one(e, &s, 0, 0, 0, 1, 1, &out->results[out->nresults++]))
      return -1;
  }
  return 0;
}

/* Open loop, so a mass expiry is not hidden by a closed loop's few clients
 * (each blocked on its own load): arrivals keep coming at the same rate, and
 * up to `clients` loader calls can run at once. */
int sc_mass_expiry(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick;
  int keys = q ? 2000 : 10000, clients = q ? 48 : 256;
  double rate = q ? 1000 : 2000;
  int64_t ttl = q ? 500 : 2000;
  double dur = (double)ttl / 1000.0 * 1.75, jitters[] = {0, 0.3};
  out->name = "mass_expiry";
  snprintf(out->params, sizeof out->params,
           "{\"keys\": %d, \"zipf_s\": 1.0, \"clients\": %d, \"arrivals\": \"poisson\", "
           "\"rps\": %.0f, \"ttl_ms\": %lld, \"loader_ms\": 100, \"duration_s\": %.2f, "
           "\"jitters\": [0, 0.3]}",
           keys, clients, rate, (long long)ttl, dur);
  for (int j = 0; j < 2; j++)
    for (int i = 0; i < NLOADERS; i++) {
      run_spec s;
      spec_init(&s, e, "mass_expiry", LOADERS[i], j ? "jitter" : "nojitter");
      s.clients = clients, s.nkeys = keys, s.zipf_s = 1.0, s.ttl_ms = ttl;
      s.open_rate = rate, s.duration_s = dur, s.jitter = jitters[j];
      if (run_one(e, &s, 0, keys, ttl, 0, 0, &out->results[out->nresults++]))
        return -1;
    }
  return 0;
}

static int resetstat(redisContext *rc) {
  redisReply *r = redisCommand(rc, "CONFIG RESETSTAT");
  int ok = r && r->type == REDIS_REPLY_STATUS;
  if (!ok)
    step_failed_redis("CONFIG RESETSTAT", rc, r);
  if (r)
    freeReplyObject(r);
  return ok ? 0 : -1;
}

int sc_hit_overhead(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick, conns[] = {1, 50};
  double dur = q ? 0.6 : 4.0;
  out->name = "hit_overhead";
  snprintf(out->params, sizeof out->params,
           "{\"connections\": [1, 50], \"duration_s\": %.1f, \"think_us\": 0, "
           "\"ttl_ms\": 3600000, \"value_bytes\": 64}",
           dur);
  static const strategy st[] = {ST_RAW_GET, ST_XFETCH, ST_XFETCH_NOLEASE};
  for (int c = 0; c < 2; c++)
    for (int i = 0; i < 3; i++) {
      run_spec s;
      char variant[16];
      snprintf(variant, sizeof variant, "c%d", conns[c]);
      spec_init(&s, e, "hit_overhead", st[i], variant);
      s.clients = conns[c], s.think_us = 0, s.duration_s = dur, s.ttl_ms = 3600000;
      result *r = &out->results[out->nresults++];
      if (resetstat(e->rc) || run_one(e, &s, 0, 1, s.ttl_ms, 0, 0, r))
        return -1;
      double usec, calls;
      char step[80];
      snprintf(step, sizeof step, "%s: INFO commandstats", s.label);
      char why[300];
      if (target_commandstats(e->rc, &usec, &calls) == 0)
        r->server_usec_per_call = usec / (double)r->requests;
      else /* the run's other figures stand */
        step_meaningless(step, "server us per call",
                         step_redis_error(why, sizeof why, e->rc, NULL), NULL);
    }
  /* Issue 19's ratios, xfetch over raw GET (results: raw, xfetch, nolease
   * per connection count), in the params too so the JSON carries them. */
  const result *r = out->results;
  double p50_1 = r[1].p50_ms / r[0].p50_ms,
         rps_1 = r[1].throughput_rps / r[0].throughput_rps;
  double p50_50 = r[4].p50_ms / r[3].p50_ms,
         rps_50 = r[4].throughput_rps / r[3].throughput_rps;
  goal_set("p50_1conn", p50_1);
  goal_set("throughput_50conn", rps_50);
  size_t at = strlen(out->params) - 1; /* over the closing brace */
  snprintf(out->params + at, sizeof out->params - at,
           ", \"xfetch_over_raw_get_p50_1conn\": %.3g, \"xfetch_over_raw_get_rps_1conn\": "
           "%.3g, \"xfetch_over_raw_get_p50_50conn\": %.3g, "
           "\"xfetch_over_raw_get_rps_50conn\": %.3g}",
           p50_1, rps_1, p50_50, rps_50);
  return 0;
}
