/* xfetch-bench: shared types. One run = one scenario x one strategy, played by
 * several worker processes against one Redis; samples and loader calls go to
 * a MAP_SHARED arena that the parent analyses after the workers exit. */
#ifndef BENCH_H
#define BENCH_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <stdint.h>

#include "decide.h" /* the library's XFetch rule and PCG32 (internal headers) */
#include "pcg.h"
#include "step.h"
#include "xfetch.h"

/* ---- strategies ------------------------------------------------------------ */

typedef enum {
  ST_RAW_GET,        /* plain GET of a key that never expires: the floor */
  ST_NAIVE,          /* GET; on a miss load, SET PX */
  ST_LOCK,           /* GET; on a miss SET NX PX a lock, load; losers poll */
  ST_XFETCH_NOLEASE, /* XFetch early recompute, no lease (bench/pure_xfetch.c) */
  ST_XFETCH,         /* the library: xf_get_or_compute with XF_POLICY_INIT */
  ST_XFETCH_BG,      /* the library's pool with background_refresh (and so the
                        rate-aware early refresh): hot_key only */
  ST_COUNT
} strategy;

const char *strategy_name(strategy s);

/* ---- a run ------------------------------------------------------------------- */

typedef struct run_spec {
  const char *scenario;
  strategy strat;
  int clients;       /* worker processes, one connection each */
  double duration_s; /* closed/open loop: how long each worker runs */
  int think_us;      /* closed loop: pause between requests */
  double open_rate;  /* > 0: open loop, Poisson arrivals, requests/s in total */
  int rounds;        /* > 0: cold-start rounds (one request per client each) */
  int round_gap_ms;  /* time between cold-start rounds */
  int nkeys;         /* keys 0..nkeys-1 */
  double zipf_s;     /* > 0: Zipf(s) key choice; 0: uniform */
  int64_t ttl_ms;    /* logical TTL of a computed value */
  int loader_ms;     /* the simulated computation */
  double beta;       /* XFetch beta (xfetch, xfetch_nolease) */
  double jitter;     /* 0..1: TTL shortened by up to this fraction */
  int value_len;     /* bytes per value */
  int entry_format;  /* the library's entries (target.entry_format): the prefill's */
  char prefix[64];   /* unique key prefix for the run */
  char label[48];    /* "strategy" or "strategy/variant", for messages */
} run_spec;

/* Per-request flags. */
enum {
  RQ_LOADED = 1, /* this request ran the loader itself */
  RQ_WAITED = 2, /* it blocked on another caller's loader */
  RQ_STALE = 4,  /* it was served a value past its logical expiry */
  RQ_ERROR = 8   /* Redis or the library returned an error */
};

typedef struct sample {
  int64_t t_us;    /* intended start (open loop) or start, since the epoch */
  uint32_t lat_us; /* from t_us to the reply */
  uint16_t flags;
  uint16_t pad;
} sample;

typedef struct load_event {
  int64_t start_us, end_us; /* since the epoch */
  uint32_t key;
  int32_t remaining_ms; /* what the caller saw (pure XFetch), else INT32_MIN */
} load_event;

/* The MAP_SHARED arena. Counters are updated with __atomic builtins. */
typedef struct arena {
  int64_t epoch_us; /* CLOCK_MONOTONIC at the start of the run: set once every
                       worker has opened its connection (or failed to) */
  int stop;
  int arrived; /* workers past their connection's open, ready or not */
  int go;      /* epoch_us is set: the workers start */
  uint64_t nsamples, nloads, dropped, inflight, peak_inflight;
  step_errors errs;    /* requests that failed (RQ_ERROR) and workers that could
                          not open their connection, the first described */
  uint64_t not_opened; /* workers that could not open their connection */
  uint64_t handshakes; /* TLS handshakes the workers' clients made (tls scenario) */
  size_t cap_samples, cap_loads;
  sample *samples;
  load_event *loads;
} arena;

arena *arena_create(size_t cap_samples, size_t cap_loads);
void arena_reset(arena *a);
void arena_destroy(arena *a);
void arena_add_sample(arena *a, int64_t t_us, int64_t lat_us, unsigned flags);
/* Returns the slot of a loader call begun now (or -1 when full). */
long arena_load_begin(arena *a, uint32_t key, int32_t remaining_ms);
void arena_load_end(arena *a, long slot);

