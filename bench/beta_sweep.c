/* beta_sweep: pure XFetch (no lease) at several betas, in open loop (Poisson
 * arrivals), against the closed form.
 *
 * Theory. With arrivals at rate lambda on a key whose value has delta d and
 * remaining life r, a request triggers a recompute with probability
 * exp(-r / (beta d)), so triggers form a Poisson process whose cumulative
 * intensity down to r is H(r) = lambda beta d exp(-r / (beta d)). The first
 * trigger lands where H(r0) ~ Exp(1); without a lease every request in the
 * following d (until the new value is written) may trigger too, a Poisson
 * number with mean H(r0 - d) - H(r0) = H(r0) (e^(1/beta) - 1). So the expected
 * loads per expiry are 1 + (e^(1/beta) - 1) = e^(1/beta), and the refresh
 * lands E[r0] = beta d (ln(lambda beta d) + gamma) before expiry (gamma =
 * Euler's constant) — valid when lambda beta d e^(-1/beta) >> 1 (the burst
 * ends before expiry) and H(ttl) << 1 (no trigger right after a write). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "scenarios.h"

#define EULER_GAMMA 0.5772156649015329

int sc_beta_sweep(const bench_env *e, scenario_out *out) {
  int q = e->cfg->quick;
  static const double betas[] = {0.5, 1, 1.5, 2, 4};
  int keys = 4, clients = 128; /* many, so workers busy loading barely thin arrivals */
  double per_key = 1000;       /* requests/s on each key */
  double dur = q ? 1.2 : 10.0, d_s = 0.1;
  out->name = "beta_sweep";
  snprintf(
      out->params, sizeof out->params,
      "{\"strategy\": \"xfetch_nolease\", \"betas\": [0.5, 1, 1.5, 2, 4], \"keys\": %d, "
      "\"rps_per_key\": %.0f, \"clients\": %d, \"ttl_ms\": \"beta d (ln(lambda beta d) + "
      "5)\", "
      "\"loader_ms\": 100, \"duration_s\": %.1f, \"arrivals\": \"poisson\"}",
      keys, per_key, clients, dur);
  for (int i = 0; i < 5; i++) {
    /* A ttl long enough that a fresh value is almost never refreshed at once
     * (H(ttl) = e^-5), short enough for many expiries per run. */
    double b = betas[i], lbd = per_key * b * d_s;
    int64_t ttl = (int64_t)ceil(b * d_s * 1000 * (log(lbd) + 5) / 100) * 100;
    run_spec s;
    char variant[16];
    snprintf(variant, sizeof variant, "b%g", betas[i]);
    spec_init(&s, e, "beta_sweep", ST_XFETCH_NOLEASE, variant);
    s.clients = clients, s.nkeys = keys, s.open_rate = per_key * keys;
    s.ttl_ms = ttl, s.duration_s = dur, s.beta = betas[i];
    /* Stagger the keys' first expiries so their refreshes do not overlap, all
     * a full ttl away so each is reached by a steady arrival stream. */
    char step[80];
    snprintf(step, sizeof step, "%s: prefill", s.label);
    for (int k = 0; k < keys; k++)
      if (strat_prefill(e->rc, &s, k, 1, ttl + ttl * k / keys, step) != 0)
        return -1;
    result *r = &out->results[out->nresults++];
    if (run_one(e, &s, 0, 0, ttl, 0, 0, r))
      return -1;
    r->theory_loads_per_expiry = exp(1 / b);
    r->theory_early_ms = b * d_s * 1000 * (log(lbd) + EULER_GAMMA);
    r->theory_given_r0 = 1 + lbd * r->mean_trigger_p * (exp(1 / b) - 1);
  }
  return 0;
}
