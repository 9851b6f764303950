/* xfetch-bench: the project's goals ("hits at the price of a GET"). Each goal is
 * a ratio that one scenario of the run measures (hit_overhead, batch,
 * hit_cost) and compares with its limit; they are printed together after the
 * summary and written to the JSON's "goals", so the before and after of the
 * hit path are read off one run. */
#ifndef BENCH_GOALS_H
#define BENCH_GOALS_H

#include <stdio.h>

/* Records the measured ratio of goal id (an id of the table in goals.c;
 * unknown ids are a bug and abort). */
void goal_set(const char *id, double measured);
/* The goals block of the table: every goal, measured or not. */
void goals_print(FILE *f);
/* `"goals": [...]` (no trailing comma or newline). */
void goals_json(FILE *f);

#endif
