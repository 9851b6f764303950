/* After a run: group loader calls into expiry episodes, find the expiry
 * windows, and turn samples into percentiles and percentages.
 *
 * An episode is every loader call for one key that starts before the
 * episode's first call has finished (+ 20 ms for its write and scheduling):
 * the calls that answer the same expiry (or the same early refresh) all
 * started before the first of them wrote a new value; a call that starts
 * after that answers the next expiry. A key's first episode is its cold start when it
 * started absent. An expiry window is an episode's [first start - 10 ms, last end + 10 ms];
 * a request is "in a window" when it started inside one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report.h"

#define WINDOW_MARGIN_US 10000
#define SAME_EPISODE_US 20000

typedef struct span {
  int64_t lo, hi;
} span;

typedef struct spans {
  span *v;
  size_t n;
} spans;

static int cmp_load(const void *x, const void *y) {
  const load_event *a = x, *b = y;
  if (a->key != b->key)
    return a->key < b->key ? -1 : 1;
  return (a->start_us > b->start_us) - (a->start_us < b->start_us);
}

static int cmp_span(const void *x, const void *y) {
  const span *a = x, *b = y;
  return (a->lo > b->lo) - (a->lo < b->lo);
}

static int cmp_i64(const void *x, const void *y) {
  int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
  return (a > b) - (a < b);
}

static int cmp_u32(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return (a > b) - (a < b);
}

static void merge(spans *s) {
  if (!s->n)
    return;
  qsort(s->v, s->n, sizeof *s->v, cmp_span);
  size_t w = 0;
  for (size_t i = 1; i < s->n; i++) {
    if (s->v[i].lo <= s->v[w].hi) {
      if (s->v[i].hi > s->v[w].hi)
        s->v[w].hi = s->v[i].hi;
    } else {
      s->v[++w] = s->v[i];
    }
  }
  s->n = w + 1;
}

static int inside(const spans *s, int64_t t) {
  size_t lo = 0, hi = s->n;
  while (lo < hi) { /* first span with lo > t */
    size_t mid = (lo + hi) / 2;
    if (s->v[mid].lo <= t)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo > 0 && t <= s->v[lo - 1].hi;
}

static double pct(const uint32_t *v, size_t n, double p) {
  if (!n)
    return 0;
  size_t i = (size_t)ceil(p * (double)n);
  i = i == 0 ? 0 : i - 1;
  return v[i < n ? i : n - 1] / 1000.0;
}

/* Episodes -> loads per expiry, cold loads, earliness, windows. */
static void episodes(const run_spec *s, load_event *ev, size_t n, int cold_absent,
                     result *r, spans *win, spans *cold) {
  double early_sum = 0;
  int early_n = 0, cold_sum = 0;
  long total = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i + 1;
    int64_t first_end = ev[i].end_us ? ev[i].end_us : ev[i].start_us, end = first_end;
    while (j < n && ev[j].key == ev[i].key &&
           ev[j].start_us <= first_end + SAME_EPISODE_US) {
      if (ev[j].end_us > end)
        end = ev[j].end_us;
      j++;
    }
    int count = (int)(j - i);
    int is_cold = cold_absent && (i == 0 || ev[i - 1].key != ev[i].key);
    span sp = {ev[i].start_us - WINDOW_MARGIN_US, end + WINDOW_MARGIN_US};
    if (is_cold) {
      cold->v[cold->n++] = sp;
      cold_sum += count;
      r->cold_max = count > r->cold_max ? count : r->cold_max;
      r->cold_episodes++;
    } else {
      win->v[win->n++] = sp;
      total += count;
      r->expiries++;
      r->max_loads_per_expiry =
          count > r->max_loads_per_expiry ? count : r->max_loads_per_expiry;
      r->hist[count < HIST_MAX ? count : HIST_MAX]++;
      if (ev[i].remaining_ms != INT32_MIN) {
        early_sum += ev[i].remaining_ms, early_n++;
        if (s->beta > 0)
          r->mean_trigger_p += exp(-ev[i].remaining_ms / (s->beta * s->loader_ms));
      }
    }
    i = j;
  }
  r->loads_per_expiry = r->expiries ? (double)total / r->expiries : 0;
  r->cold_loads = r->cold_episodes ? (double)cold_sum / r->cold_episodes : 0;
  r->early_ms = early_n ? early_sum / early_n : NAN;
  r->mean_trigger_p = early_n ? r->mean_trigger_p / early_n : NAN;
  merge(win);
  merge(cold);
}

