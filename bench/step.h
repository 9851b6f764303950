/* xfetch-bench: one way to say what went wrong in a scenario. A failed step
 * names the scenario, the step, the error's code and its message; errors a
 * measured step tolerates (a transient timeout on a loaded machine) are
 * counted, the first one described, and shown with the step's figures. */
#ifndef BENCH_STEP_H
#define BENCH_STEP_H

#include <hiredis/hiredis.h>
#include <stdint.h>

/* The scenario now running, named in every message (main sets it before each
 * scenario; forked workers and threads inherit it). */
void step_scenario(const char *name);
const char *step_scenario_name(void);

/* Errors counted in a measured step. Safe to fill from several threads, or
 * processes when it lives in shared memory; read once the writers ended. */
typedef struct step_errors {
  uint64_t n;
  int described;   /* first holds the first error */
  char first[320]; /* "<step>: XF_EIO (-4): <xf_strerror>: <xf_errmsg>" */
} step_errors;

/* The description of a hiredis failure: the context's error (REDIS_ERR_IO,
 * ...) and errstr, an error reply, or a reply of another type than wanted;
 * into buf. */
const char *step_redis_error(char *buf, size_t cap, const redisContext *c,
                             const redisReply *r);

/* Prints "xfetch-bench: <scenario>: <step>: XF_<NAME> (rc): <message>: <detail>"
 * on stderr. Returns -1, so a scenario can `return step_failed(...)`. */
int step_failed(const char *step, int rc, const char *detail);
/* The same for a hiredis step (c and r as step_redis_error). */
int step_failed_redis(const char *step, const redisContext *c, const redisReply *r);
/* The same for a step that failed without an error code (what: why). */
int step_failed_because(const char *step, const char *why);

/* Counts one error of a measured step (and describes it when it is the first). */
void step_count(step_errors *e, const char *step, int rc, const char *detail);
void step_count_redis(step_errors *e, const char *step, const redisContext *c,
                      const redisReply *r);
/* Counts an error that has no code (a hit served from elsewhere than the
 * cache, a reply of the wrong size): why says what. */
void step_count_because(step_errors *e, const char *step, const char *why);
/* Describes an error counted elsewhere (the arena's samples), if none is yet. */
void step_describe(step_errors *e, const char *step, int rc, const char *detail);
void step_describe_redis(step_errors *e, const char *step, const redisContext *c,
                         const redisReply *r);
/* Adds what another step_errors counted (its first description kept if none). */
void step_merge(step_errors *into, const step_errors *from);

/* When e counted errors: "xfetch-bench: <scenario>: <what>: N of M calls failed,
 * counted in its figures (first: ...)" on stderr. */
void step_errors_report(const char *what, const step_errors *e, uint64_t calls);
/* A figure the errors left without meaning: "xfetch-bench: <scenario>: <what>:
 * <figure> not measured: <why> (N errors, first: ...)". Returns -1. */
int step_meaningless(const char *what, const char *figure, const char *why,
                     const step_errors *e);

#endif