int64_t now_us(void);
void sleep_us(int64_t us);

/* ---- PCG32: the library's own (src/pcg.h), for key choice, arrivals and the
 * XFetch draw ---------------------------------------------------------------- */

typedef xf__pcg32 pcg;
#define pcg_seed xf__pcg32_seed
#define pcg_next xf__pcg32_next
#define pcg_unit xf__pcg32_unit /* (0, 1] */

/* ---- Redis target -------------------------------------------------------------- */

typedef struct target {
  char host[256];
  int port;
  char password[256];
  int db;
  int pid;       /* throwaway redis-server we started (0 = external) */
  char dir[256]; /* its temp dir */
  char version[32];
  char tls_ca[256]; /* non-empty: the library's connections use TLS, this CA */
  int entry_format; /* the xfetch clients' options.entry_format (--entry-format) */
} target;

int target_parse_url(target *t, const char *url);
int target_start_server(target *t);
/* The redis-server on 127.0.0.1:port (port non-zero: someone else's, left
 * running), or a throwaway one started as target_start_server does. */
int target_local_or_start(target *t, int port);
/* The same with extra redis-server arguments (NULL-terminated; may be NULL). */
int target_start_server_with(target *t, const char *const *extra);
int target_free_port(void);
void target_stop_server(target *t);
/* Connects with connect and command timeouts, AUTH and SELECT; NULL on error
 * (the failed step reported: bench/step.h). */
redisContext *target_connect(const target *t, int timeout_ms);
/* The same, quiet: NULL on error, why into why[cap] (a worker counts it). */
redisContext *target_open(const target *t, int timeout_ms, char *why, size_t cap);
/* The library's options for t (5 s command timeout). */
xf_options target_options(const target *t);
/* Sum of server usec and calls over INFO commandstats, without INFO/CONFIG. */
int target_commandstats(redisContext *c, double *usec, double *calls);

/* xfetch-bench --cluster (bench/cluster.c): prints its own tables; 0 or 1. */
int bench_cluster(int quick);

/* ---- worker processes ----------------------------------------------------------- */

/* Runs spec on `clients` forked workers; blocks until they exit. Returns the
 * wall time of the run in seconds, or < 0 on failure. */
double workers_run(const target *t, const run_spec *spec, arena *a, const char *label);

/* ---- strategies (one per worker) ------------------------------------------------ */

typedef struct strat_ctx strat_ctx;
strat_ctx *strat_open(const target *t, const run_spec *spec, arena *a, int worker);
/* One request for key; sets *flags (RQ_*). Returns 0, or -1 on error (the
 * first error of a run described in the arena's errs). A connection that
 * failed is opened again at the next request, so a transient error costs
 * one request, not the rest of the run. */
int strat_get(strat_ctx *c, uint32_t key, unsigned *flags);
void strat_close(strat_ctx *c);
/* Parent side: writes key as a freshly computed value of the strategy's
 * format (delta = loader_ms, ttl jittered per spec), all keys in one pipeline.
 * Returns 0, or -1 with the failed step reported. */
int strat_prefill(redisContext *rc, const run_spec *spec, int first, int count,
                  int64_t ttl_ms, const char *step);

/* pure XFetch with plain scripts (bench/pure_xfetch.c) */
typedef struct pure_read {
  int present;
  int64_t delta_us, remaining_ms;
} pure_read;
int pure_load_scripts(redisContext *rc);
int pure_read_entry(redisContext *rc, const char *key, size_t keylen, pure_read *out);
int pure_write_entry(redisContext *rc, const char *key, size_t keylen, const char *v,
                     size_t vlen, int64_t delta_us, int64_t ttl_ms);
/* format 2: the entry as the library's format 2 (a string) instead of the hash
 * pure XFetch reads (the xfetch strategy's prefill on --entry-format 2). */
void pure_append_write(redisContext *rc, const char *key, size_t keylen, const char *v,
                       size_t vlen, int64_t delta_us, int64_t ttl_ms, int format);
int pure_decide(pcg *r, double beta, const pure_read *e);

#endif
