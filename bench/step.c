/* A scenario's failed steps and counted errors (bench/step.h). */
#include <stdio.h>
#include <string.h>

#include "step.h"
#include "xfetch.h"

static const char *scenario = "setup";

void step_scenario(const char *name) { scenario = name ? name : "setup"; }

const char *step_scenario_name(void) { return scenario; }

static const char *redis_err_name(int err) {
  switch (err) {
  case REDIS_ERR_IO:
    return "REDIS_ERR_IO";
  case REDIS_ERR_EOF:
    return "REDIS_ERR_EOF";
  case REDIS_ERR_PROTOCOL:
    return "REDIS_ERR_PROTOCOL";
  case REDIS_ERR_OOM:
    return "REDIS_ERR_OOM";
  default:
    return "REDIS_ERR_OTHER";
  }
}

const char *step_redis_error(char *buf, size_t cap, const redisContext *c,
                             const redisReply *r) {
  if (c && c->err)
    snprintf(buf, cap, "%s (%d): %s", redis_err_name(c->err), c->err, c->errstr);
  else if (!c)
    snprintf(buf, cap, "no connection (it could not be opened)");
  else if (r && r->type == REDIS_REPLY_ERROR)
    snprintf(buf, cap, "error reply: %s", r->str);
  else if (r && r->type == REDIS_REPLY_NIL)
    snprintf(buf, cap, "nil reply (the key is missing)");
  else if (r)
    snprintf(buf, cap, "unexpected reply (type %d)", r->type);
  else
    snprintf(buf, cap, "no reply");
  return buf;
}

static void describe(char *buf, size_t cap, const char *step, int rc, const char *detail) {
  snprintf(buf, cap, "%s: XF_%s (%d): %s%s%s", step, xf_errname(rc), rc, xf_strerror(rc),
           detail && *detail ? ": " : "", detail && *detail ? detail : "");
}

int step_failed(const char *step, int rc, const char *detail) {
  char d[400];
  describe(d, sizeof d, step, rc, detail);
  fprintf(stderr, "xfetch-bench: %s: %s\n", scenario, d);
  return -1;
}

int step_failed_redis(const char *step, const redisContext *c, const redisReply *r) {
  char e[300];
  fprintf(stderr, "xfetch-bench: %s: %s: %s\n", scenario, step,
          step_redis_error(e, sizeof e, c, r));
  return -1;
}

int step_failed_because(const char *step, const char *why) {
  fprintf(stderr, "xfetch-bench: %s: %s: %s\n", scenario, step, why);
  return -1;
}

/* The first writer to claim the description writes it; it is read only
 * after every writer ended (joined, or waited for). */
static int claim(step_errors *e) {
  int no = 0;
  return __atomic_compare_exchange_n(&e->described, &no, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

void step_describe(step_errors *e, const char *step, int rc, const char *detail) {
  if (claim(e))
    describe(e->first, sizeof e->first, step, rc, detail);
}

void step_describe_redis(step_errors *e, const char *step, const redisContext *c,
                         const redisReply *r) {
  if (claim(e)) {
    char d[300];
    snprintf(e->first, sizeof e->first, "%s: %s", step,
             step_redis_error(d, sizeof d, c, r));
  }
}

void step_count(step_errors *e, const char *step, int rc, const char *detail) {
  __atomic_add_fetch(&e->n, 1, __ATOMIC_RELAXED);
  step_describe(e, step, rc, detail);
}

void step_count_redis(step_errors *e, const char *step, const redisContext *c,
                      const redisReply *r) {
  __atomic_add_fetch(&e->n, 1, __ATOMIC_RELAXED);
  step_describe_redis(e, step, c, r);
}

void step_count_because(step_errors *e, const char *step, const char *why) {
  __atomic_add_fetch(&e->n, 1, __ATOMIC_RELAXED);
  if (claim(e))
    snprintf(e->first, sizeof e->first, "%s: %s", step, why);
}

void step_merge(step_errors *into, const step_errors *from) {
  uint64_t n = __atomic_load_n(&from->n, __ATOMIC_ACQUIRE);
  __atomic_add_fetch(&into->n, n, __ATOMIC_RELAXED);
  if (__atomic_load_n(&from->described, __ATOMIC_ACQUIRE) && claim(into))
    snprintf(into->first, sizeof into->first, "%s", from->first);
}

static const char *first_of(const step_errors *e) {
  return __atomic_load_n(&e->described, __ATOMIC_ACQUIRE) ? e->first : "not described";
}

void step_errors_report(const char *what, const step_errors *e, uint64_t calls) {
  uint64_t n = __atomic_load_n(&e->n, __ATOMIC_ACQUIRE);
  if (n)
    fprintf(stderr,
            "xfetch-bench: %s: %s: %llu of %llu calls failed, counted in its figures "
            "(first: %s)\n",
            scenario, what, (unsigned long long)n, (unsigned long long)calls, first_of(e));
}

int step_meaningless(const char *what, const char *figure, const char *why,
                     const step_errors *e) {
  uint64_t n = e ? __atomic_load_n(&e->n, __ATOMIC_ACQUIRE) : 0;
  if (n)
    fprintf(stderr, "xfetch-bench: %s: %s: %s not measured: %s (%llu errors, first: %s)\n",
            scenario, what, figure, why, (unsigned long long)n, first_of(e));
  else
    fprintf(stderr, "xfetch-bench: %s: %s: %s not measured: %s\n", scenario, what, figure,
            why);
  return -1;
}