/* Peak concurrent loader calls (sweep) and calls started per bucket. */
static void concurrency(const run_spec *s, const load_event *ev, size_t n, result *r) {
  double dur = s->rounds > 0 ? s->rounds * s->round_gap_ms / 1000.0 : s->duration_s;
  r->nbuckets = (int)(dur * 1000 / BUCKET_MS) + 1;
  r->buckets = calloc((size_t)r->nbuckets, sizeof(int));
  int64_t *t = malloc(sizeof(int64_t) * 2 * (n ? n : 1));
  for (size_t i = 0; i < n; i++) {
    t[2 * i] = ev[i].start_us * 2 + 1; /* odd: a start; ends sort first at a tie */
    t[2 * i + 1] = (ev[i].end_us ? ev[i].end_us : ev[i].start_us) * 2;
    int b = (int)(ev[i].start_us / (BUCKET_MS * 1000));
    if (b >= 0 && b < r->nbuckets && ++r->buckets[b] > r->peak_loads_per_100ms)
      r->peak_loads_per_100ms = r->buckets[b];
  }
  qsort(t, 2 * n, sizeof *t, cmp_i64);
  int cur = 0;
  for (size_t i = 0; i < 2 * n; i++) {
    cur += (t[i] & 1) ? 1 : -1;
    r->peak_concurrent_loads =
        cur > r->peak_concurrent_loads ? cur : r->peak_concurrent_loads;
  }
  free(t);
}

static void latencies(const run_spec *s, const arena *a, int exclude_cold, const spans *win,
                      const spans *cold, result *r) {
  size_t n = a->nsamples < a->cap_samples ? a->nsamples : a->cap_samples;
  uint32_t *all = malloc(sizeof(uint32_t) * (n + 1)),
           *in = malloc(sizeof(uint32_t) * (n + 1)),
           *steady = malloc(sizeof(uint32_t) * (n + 1));
  size_t nin = 0, nst = 0, counted = 0, waited = 0, loaded = 0, stale = 0, cwait = 0,
         ncold = 0;
  double wait_sum = 0, lat_sum = 0;
  for (size_t i = 0; i < n; i++) {
    const sample *x = &a->samples[i];
    all[i] = x->lat_us;
    lat_sum += x->lat_us;
    int c = inside(cold, x->t_us), w = inside(win, x->t_us);
    if (w)
      in[nin++] = x->lat_us;
    else if (!c)
      steady[nst++] = x->lat_us;
    if (c && exclude_cold) {
      ncold++;
      cwait += (x->flags & RQ_WAITED) != 0;
      continue;
    }
    counted++;
    r->warm_max_ms =
        x->lat_us / 1000.0 > r->warm_max_ms ? x->lat_us / 1000.0 : r->warm_max_ms;
    loaded += (x->flags & RQ_LOADED) != 0;
    stale += (x->flags & RQ_STALE) != 0;
    if (x->flags & RQ_WAITED) {
      waited++;
      wait_sum += x->lat_us / 1000.0;
      r->wait_max_ms =
          x->lat_us / 1000.0 > r->wait_max_ms ? x->lat_us / 1000.0 : r->wait_max_ms;
    }
  }
  (void)s;
  qsort(all, n, sizeof *all, cmp_u32);
  qsort(in, nin, sizeof *in, cmp_u32);
  qsort(steady, nst, sizeof *steady, cmp_u32);
  r->requests = n;
  r->mean_ms = n ? lat_sum / (double)n / 1000.0 : 0;
  r->p50_ms = pct(all, n, .5), r->p99_ms = pct(all, n, .99);
  r->p999_ms = pct(all, n, .999), r->max_ms = n ? all[n - 1] / 1000.0 : 0;
  r->win_requests = nin;
  r->win_p50_ms = pct(in, nin, .5), r->win_p99_ms = pct(in, nin, .99);
  r->win_p999_ms = pct(in, nin, .999), r->win_max_ms = nin ? in[nin - 1] / 1000.0 : 0;
  r->steady_p50_ms = pct(steady, nst, .5), r->steady_p99_ms = pct(steady, nst, .99);
  double d = counted ? 100.0 / (double)counted : 0;
  r->waited_pct = (double)waited * d, r->loaded_pct = (double)loaded * d;
  r->loaded_calls = loaded;
  r->stale_pct = (double)stale * d;
  r->wait_mean_ms = waited ? wait_sum / (double)waited : 0;
  r->cold_waited_pct = ncold ? 100.0 * (double)cwait / (double)ncold : 0;
  for (int i = 0; i < CDF_POINTS; i++) { /* log-spaced up to p99.99 */
    double p = 1 - pow(10, -4.0 * i / (CDF_POINTS - 1));
    r->cdf_pct[i] = p * 100, r->cdf_ms[i] = pct(all, n, p < 1e-9 ? 1e-9 : p);
  }
  free(all), free(in), free(steady);
}

/* XFETCH_BENCH_DUMP=dir: every run's loader calls as text, for digging. */
static void dump_loads(const run_spec *s, const load_event *ev, size_t n) {
  const char *dir = getenv("XFETCH_BENCH_DUMP");
  if (!dir)
    return;
  char path[512];
  snprintf(path, sizeof path, "%s/%sloads.txt", dir, s->prefix);
  for (char *p = path + strlen(dir) + 1; *p; p++)
    *p = *p == ':' ? '_' : *p;
  FILE *f = fopen(path, "w");
  for (size_t i = 0; f && i < n; i++)
    fprintf(f, "%u %.3f %.3f %d\n", ev[i].key, ev[i].start_us / 1e3, ev[i].end_us / 1e3,
            ev[i].remaining_ms);
  if (f)
    fclose(f);
}

/* XFETCH_BENCH_DUMP=dir: every run's calls of 50 ms or more (start, latency,
 * flags: 1 loaded, 2 waited, 4 stale, 8 error), for digging. */
static void dump_slow(const run_spec *s, const arena *a) {
  const char *dir = getenv("XFETCH_BENCH_DUMP");
  if (!dir)
    return;
  char path[512];
  snprintf(path, sizeof path, "%s/%sslow.txt", dir, s->prefix);
  for (char *p = path + strlen(dir) + 1; *p; p++)
    *p = *p == ':' ? '_' : *p;
  FILE *f = fopen(path, "w");
  size_t n = a->nsamples < a->cap_samples ? a->nsamples : a->cap_samples;
  for (size_t i = 0; f && i < n; i++)
    if (a->samples[i].lat_us >= 50000)
      fprintf(f, "%.3f %.3f %u\n", a->samples[i].t_us / 1e3, a->samples[i].lat_us / 1e3,
              (unsigned)a->samples[i].flags);
  if (f)
    fclose(f);
}

void analyze(const run_spec *s, const arena *a, double wall_s, int cold_absent,
             int all_cold, result *r) {
  (void)wall_s;
  r->strat = s->strat;
  r->beta = s->beta, r->jitter = s->jitter, r->connections = s->clients;
  size_t n = a->nloads < a->cap_loads ? a->nloads : a->cap_loads;
  load_event *ev = malloc(sizeof *ev * (n + 1));
  memcpy(ev, a->loads, sizeof *ev * n);
  qsort(ev, n, sizeof *ev, cmp_load);
  dump_loads(s, ev, n);
  dump_slow(s, a);
  spans win = {malloc(sizeof(span) * (n + 1)), 0},
        cold = {malloc(sizeof(span) * (n + 1)), 0};
  episodes(s, ev, n, cold_absent, r, &win, &cold);
  concurrency(s, ev, n, r);
  latencies(s, a, !all_cold, &win, &cold, r);
  r->loads = a->nloads, r->dropped = a->dropped, r->not_opened = a->not_opened;
  r->errors = __atomic_load_n(&a->errs.n, __ATOMIC_ACQUIRE);
  if (__atomic_load_n(&a->errs.described, __ATOMIC_ACQUIRE))
    snprintf(r->first_error, sizeof r->first_error, "%s", a->errs.first);
  double dur = s->rounds > 0 ? wall_s : s->duration_s;
  r->throughput_rps = dur > 0 ? (double)r->requests / dur : 0;
  r->loads_per_ttl =
      dur > 0 && s->ttl_ms > 0 ? (double)r->loads * (double)s->ttl_ms / (dur * 1000) : 0;
  r->server_usec_per_call = NAN, r->theory_loads_per_expiry = NAN, r->theory_early_ms = NAN;
  r->theory_given_r0 = NAN;
  free(ev), free(win.v), free(cold.v);
}

void result_free(result *r) {
  free(r->buckets);
  r->buckets = NULL;
}
